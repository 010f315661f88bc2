#!/usr/bin/env bash
# The benchmarks against PyTorch. Builds Release in build/bench, then
#
#   bench/run.sh [--python PY] [ARGS...]
#       the training benchmark: bench_train (the engine) and torch_train.py
#       (PyTorch) on the same models, data, batch and optimizer, one
#       side-by-side table; then bench_gemm (dl_sgemm against OpenBLAS).
#       ARGS go to both trainers (--model mlp|cnn|all, --steps N,
#       --threads 1,2). Targets: the engine at >= 1.5x PyTorch's best thread
#       setting on the MLP and >= 1.0x on the CNN.
#   bench/run.sh --scaling [--python PY]... [ARGS...]
#       the scaling benchmark (bench/scaling.py: MLP, CNN and GPT at three
#       sizes, engine and PyTorch interleaved, bitwise equality across
#       thread counts, GEMM and conv against PyTorch's); ARGS go to
#       scaling.py (--families, --sizes, --threads, --seconds, --rounds,
#       --no-kernels). --python may be repeated: each PyTorch is run.
#
# --python PY: the interpreter for the PyTorch side, default Debian's
# /usr/bin/python3 (python3-torch, OpenBLAS). For PyPI's torch (MKL and
# oneDNN, what users install), make a venv with bench/pypi-torch.sh and pass
# its bin/python: when PY lies in a venv whose site-packages hold nvidia/*/lib
# (the CUDA libraries torch's wheel links), those folders and
# /usr/local/cuda/lib64 are added to LD_LIBRARY_PATH here.
#
# Targets are reported, not gated: timings depend on what else the machine
# runs. The exit status is non-zero if a program fails, including the engine
# finding its 1- and 2-thread parameters different.
set -euo pipefail
cd "$(dirname "$0")/.."

pythons=()
scaling=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python)
      [ $# -ge 2 ] || { echo "run.sh: --python needs a path" >&2; exit 2; }
      pythons+=("$2")
      shift 2 ;;
    --python=*) pythons+=("${1#--python=}"); shift ;;
    --scaling) scaling=1; shift ;;
    *) break ;;
  esac
done
[ ${#pythons[@]} -gt 0 ] || pythons=(/usr/bin/python3)
if [ $scaling = 0 ] && [ ${#pythons[@]} -gt 1 ]; then
  echo "run.sh: several --python only with --scaling" >&2
  exit 2
fi
PYTHON=${pythons[0]}
build=build/bench
jobs=$(nproc)

# The lib folders a PyPI torch in a venv needs (its CUDA dependencies were
# installed --no-deps as separate nvidia-* wheels, bench/pypi-torch.sh).
for py in "${pythons[@]}"; do
  [ -x "$py" ] || { echo "run.sh: $py is not an executable interpreter" >&2; exit 2; }
  venv=$(dirname "$(dirname "$py")")
  [ -f "$venv/pyvenv.cfg" ] || continue
  for lib in "$venv"/lib/python3*/site-packages/nvidia/*/lib; do
    [ -d "$lib" ] || continue
    case ":${LD_LIBRARY_PATH:-}:" in *":$lib:"*) ;; *)
      LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  done
  if [ -d /usr/local/cuda/lib64 ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":/usr/local/cuda/lib64:"*) ;; *)
      LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  fi
done
if [ -n "${LD_LIBRARY_PATH:-}" ]; then
  export LD_LIBRARY_PATH
  echo "note: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi

echo "== building Release in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=(bench_train bench_scaling)
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

if [ $scaling = 1 ]; then
  pyargs=()
  for py in "${pythons[@]}"; do pyargs+=(--python "$py"); done
  echo
  echo "== scaling: bench/scaling.py ${pyargs[*]} $*"
  exec "${blas_env[@]}" /usr/bin/python3 bench/scaling.py \
    --engine "$build/bench/bench_scaling" "${pyargs[@]}" "$@"
fi

engine_out=$(mktemp)
torch_out=$(mktemp)
trap 'rm -f "$engine_out" "$torch_out"' EXIT

echo
echo "== engine: $build/bench/bench_train $*"
"$build/bench/bench_train" "$@" | tee "$engine_out"
echo
echo "== PyTorch: $PYTHON bench/torch_train.py $*"
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
