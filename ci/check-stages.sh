#!/usr/bin/env bash
# The include rules of docs/design.md ("Layout"), checked:
#   - checks/: a stage includes only itself and the stages before it;
#   - engine/: a folder includes only the folders its row of `may` names,
#     and nothing outside engine/ (the engine knows nothing of the harness);
#   - a header named *_internal.h is included only from its own folder;
#   - no circle between files of engine/, checks/ or cli/ (a .c and its .h
#     are one node): A includes B's header, B includes A's.
# Prints the folder graph (who includes whom, with counts), then fails on
# any arrow the rules forbid.
#
# With --objects BUILD, also the circles the includes cannot see: which
# object file calls which (nm: an undefined symbol of one .o defined by
# another) in BUILD's engine/, checks/ and cli/ objects, with one loop
# allowed by name (ALLOWED_LOOP below).
#
# Usage: ci/check-stages.sh [--objects BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
objects=""
case "${1-}" in
"") ;;
--objects) objects=${2:?"--objects needs a build directory (e.g. build/release)"} ;;
-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "check-stages.sh: unknown argument '$1' (usage: ci/check-stages.sh [--objects BUILD])" >&2; exit 2 ;;
esac

# A residual block's body is a sequence of layers, which the registry
# builds: registry.c -> residual.c -> seq.c -> registry.c.
ALLOWED_LOOP="engine/nn/kinds/registry engine/nn/kinds/residual engine/nn/seq"

declare -A may
stages=(trace judge store scenario run report)
for i in "${!stages[@]}"; do may[checks/${stages[$i]}]="${stages[*]:0:$((i + 1))}"; done
may[engine/core]="core"
may[engine/numerics]="core numerics"
may[engine/backend]="core numerics backend backend/cpu"
may[engine/backend/cpu]="core numerics backend/cpu"
may[engine/backend/perturb]="core numerics backend backend/perturb"
may[engine/backend/cuda]="core numerics backend backend/cuda"
may[engine/comm]="core numerics comm"
may[engine/nn]="core numerics backend backend/cpu nn nn/kinds"
may[engine/nn/kinds]="core numerics backend backend/cpu nn nn/kinds"
may[engine/optim]="core numerics nn optim"
may[engine/io]="core numerics nn optim io"
may[engine/data]="core numerics io data"

bad=0
fail() { echo "FORBIDDEN: $*"; bad=1; }

# Every folder holding sources has a row.
while read -r dir; do
  [ -n "${may[$dir]+x}" ] || fail "$dir: a folder with no row in ci/check-stages.sh's table (add it, and to docs/design.md)"
done < <(find engine checks -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | xargs -n1 dirname | sort -u)

# "file<TAB>included" for every quoted include, resolved as the compiler
# does: beside the file, else from the include roots (its own, engine/,
# checks/; no include climbs with "..").
includes=$(find engine checks cli \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
  xargs -0 grep -H '^#include "' | sed 's/:#include "\([^"]*\)".*/\t\1/' |
  while IFS=$'\t' read -r file inc; do
    for cand in "${file%/*}/$inc" "${file%%/*}/$inc" "engine/$inc" "checks/$inc"; do
      if [ -f "$cand" ]; then printf '%s\t%s\n' "$file" "$cand"; continue 2; fi
    done
    printf '%s\t?%s\n' "$file" "$inc"
  done)

folder_graph=$(while IFS=$'\t' read -r file to; do
  from=${file%/*}
  [ -n "${may[$from]+x}" ] || continue
  if [ "${to:0:1}" = "?" ]; then fail "$file includes \"${to:1}\", which is no file of the tree"; continue; fi
  tdir=${to%/*}
  case "$to" in *_internal.h) [ "$tdir" = "$from" ] || fail "$file includes $to, internal to $tdir/" ;; esac
  froot=${from%%/*}
  troot=${tdir%%/*}
  [ "$froot" = checks ] && [ "$troot" != checks ] && continue # the harness builds on the engine
  [ "$froot" = engine ] && [ "$troot" != engine ] && { fail "$file includes $to: the engine includes nothing outside engine/"; continue; }
  rel=${tdir#"$froot"/}
  [ "$tdir" = "$from" ] && continue
  [[ " ${may[$from]} " == *" $rel "* ]] || fail "$file includes $to: $from/ may include only ${may[$from]}"
  echo "$from -> $tdir"
done <<<"$includes")
# The failures were printed by the subshell; its exit status says if any.
printf '%s\n' "$folder_graph" | grep -v '^FORBIDDEN' | sort | uniq -c | awk '{print $2, $3, $4, "(" $1 ")"}'
if printf '%s\n' "$folder_graph" | grep '^FORBIDDEN'; then bad=1; fi

# Circles: one node per module, a .c (or .cu) with its header, named by
# the path without extension. A header with no .c of its own (kinds.h,
# runner_internal.h) is no node: what it includes counts for the files
# that include it.
loops() { # stdin: "from to" edges; prints tsort's loop report, if any
  { tsort 2>&1 >/dev/null || true; } |
    sed -n 's/^tsort: -: input contains a loop:/loop:/p; s/^tsort: \([^-].*\)/  \1/p'
}
module_edges() { # stdin: "file<TAB>included"; prints "module module"
  awk -F'\t' '
    function stem(f) { sub(/\.[a-z]+$/, "", f); return f }
    function follow(f, from,   i, to) {
      for (i = 1; i <= n[f]; i++) {
        to = inc[f, i]
        if (!(to in impl) && to ~ /\.(h|cuh)$/) {
          if (!((from, to) in seen)) { seen[from, to] = 1; follow(to, from) }
        } else if (stem(to) != from) print from, stem(to)
      }
    }
    substr($2, 1, 1) != "?" { inc[$1, ++n[$1]] = $2; files[$1] = 1; files[$2] = 1 }
    END {
      for (f in files) if (f ~ /\.(c|cu)$/) { impl[stem(f) ".h"] = 1; impl[stem(f) ".cuh"] = 1 }
      for (f in files) if (f in impl || f !~ /\.(h|cuh)$/) follow(f, stem(f))
    }' | sort -u
}
found=$(printf '%s\n' "$includes" | module_edges | loops)
if [ -n "$found" ]; then
  echo "FORBIDDEN: files that include each other (move what both need into a header of its own):"
  echo "$found"
  bad=1
else
  echo "no include circle between $(printf '%s\n' "$includes" | cut -f1 | sort -u | wc -l) files"
fi

if [ -n "$objects" ]; then
  [ -d "$objects" ] || { echo "check-stages.sh: no build directory '$objects'" >&2; exit 2; }
  # An object's module: build/x/engine/CMakeFiles/t.dir/nn/seq.c.o -> engine/nn/seq
  mapfile -t objs < <(find "$objects" -path '*/CMakeFiles/*.dir/*' -name '*.o' |
    grep -E "^$objects/(engine|checks|cli)/" | sort)
  [ "${#objs[@]}" -gt 0 ] || { echo "check-stages.sh: no object files of engine/, checks/ or cli/ under '$objects' (build it first)" >&2; exit 2; }
  # nm -A: "OBJECT:[ADDRESS] TYPE SYMBOL" (no blank before a defined one's address); OBJECT's module as above.
  symbols() { # NM-FLAGS...: "SYMBOL MODULE" for the objects' symbols of that kind
    nm -A "$@" "${objs[@]}" | awk -v build="$objects/" '{
      o = $0; sub(/\.o:.*/, ".o", o); o = substr(o, length(build) + 1)
      dir = o; sub(/\/CMakeFiles\/.*/, "", dir)
      rest = o; sub(/.*\/CMakeFiles\/[^\/]*\.dir\//, "", rest); sub(/\.[a-z]+\.o$/, "", rest)
      print $NF, dir "/" rest }' | sort -u
  }
  defs=$(symbols -g --defined-only)
  uses=$(symbols -u)
  edges=$(join <(echo "$uses") <(echo "$defs") | awk '$2 != $3 {print $2, $3}' | sort -u)
  allowed() { [[ " $ALLOWED_LOOP " == *" $1 "* && " $ALLOWED_LOOP " == *" $2 "* ]]; }
  found=$(echo "$edges" | while read -r a b; do allowed "$a" "$b" || echo "$a $b"; done | loops)
  if [ -n "$found" ]; then
    echo "FORBIDDEN: object files that call each other (a shared header, or a table of function pointers):"
    echo "$found"
    bad=1
  else
    echo "no call circle between ${#objs[@]} objects ($(echo "$edges" | wc -l) caller -> callee pairs; allowed: $ALLOWED_LOOP)"
  fi
fi
exit "$bad"
