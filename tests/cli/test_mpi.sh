#!/usr/bin/env bash
# dlcheck across processes: `dlcheck run --comm mpi` under mpirun -np W for
# ddp_equiv (W = 2 and 3, so that padding matters) and determinism (W = 3:
# reordering two addends changes nothing, so N2 needs three ranks), with
# every pitfall variant. The ordered allreduce must give traces bitwise
# identical to the in-process ranks of the local backend.
# Usage: test_mpi.sh PATH/TO/dlcheck
set -u
DLCHECK=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export DLCHECK_ROOT=$ROOT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none \
  OMPI_MCA_plm_rsh_agent=false OMPI_MCA_rmaps_base_oversubscribe=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlcheck-mpi-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && tail -30 "$2" | sed 's/^/     /'; }

run_mpi() { # W NAME SCENARIO...
  local w=$1 name=$2
  shift 2
  timeout 600 mpirun -np "$w" "$DLCHECK" run --comm mpi --pitfalls --out "$WORK/mpi-$name-$w" \
    "$@" >"$WORK/out" 2>&1
  local code=$?
  [ "$code" -eq 0 ] && ok "mpirun -np $w: $name passes, every pitfall caught" \
    || bad "mpirun -np $w: $name (exit $code)" "$WORK/out"
  grep -q "MISSED" "$WORK/out" && bad "mpirun -np $w: $name missed a pitfall" "$WORK/out"
  "$DLCHECK" run --world "$w" --out "$WORK/local-$name-$w" "$@" >"$WORK/out" 2>&1 \
    || bad "local --world $w: $name" "$WORK/out"
  for trace in "$WORK/mpi-$name-$w"/traces/*/pipeline/*.h5; do
    local rel=${trace#"$WORK/mpi-$name-$w/"}
    "$DLCHECK" compare "$trace" "$WORK/local-$name-$w/$rel" >"$WORK/out" 2>&1 \
      && ok "np $w: $rel bitwise equal to the local backend's" \
      || bad "np $w: $rel differs from the local backend's" "$WORK/out"
  done
}

run_mpi 2 ddp "$ROOT/scenarios/ddp_equiv"
run_mpi 3 ddp "$ROOT/scenarios/ddp_equiv"
run_mpi 3 determinism "$ROOT/scenarios/determinism"

# A rank killed (DLCHECK_FAILPOINT=kill_rank_1, as its first run starts):
# the job fails, and no rank prints a PASS line or a "0 failed" summary for
# the runs it could not finish: the survivor either reports its timed-out
# collective as an ERROR or is stopped by mpirun's SIGTERM and says so.
DLCHECK_FAILPOINT=kill_rank_1 DLCHECK_COMM_TIMEOUT=5 timeout 120 mpirun -np 2 "$DLCHECK" run \
  --comm mpi --out "$WORK/killed" "$ROOT/scenarios/ddp_equiv" >"$WORK/out" 2>&1
code=$?
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] && ok "a killed rank fails the job (exit $code)" ||
  bad "a killed rank: exit $code" "$WORK/out"
if grep -qE "PASS|[^0-9]0 failed" "$WORK/out"; then bad "a killed rank: a PASS line was printed" "$WORK/out"
else ok "a killed rank: no PASS line, no '0 failed'"; fi
grep -qE "ERROR|timed out|stopped by SIG" "$WORK/out" && ok "a killed rank: the survivor says why" ||
  bad "a killed rank: the survivor says nothing" "$WORK/out"
! grep -qs '"ok": true' "$WORK/killed/report.json" && ok "a killed rank: no report claims success" ||
  bad "a killed rank: a report claims success" "$WORK/killed/report.json"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
