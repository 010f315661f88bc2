#!/usr/bin/env bash
# The training benchmark against PyTorch: builds Release in build/bench, runs
# bench_train (the engine) and torch_train.py (PyTorch, Debian's
# python3-torch) on the same models, data, batch and optimizer, and prints
# one side-by-side table; then bench_gemm (dl_sgemm against OpenBLAS) if it
# is built. Arguments go to both trainers (--model mlp|cnn|all, --steps N,
# --threads 1,2).
#
# Targets: the engine at >= 1.5x PyTorch's best thread setting on the MLP and
# >= 1.0x on the CNN. They are reported, not gated: timings depend on what
# else the machine runs. The exit status is non-zero if a program fails,
# including bench_train finding its 1- and 2-thread parameters different.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=/usr/bin/python3
build=build/bench
jobs=$(nproc)

echo "== building Release in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=(bench_train)
[ -f bench/bench_gemm.c ] && targets+=(bench_gemm)
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >/dev/null

# Machine-specific OpenBLAS settings (a forced core type or L2 size) can make
# OpenBLAS, and PyTorch's linear layers with it, much slower than its own
# detection; the comparison is against OpenBLAS as it would pick itself.
blas_env=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
  if [ -n "${!v+x}" ]; then
    echo "note: $v=${!v} is set here; unset for the PyTorch and OpenBLAS runs"
  fi
done
echo "note: load average $(cut -d' ' -f1-3 /proc/loadavg) on $jobs CPUs" \
     "(timings are wall-clock; cpu_ms/step is less sensitive to other load)"

engine_out=$(mktemp)
torch_out=$(mktemp)
trap 'rm -f "$engine_out" "$torch_out"' EXIT

echo
echo "== engine: $build/bench/bench_train $*"
"$build/bench/bench_train" "$@" | tee "$engine_out"
echo
echo "== PyTorch: bench/torch_train.py $*"
"${blas_env[@]}" "$PYTHON" bench/torch_train.py "$@" | tee "$torch_out"

echo
echo "== training steps/s, engine (dlcheck) against PyTorch"
awk '
  function target(m) { return m == "mlp" ? 1.5 : 1.0 }
  FNR == 1 { file++ }
  /^#/ || $1 == "model" { next }
  file == 1 { eng[$1, $2] = $5; ecpu[$1, $2] = $6; order[++n] = $1 SUBSEP $2 }
  file == 2 { pt[$1, $2] = $5; pcpu[$1, $2] = $6
              if ($5 > best[$1]) best[$1] = $5 }
  END {
    printf "#%6s %7s %12s %12s %10s %8s %8s %14s %14s\n", "model", "threads",
           "dlcheck", "PyTorch", "ratio", "target", "", "dlcheck", "PyTorch"
    printf "#%6s %7s %12s %12s %10s %8s %8s %14s %14s\n", "", "", "steps/s",
           "steps/s", "vs best", "", "", "cpu ms/step", "cpu ms/step"
    for (i = 1; i <= n; i++) {
      split(order[i], k, SUBSEP)
      m = k[1]; t = k[2]
      r = best[m] > 0 ? eng[m, t] / best[m] : 0
      printf " %6s %7s %12.1f %12.1f %9.2fx %7.1fx %8s %14.3f %14.3f\n", m, t,
             eng[m, t], pt[m, t], r, target(m), (r >= target(m) ? "met" : "BELOW"),
             ecpu[m, t], pcpu[m, t]
    }
    print "# ratio: dlcheck steps/s over the best PyTorch steps/s of that model"
  }' "$engine_out" "$torch_out"

if [ -x "$build/bench/bench_gemm" ]; then
  echo
  echo "== GEMM: $build/bench/bench_gemm (OpenBLAS with OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE unset)"
  "${blas_env[@]}" "$build/bench/bench_gemm"
fi
