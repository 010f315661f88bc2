#!/usr/bin/env bash
# The harness's stages (docs/design.md, "Layout") include only themselves
# and the stages before them: prints the include graph of checks/ (which
# stage includes which, with counts) and fails on an arrow that points to a
# later stage. Usage: ci/check-stages.sh
set -euo pipefail
cd "$(dirname "$0")/.."
stages=(trace judge store scenario run report)
rank() { local i; for i in "${!stages[@]}"; do [ "${stages[$i]}" = "$1" ] && echo "$i"; done; }
for d in checks/*/; do
  d=$(basename "$d")
  [ -n "$(rank "$d")" ] || { echo "checks/$d: not a stage listed in ci/check-stages.sh and docs/design.md"; exit 1; }
done
bad=0
for from in "${stages[@]}"; do
  line="$from ->"
  for to in "${stages[@]}"; do
    n=$(cat checks/"$from"/*.[ch] | grep -c "^#include \"$to/" || true)
    [ "$n" -eq 0 ] && continue
    line+=" $to ($n)"
    if [ "$(rank "$to")" -gt "$(rank "$from")" ]; then
      echo "checks/$from includes the later stage $to:"
      grep -n "^#include \"$to/" checks/"$from"/*.[ch]
      bad=1
    fi
  done
  echo "$line"
done
exit "$bad"
