# What every tests/cli/test_*.sh shares: sourced after `DLCHECK=$1`.
# Sets HERE, ROOT, WORK (a private scratch folder under $TMPDIR, removed on
# exit, with a copy of the small scenario in $WORK/small) and GOLDEN, and
# defines ok/bad/expect/contains/no_temporaries and finish (the summary and exit status).
HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export DLCHECK_ROOT=$ROOT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlcheck-cli-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp -r "$HERE/small" "$WORK/small"
GOLDEN="$WORK/golden"
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | head -20; }

# expect CODE NAME CMD...: runs CMD, output in $WORK/out, checks the exit code.
expect() {
  local code=$1 name=$2
  shift 2
  "$@" >"$WORK/out" 2>&1
  local got=$?
  if [ "$got" -eq "$code" ]; then ok "$name"; else bad "$name (exit $got, expected $code)" "$WORK/out"; fi
}
# contains NAME TEXT: the last command's output contains TEXT.
contains() {
  if grep -qF -- "$2" "$WORK/out"; then ok "$1"; else bad "$1 (no '$2' in output)" "$WORK/out"; fi
}
# no_temporaries NAME DIR...: no atomic writer's PATH.tmp.PID.N below DIR.
no_temporaries() { # NAME DIR...
  local name=$1
  shift
  if find "$@" -name '*.tmp.*' 2>/dev/null | grep -q .; then
    bad "$name"
    find "$@" -name '*.tmp.*' | sed 's/^/     /'
  else ok "$name"; fi
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
