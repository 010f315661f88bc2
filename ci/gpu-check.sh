#!/usr/bin/env bash
# The GPU check, one prepared script for a machine with NVIDIA GPUs: builds
# with CUDA, runs the tests that CI (no GPU) can only skip, and writes every
# log where the caller can fetch it.
#
#   ci/gpu-check.sh
#
# Logs go to $OUT when set (a device machine's output folder), else to
# ./gpu-check-out: nvidia-smi.log, configure.log, build.log, test_cuda.log,
# test_comm_nccl.log, bench_allreduce.log, dlcheck-env.log, summary.txt.
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
targets=(test_cuda test_comm_nccl bench_allreduce dlcheck)
step build 300 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || exit 1

step test_cuda 120 "$build/tests/test_cuda"
if [ "$gpus" -gt 0 ] && grep -q 'SKIPPED' "$out/test_cuda.log"; then
  echo "test_cuda          FAILED  skipped tests with $gpus GPU(s) listed:" | tee -a "$summary"
  grep 'no CUDA device' "$out/test_cuda.log" | head -3 | tee -a "$summary"
  failed=1
fi
step test_comm_nccl 120 "$build/tests/test_comm_nccl"
if [ -f "$build/engine/libdlcomm_nccl.a" ] && [ "$gpus" -gt 0 ]; then
  step bench_allreduce 120 "$build/bench/bench_allreduce" --comm nccl --threads "$gpus" \
    --max-bytes $((1 << 26))
else
  echo "bench_allreduce    not run (nccl backend not built or no GPU)" | tee -a "$summary"
fi
step dlcheck-env 60 "$build/cli/dlcheck" env
cat "$out/dlcheck-env.log"

echo
echo "== gpu-check summary (logs in $out)"
cat "$summary"
exit $failed
