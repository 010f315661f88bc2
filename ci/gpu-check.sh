#!/usr/bin/env bash
# The GPU check, one prepared script for a machine with NVIDIA GPUs: builds
# with CUDA, runs the tests that CI (no GPU) can only skip, and writes every
# log where the caller can fetch it.
#
#   ci/gpu-check.sh                  build here (needs nvcc and ci/deps.sh's
#                                    packages), then check
#   ci/gpu-check.sh --pack DIR       build here, no check: copy the programs
#                                    and the shared libraries they need
#                                    (all but glibc's, the C++ runtime's and
#                                    CUDA's) into DIR
#   ci/gpu-check.sh --prebuilt DIR   check with DIR's programs (a GPU machine
#                                    without the build dependencies: the CUDA
#                                    libraries are taken from the machine)
#
# Logs go to $OUT when set (a device machine's output folder), else to
# ./gpu-check-out: one NAME.log per step, summary.txt, table.txt (per
# scenario: verdict on the GPU, CPU-vs-GPU max relative difference, time,
# GPU run-to-run bitwise: a run on cuDNN algorithms it calls
# non-deterministic is named there, not failed), and golden/<scenario>/cuda.h5: the CUDA
# goldens recorded here, calibrated from 5 repeats (record --repeat 5), to
# be committed under golden/ (the device machine cannot push). With $OUT
# set, the results are packed at the end into at most 8 files: summary.txt,
# table.txt, logs.tar.gz (logs and reports) and golden.tar.gz (split into
# 15 MiB parts when larger).
# Build folder: build/gpu (Release). Each step has a time limit, and all
# steps share GPU_CHECK_BUDGET seconds (default 420): a step is cut short
# or not run when the budget is spent. Exits 1 if any step fails, and also
# if test_cuda skips a test although nvidia-smi lists a GPU (a silent skip
# is not a pass).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=build dir=
case "${1:-}" in
  --pack | --prebuilt)
    [ $# -eq 2 ] || { echo "usage: ci/gpu-check.sh [--pack DIR | --prebuilt DIR]" >&2; exit 2; }
    mode=${1#--} dir=$(mkdir -p "$2" && cd "$2" && pwd) || exit 2 ;;
  "") ;;
  *) echo "usage: ci/gpu-check.sh [--pack DIR | --prebuilt DIR]" >&2; exit 2 ;;
esac
out=${OUT:-$PWD/gpu-check-out}
[ "$mode" = pack ] && out=$dir/log # the build's logs, beside what it packed
build=$root/build/gpu
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 4)
failed=0
summary=$out/summary.txt
: >"$summary"
budget_end=$((SECONDS + ${GPU_CHECK_BUDGET:-420}))

# pack_results: $OUT comes back from a device machine as at most 8 files.
pack_results() {
  [ -n "${OUT:-}" ] || return 0
  cd "$out" || return 0
  local rest
  rest=$(ls -A | grep -vxE 'summary.txt|table.txt|golden' | grep -v '^\.')
  # Traces stay behind (tens of MB); table.txt holds what they showed.
  [ -n "$rest" ] && tar czf logs.tar.gz --exclude=traces $rest && rm -rf $rest
  if [ -d golden ]; then
    tar czf golden.tar.gz golden && rm -rf golden
    if [ "$(stat -c %s golden.tar.gz)" -gt $((15 << 20)) ]; then
      split -b 15M -d golden.tar.gz golden.tar.gz.part- && rm golden.tar.gz
    fi
  fi
  ls -la "$out"
}
trap pack_results EXIT

# step NAME LIMIT_SECONDS COMMAND...: runs it with its output in NAME.log,
# within both its own limit and what is left of the budget.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget_end - SECONDS))
  if [ $left -lt 5 ]; then
    printf '%-18s FAILED  not run: GPU_CHECK_BUDGET spent\n' "$name" | tee -a "$summary"
    failed=1
    return 124
  fi
  [ $left -lt "$limit" ] && limit=$left
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

targets=(test_cuda test_cuda_backend test_backend test_backend_equiv test_scenarios
         test_comm_nccl bench_allreduce dlcheck)
# build_here: configure and build $build (needs nvcc).
build_here() {
  step configure 180 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" || exit 1
  grep -q 'CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt" ||
    { echo "configure: CMake found no nvcc: no CUDA backend" | tee -a "$summary"; exit 1; }
  step build 300 cmake --build "$build" -j"$jobs" --target "${targets[@]}" || exit 1
}

# Libraries a packed program finds on the GPU machine itself: glibc's, the
# C++ runtime's (a newer one there must win) and CUDA's (the driver's match).
system_lib='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|libz)\.so'
cuda_lib='^lib(cuda|cudart|cublas|cublasLt|cudnn|nccl)[a-z_]*\.so'

# pack: the programs, their libraries, the source folder they were built
# for (DL_SOURCE_DIR) and the CUDA libraries they need, into $dir.
pack() {
  build_here -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON # MPI is not what the GPU check tests
  rm -rf "$dir"/bin "$dir"/lib && mkdir -p "$dir"/bin "$dir"/lib || exit 1
  local t
  for t in "${targets[@]}"; do
    find "$build" -type f -name "$t" -perm -u+x -exec cp {} "$dir"/bin/ \;
    [ -x "$dir/bin/$t" ] || { echo "pack: $t not built" >&2; exit 1; }
  done
  [ -f "$build/engine/libdlcomm_nccl.a" ] && touch "$dir"/has_nccl
  echo "$root" >"$dir"/source_dir
  ldd "$dir"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      if [[ $name =~ $cuda_lib ]]; then echo "$name"
      elif ! [[ $name =~ $system_lib ]]; then cp -L "$path" "$dir/lib/$name"; fi
    done | sort -u >"$dir"/cuda_needed
  echo "packed into $dir: $(ls "$dir"/bin | wc -l) programs, $(ls "$dir"/lib | wc -l)" \
    "libraries, $(du -sh "$dir" | cut -f1); on the GPU: ci/gpu-check.sh --prebuilt $dir"
}

# use_prebuilt: point the steps at $dir's programs; find the CUDA libraries
# they need on this machine; make the source folder they were built for
# lead here (their tests read fixtures through it).
use_prebuilt() {
  local lib_dirs=$dir/lib name found src args=() candidates known
  known=$(ldconfig -p 2>/dev/null)
  while read -r name; do
    grep -q "^[[:space:]]*$name " <<<"$known" ||
      args+=(${args[0]+-o} -name "$name")
  done <"$dir"/cuda_needed
  # One walk for all (the Python packages' trees are large); CUDA's own
  # folders first.
  ((${#args[@]})) && candidates=$(find /usr/local /opt /usr/lib \( "${args[@]}" \) 2>/dev/null |
    awk '{print (index($0, "/usr/local/cuda") == 1 ? 0 : 1), $0}' | sort -k1,1n -s | cut -d' ' -f2-)
  while read -r name; do
    grep -q "^[[:space:]]*$name " <<<"$known" && continue
    found=$(grep -m1 "/$name\$" <<<"${candidates:-}")
    if [ -n "$found" ]; then
      lib_dirs=$lib_dirs:$(dirname "$found")
      echo "prebuilt: $name from $found" | tee -a "$summary"
    else
      echo "prebuilt: $name not found on this machine" | tee -a "$summary"
    fi
  done <"$dir"/cuda_needed
  export LD_LIBRARY_PATH=$lib_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  ldd "$dir"/bin/* | grep 'not found' | sort -u | sed 's/^/prebuilt: missing /' | tee -a "$summary"
  src=$(cat "$dir"/source_dir)
  if [ "$src" != "$root" ]; then
    if [ -e "$src" ] && [ "$(cd "$src" && pwd -P)" != "$(pwd -P)" ]; then
      echo "prebuilt: built for $src, which is another folder here" | tee -a "$summary"
      exit 1
    fi
    [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; } || exit 1
  fi
}

cd "$root" || exit 1
if [ "$mode" = pack ]; then
  trap - EXIT
  pack
  exit 0
fi

gpus=0
if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 30 nvidia-smi
  cat "$out/nvidia-smi.log"
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
else
  echo "nvidia-smi not found" | tee "$out/nvidia-smi.log"
fi
echo "GPUs listed: $gpus" | tee -a "$summary"

if [ "$mode" = prebuilt ]; then
  use_prebuilt
  tests=$dir/bin bench=$dir/bin dlcheck=$dir/bin/dlcheck nccl_built=$dir/has_nccl
else
  build_here
  tests=$build/tests bench=$build/bench dlcheck=$build/cli/dlcheck
  nccl_built=$build/engine/libdlcomm_nccl.a
fi

# no_skips NAME: a GPU test that skipped on a machine with GPUs failed.
no_skips() {
  if [ "$gpus" -gt 0 ] && grep -q 'SKIPPED' "$out/$1.log"; then
    printf '%-18s FAILED  skipped tests with %d GPU(s) listed:\n' "$1" "$gpus" | tee -a "$summary"
    grep 'no CUDA device' "$out/$1.log" | head -3 | tee -a "$summary"
    failed=1
  fi
}
step test_cuda 90 "$tests/test_cuda"
no_skips test_cuda
step test_cuda_backend 90 "$tests/test_cuda_backend"
no_skips test_cuda_backend
step test_backend 60 "$tests/test_backend"
step test_backend_equiv 60 "$tests/test_backend_equiv"
# Every scenario on the CPU backend; backend_equiv's CUDA runs really run.
step test_scenarios 150 "$tests/test_scenarios"
grep -q 'backend_equiv *skipped' "$out/test_scenarios.log" && [ "$gpus" -gt 0 ] &&
  { echo "test_scenarios     FAILED  backend_equiv skipped with GPUs listed" | tee -a "$summary"; failed=1; }
step test_comm_nccl 60 "$tests/test_comm_nccl"
if [ -f "$nccl_built" ] && [ "$gpus" -gt 0 ]; then
  step bench_allreduce 60 "$bench/bench_allreduce" --comm nccl --threads "$gpus" \
    --max-bytes $((1 << 26))
else
  echo "bench_allreduce    not run (nccl backend not built or no GPU)" | tee -a "$summary"
fi
step dlcheck-env 30 "$dlcheck" env
cat "$out/dlcheck-env.log"

# The scenarios on the GPU: CUDA goldens recorded here first, then every
# scenario with its pitfalls against them; then once more against the
# committed goldens (golden/): the gate a CI on this machine would run,
# failing where this machine's CUDA/cuDNN no longer matches them, and a
# second invocation whose traces must repeat the first bit for bit; and
# once on the CPU for the comparison.
golden=$out/golden
# Calibrated: 5 repeats each (run-to-run, deterministic and fastest cuDNN
# algorithms alternating), so the first GPU run records envelopes, not
# single traces, and later CUDA/cuDNN upgrades are gated by them
# (docs/calibrated-goldens.md); record-cuda.log holds each golden's
# tightest rules.
step record-cuda 240 "$dlcheck" record --repeat 5 --backend cuda --golden-dir "$golden" scenarios
step run-cuda 180 "$dlcheck" run --backend cuda --pitfalls --golden-dir "$golden" \
  --out "$out/cuda-run" scenarios
step run-cuda-committed 120 "$dlcheck" run --backend cuda --out "$out/cuda-again" scenarios
step run-cpu 120 "$dlcheck" run --out "$out/cpu-run" scenarios

# max_rel A B: the largest relative difference `dlcheck compare` reports.
max_rel() {
  "$dlcheck" compare --tolerance 'close(1e-4, 1e-5)' "$1" "$2" 2>&1 |
    sed -n 's/.*max rel \([^,)]*\).*/\1/p' | head -1
}
# nondeterministic_runs SCENARIO: the runs of SCENARIO in cuda-run's report
# whose convolution algorithms cuDNN calls non-deterministic (the fastest
# ones may be): they need not repeat bit for bit.
nondeterministic_runs() {
  command -v python3 >/dev/null || return 0
  python3 - "$out/cuda-run/report.json" "$1" <<'PY' 2>/dev/null
import json, sys
report, name = sys.argv[1], sys.argv[2]
for s in json.load(open(report))["scenarios"]:
    if s["name"] == name:
        print(" ".join(r["name"] for r in s.get("runs", [])
                       if "non-deterministic" in r.get("backend_detail", "")))
PY
}
table=$out/table.txt
printf '%-17s %-8s %-14s %-12s %s\n' scenario verdict cpu-vs-gpu time gpu-repeats >"$table"
for sdir in scenarios/*/; do
  name=$(basename "$sdir")
  [ -f "$sdir/scenario.yaml" ] || continue
  verdict=$(grep -Eo "^  (ok|FAILED)  $name:" "$out/run-cuda.log" | awk '{print $1}')
  secs=$(grep -E "^  (ok|FAILED)  $name:" "$out/run-cuda.log" | grep -Eo '\([0-9.]+ s\)' | tr -d '()')
  worst=0 repeats=n/a differ="" allowed="" # n/a: no GPU traces (the run step failed)
  nondet=" $(nondeterministic_runs "$name") "
  for t in "$out/cuda-run/traces/$name/pipeline/"*.h5; do
    [ -f "$t" ] || continue
    [ "$repeats" = n/a ] && repeats=yes
    run=$(basename "$t" .h5)
    cpu=$out/cpu-run/traces/$name/pipeline/$run.h5
    [ -f "$cpu" ] && worst=$(printf '%s\n%s\n' "$worst" "$(max_rel "$t" "$cpu")" | sort -g | tail -1)
    again=$out/cuda-again/traces/$name/pipeline/$run.h5
    "$dlcheck" compare "$t" "$again" >/dev/null 2>&1 && continue
    if [[ $nondet == *" $run "* ]]; then allowed+=" $run"; else differ+=" $run"; fi
  done
  [ -n "$allowed" ] && repeats="yes, not${allowed} (non-deterministic cuDNN algorithms)"
  [ -n "$differ" ] && repeats="NO:$differ" && failed=1
  printf '%-17s %-8s %-14s %-12s %s\n' "$name" "${verdict:-?}" "$worst" "${secs:-?}" "$repeats" >>"$table"
done
echo
cat "$table"

echo
echo "== gpu-check summary (logs in $out; CUDA goldens in $golden: copy to golden/)"
cat "$summary"
exit $failed
