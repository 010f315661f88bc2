#!/usr/bin/env bash
# The GPU check, one prepared script for a machine with NVIDIA GPUs: builds
# with CUDA, runs the tests that CI (no GPU) can only skip, and writes every
# log where the caller can fetch it.
#
#   ci/gpu-check.sh
#
# Logs go to $OUT when set (a device machine's output folder), else to
# ./gpu-check-out: one NAME.log per step, summary.txt, table.txt (per
# scenario: verdict on the GPU, CPU-vs-GPU max relative difference, GPU
# run-to-run bitwise, time), and golden/<scenario>/cuda.h5: the CUDA
# goldens recorded here, calibrated from 5 repeats (record --repeat 5), to
# be committed under golden/ (the device machine cannot push).
# Build folder: build/gpu (Release). Each step has a time limit; the whole
# script stays under 8 minutes. Exits 1 if any step fails, and also if
# test_cuda skips a test although nvidia-smi lists a GPU (a silent skip is
# not a pass).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$PWD/gpu-check-out}
build=$root/build/gpu
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 4)
failed=0
summary=$out/summary.txt
: >"$summary"

# step NAME LIMIT_SECONDS COMMAND...: runs it with its output in NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local line
  if [ $rc -eq 0 ]; then
    line=$(printf '%-18s ok      %4ds' "$name" $((SECONDS - start)))
  else
    [ $rc -eq 124 ] && echo "(timed out after ${limit}s)" >>"$out/$name.log"
    line=$(printf '%-18s FAILED  %4ds  exit %d, see %s.log' "$name" $((SECONDS - start)) \
      $rc "$name")
    failed=1
    tail -n 25 "$out/$name.log"
  fi
  echo "$line" | tee -a "$summary"
  return $rc
}

cd "$root" || exit 1
gpus=0
if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 30 nvidia-smi
  cat "$out/nvidia-smi.log"
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
else
  echo "nvidia-smi not found" | tee "$out/nvidia-smi.log"
fi
echo "GPUs listed: $gpus" | tee -a "$summary"

step configure 180 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release || exit 1
grep -q 'CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt" ||
  { echo "configure: CMake found no nvcc: no CUDA backend" | tee -a "$summary"; exit 1; }
targets=(test_cuda test_cuda_backend test_backend test_backend_equiv test_scenarios
         test_comm_nccl bench_allreduce dlcheck)
step build 300 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || exit 1

# no_skips NAME: a GPU test that skipped on a machine with GPUs failed.
no_skips() {
  if [ "$gpus" -gt 0 ] && grep -q 'SKIPPED' "$out/$1.log"; then
    printf '%-18s FAILED  skipped tests with %d GPU(s) listed:\n' "$1" "$gpus" | tee -a "$summary"
    grep 'no CUDA device' "$out/$1.log" | head -3 | tee -a "$summary"
    failed=1
  fi
}
step test_cuda 120 "$build/tests/test_cuda"
no_skips test_cuda
step test_cuda_backend 120 "$build/tests/test_cuda_backend"
no_skips test_cuda_backend
step test_backend 60 "$build/tests/test_backend"
step test_backend_equiv 60 "$build/tests/test_backend_equiv"
# Every scenario on the CPU backend; backend_equiv's CUDA runs really run.
step test_scenarios 240 "$build/tests/test_scenarios"
grep -q 'backend_equiv *skipped' "$out/test_scenarios.log" && [ "$gpus" -gt 0 ] &&
  { echo "test_scenarios     FAILED  backend_equiv skipped with GPUs listed" | tee -a "$summary"; failed=1; }
step test_comm_nccl 120 "$build/tests/test_comm_nccl"
if [ -f "$build/engine/libdlcomm_nccl.a" ] && [ "$gpus" -gt 0 ]; then
  step bench_allreduce 120 "$build/bench/bench_allreduce" --comm nccl --threads "$gpus" \
    --max-bytes $((1 << 26))
else
  echo "bench_allreduce    not run (nccl backend not built or no GPU)" | tee -a "$summary"
fi
step dlcheck-env 60 "$build/cli/dlcheck" env
cat "$out/dlcheck-env.log"

# The scenarios on the GPU: CUDA goldens recorded here first, then every
# scenario with its pitfalls against them, then once more to see the GPU
# repeat itself bit for bit, and once on the CPU for the comparison.
dlcheck=$build/cli/dlcheck
golden=$out/golden
# Calibrated: 5 repeats each (run-to-run, deterministic and fastest cuDNN
# algorithms alternating), so the first GPU run records envelopes, not
# single traces, and later CUDA/cuDNN upgrades are gated by them
# (docs/calibrated-goldens.md); calibration.log holds each golden's
# tightest rules.
step record-cuda 300 "$dlcheck" record --repeat 5 --backend cuda --golden-dir "$golden" scenarios
step run-cuda 300 "$dlcheck" run --backend cuda --pitfalls --golden-dir "$golden" \
  --out "$out/cuda-run" scenarios
step run-cuda-again 240 "$dlcheck" run --backend cuda --golden-dir "$golden" \
  --out "$out/cuda-again" scenarios
step run-cpu 120 "$dlcheck" run --out "$out/cpu-run" scenarios

# max_rel A B: the largest relative difference `dlcheck compare` reports.
max_rel() {
  "$dlcheck" compare --tolerance 'close(1e-4, 1e-5)' "$1" "$2" 2>&1 |
    sed -n 's/.*max rel \([^,)]*\).*/\1/p' | head -1
}
table=$out/table.txt
printf '%-16s %-8s %-14s %-12s %s\n' scenario verdict cpu-vs-gpu gpu-repeats time >"$table"
for dir in scenarios/*/; do
  name=$(basename "$dir")
  [ -f "$dir/scenario.yaml" ] || continue
  verdict=$(grep -Eo "^  (ok|FAILED)  $name:" "$out/run-cuda.log" | awk '{print $1}')
  secs=$(grep -E "^  (ok|FAILED)  $name:" "$out/run-cuda.log" | grep -Eo '\([0-9.]+ s\)' | tr -d '()')
  worst=0 repeats=n/a # no GPU traces: the run step failed or skipped
  for t in "$out/cuda-run/traces/$name/pipeline/"*.h5; do
    [ -f "$t" ] || continue
    [ "$repeats" = n/a ] && repeats=yes
    run=$(basename "$t")
    cpu=$out/cpu-run/traces/$name/pipeline/$run
    [ -f "$cpu" ] && worst=$(printf '%s\n%s\n' "$worst" "$(max_rel "$t" "$cpu")" | sort -g | tail -1)
    again=$out/cuda-again/traces/$name/pipeline/$run
    "$dlcheck" compare "$t" "$again" >/dev/null 2>&1 || repeats=NO
  done
  printf '%-16s %-8s %-14s %-12s %s\n' "$name" "${verdict:-?}" "$worst" "$repeats" "${secs:-?}" >>"$table"
  [ "$repeats" = NO ] && failed=1
done
echo
cat "$table"

echo
echo "== gpu-check summary (logs in $out; CUDA goldens in $golden: copy to golden/)"
cat "$summary"
exit $failed
