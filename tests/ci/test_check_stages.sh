#!/usr/bin/env bash
# ci/check-stages.sh fails on what docs/design.md forbids and passes the
# tree as it is: run on a copy of engine/, checks/ and cli/, each case
# breaks the copy in one way (a forbidden include, an include circle, an
# internal header used outside its folder, a folder with no rule, a call
# circle between object files) and expects the failure, naming the files.
# Usage: tests/ci/test_check_stages.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlcheck-stages-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; sed 's/^/     /' "$WORK/out" | tail -15; }

fresh() { # a pristine copy of the tree in $WORK/tree
  rm -rf "$WORK/tree"
  mkdir -p "$WORK/tree/ci"
  cp -r "$ROOT/engine" "$ROOT/checks" "$ROOT/cli" "$WORK/tree/"
  cp "$ROOT/ci/check-stages.sh" "$WORK/tree/ci/"
}
# expect CODE NAME TEXT [ARGS...]: check-stages.sh on the copy exits CODE and prints TEXT.
expect() {
  local code=$1 name=$2 text=$3
  shift 3
  bash "$WORK/tree/ci/check-stages.sh" "$@" >"$WORK/out" 2>&1
  local got=$?
  if [ "$got" -ne "$code" ]; then bad "$name (exit $got, expected $code)"
  elif ! grep -qF -- "$text" "$WORK/out"; then bad "$name (no '$text' in output)"
  else ok "$name"; fi
}
add_include() { # FILE HEADER: FILE gains #include "HEADER" after its first include
  sed -i "0,/^#include \"/s|^\(#include \"[^\"]*\"\)|\1\n#include \"$2\"|" "$WORK/tree/$1"
}
# breaks FILE HEADER NAME TEXT: a fresh copy where FILE includes HEADER fails, printing TEXT.
breaks() {
  fresh
  add_include "$1" "$2"
  expect 1 "$3" "$4"
}

fresh
expect 0 "the tree as it is passes" "no include circle between"

breaks engine/core/tensor.c data/loader.h "engine: a folder including one its row does not name" \
  "engine/core/tensor.c includes engine/data/loader.h: engine/core/ may include only core"
breaks engine/optim/optim.c judge/verdict.h "engine: an include of the harness" \
  "the engine includes nothing outside engine/"
breaks checks/trace/trace.c run/runner.h "checks: a stage including a later one" \
  "checks/trace/trace.c includes checks/run/runner.h"
breaks engine/nn/kinds/conv2d.c backend/cpu/gemm_internal.h "an internal header outside its folder" \
  "internal to engine/backend/cpu/"
breaks engine/core/mem.c core/nowhere.h "an include of no file" "which is no file of the tree"
breaks engine/nn/layer.c nn/seq.h "two files that include each other" "files that include each other"
grep -q "engine/nn/seq" "$WORK/out" && grep -q "engine/nn/layer" "$WORK/out" &&
  ok "the circle names both files" || bad "the circle names both files"

fresh
mkdir "$WORK/tree/engine/extra"
echo 'int dl_extra;' >"$WORK/tree/engine/extra/extra.c"
expect 1 "a folder with no rule" "engine/extra: a folder with no row"

# Object files: a.c and b.c call each other; registry/residual/seq may.
fresh
objdir() { mkdir -p "$WORK/build/engine/CMakeFiles/dlengine.dir/$1" && echo "$WORK/build/engine/CMakeFiles/dlengine.dir/$1"; }
compile() { # DIR NAME DEFINES CALLS
  printf 'void %s(void);\nvoid %s(void) { %s(); }\n' "$4" "$3" "$4" >"$WORK/$2.c"
  cc -c -o "$1/$2.c.o" "$WORK/$2.c"
}
compile "$(objdir core)" a dl_a dl_b
compile "$(objdir core)" b dl_b dl_a
expect 1 "objects that call each other" "object files that call each other" --objects "$WORK/build"
grep -q "engine/core/a" "$WORK/out" && grep -q "engine/core/b" "$WORK/out" &&
  ok "the call circle names both objects" || bad "the call circle names both objects"

rm -rf "$WORK/build"
compile "$(objdir nn/kinds)" registry dl_registry dl_residual
compile "$(objdir nn/kinds)" residual dl_residual dl_seq
compile "$(objdir nn)" seq dl_seq dl_registry
expect 0 "the residual loop is allowed by name" "no call circle between 3 objects" --objects "$WORK/build"

expect 2 "--objects of no directory" "no build directory" --objects "$WORK/nowhere"
expect 2 "an unknown argument" "unknown argument" --bogus

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
