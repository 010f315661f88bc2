#!/usr/bin/env bash
# The CI gate: runs every scenario (with every pitfall variant) against the
# goldens for one backend, writes JUnit XML and the HTML report, and exits
# with dlcheck's code, so a pipeline fails when a check fails, a golden
# differs or a pitfall goes uncaught.
#
#   ci/gate.sh [--backend cpu|cuda] [--out DIR] [--dlcheck PATH] [SCENARIO_DIR...]
#
# Defaults: --backend cpu, --out dlcheck-report, every scenario under
# scenarios/, dlcheck from build/release (built if missing).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
backend=cpu out=dlcheck-report dlcheck="" scenarios=()
while (($#)); do
  case $1 in
    --backend) backend=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --dlcheck) dlcheck=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "gate: unknown option $1" >&2; exit 2 ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
if [ -z "$dlcheck" ]; then
  dlcheck=$root/build/release/cli/dlcheck
  if [ ! -x "$dlcheck" ]; then
    (cd "$root" && cmake --preset release >/dev/null && cmake --build build/release -j"$(nproc)" --target dlcheck) || exit 2
  fi
fi
((${#scenarios[@]})) || scenarios=("$root/scenarios")
"$dlcheck" env
echo
DLCHECK_ROOT=$root "$dlcheck" run --pitfalls --backend "$backend" --out "$out" "${scenarios[@]}"
code=$?
echo
echo "gate: exit $code; JUnit XML: $out/junit.xml, report: $out/report.html"
exit $code
