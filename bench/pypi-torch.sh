#!/usr/bin/env bash
# A venv with PyPI's torch (MKL + oneDNN: the PyTorch users install) for the
# benchmarks' PyTorch side, on a machine like the project's (x86-64 Linux,
# Python 3, the CUDA toolkit in /usr/local/cuda). Not part of CI.
#
#   bench/pypi-torch.sh [VENV_DIR]        (default ./venv-torch)
#
# Environment: PYTHON (the interpreter that makes the venv, default
# python3), TORCH (the requirement, default "torch"), WHEEL_DIR (where the
# torch wheel is downloaded; a torch-*.whl already there is used as is;
# default VENV_DIR/wheels).
#
# The torch wheel is installed --no-deps: its declared dependencies include
# the whole CUDA runtime as nvidia-* wheels (gigabytes), which the CUDA
# toolkit in /usr/local/cuda already provides; only the few libraries the
# toolkit lacks come from PyPI (nvidia-cufile, -cusparselt-cu13,
# -nvshmem-cu13, -nccl-cu13, also --no-deps), and torch then needs
# LD_LIBRARY_PATH to name /usr/local/cuda/lib64 and their lib folders. The
# script prints the --python and LD_LIBRARY_PATH to use; bench/run.sh
# --python VENV_DIR/bin/python sets LD_LIBRARY_PATH itself.
set -euo pipefail

venv=${1:-venv-torch}
python=${PYTHON:-python3}
torch_req=${TORCH:-torch}
wheels=${WHEEL_DIR:-$venv/wheels}

if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
  echo "pypi-torch.sh: $venv exists and is not a venv" >&2
  exit 2
fi
[ -f "$venv/pyvenv.cfg" ] || "$python" -m venv "$venv"
venv=$(cd "$venv" && pwd)
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

mkdir -p "$wheels"
shopt -s nullglob
whl=("$wheels"/torch-*.whl)
if [ ${#whl[@]} -eq 0 ]; then
  echo "== downloading $torch_req (no dependencies) into $wheels"
  "${pip[@]}" download --no-deps -d "$wheels" "$torch_req"
  whl=("$wheels"/torch-*.whl)
fi
[ ${#whl[@]} -eq 1 ] || { echo "pypi-torch.sh: expected one torch wheel in $wheels" >&2; exit 1; }

echo "== installing ${whl[0]##*/} --no-deps"
"${pip[@]}" install --no-deps "${whl[0]}"
echo "== installing torch's Python dependencies and h5py"
"${pip[@]}" install numpy typing-extensions sympy networkx jinja2 filelock fsspec h5py
echo "== installing the CUDA libraries the toolkit lacks (--no-deps)"
"${pip[@]}" install --no-deps nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 \
  nvidia-nccl-cu13

lib_path=/usr/local/cuda/lib64
for lib in "$venv"/lib/python3*/site-packages/nvidia/*/lib; do
  lib_path="$lib_path:$lib"
done
echo "== checking: import torch (MKL, oneDNN)"
LD_LIBRARY_PATH="$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$venv/bin/python" -c '
import torch
assert torch.backends.mkl.is_available(), "torch without MKL"
assert torch.backends.mkldnn.is_available(), "torch without oneDNN"
print("torch", torch.__version__, "MKL and oneDNN available,", torch.get_num_threads(), "threads")'

cat <<EOF

Use it with
  bench/run.sh --python $venv/bin/python                  (training benchmark)
  bench/run.sh --scaling --python $venv/bin/python        (scaling benchmark)
or by hand with
  LD_LIBRARY_PATH=$lib_path
EOF
