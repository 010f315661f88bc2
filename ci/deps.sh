#!/usr/bin/env bash
# Installs the Debian packages dlcheck needs to build, test and benchmark.
# Idempotent: apt-get skips what is already installed. The CUDA toolkit
# (nvcc, cuBLAS, cuDNN, NCCL) is not a Debian package here; it is used when
# nvcc is on PATH and skipped otherwise.
set -euo pipefail

packages=(
  build-essential cmake clang pkg-config
  libclang-rt-14-dev clang-format  # libFuzzer and sanitizer runtimes; ci/format.sh
  libhdf5-dev hdf5-tools        # traces, goldens, fixtures
  libcmocka-dev gcovr valgrind  # tests and coverage
  libfyaml-dev                  # scenario files
  libjansson-dev                # JSON: fingerprints, reports
  libxxhash-dev                 # trace digests
  libopenmpi-dev openmpi-bin    # multi-process data parallel
  libxml2-utils                 # xmllint for the JUnit schema check
  python3-torch python3-h5py python3-numpy python3-sklearn  # reference fixtures
  python3-xxhash python3-pytest python3-pytest-cov           # python/ (recorder) and its tests
  python3-venv python3-pip python3-packaging python3-pathspec  # pip install ./python (its test)
  dataset-fashion-mnist         # fixture source
  libopenblas-dev libopenblas0-pthread  # benchmark peer
  python3-onnx python3-protobuf python3-flatbuffers python3-coloredlogs python3-sympy
  python3-packaging python3-pip  # the audit's export family (onnxruntime's dependencies)
  python3-tqdm python3-fsspec python3-yaml python3-typing-extensions  # pytorch-lightning's
  python3-regex python3-requests python3-filelock python3-psutil  # transformers' and accelerate's
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
if ((${#missing[@]})); then
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# What Debian 12 lacks comes pinned from PyPI into Debian's python3 (the
# interpreter the tests use) with --no-deps: their dependencies are the Debian
# packages above, and --no-deps keeps PyPI's torch out.
pip_pins() {  # installs all the pins given unless each is there at its version
  local pin
  for pin in "$@"; do
    if ! /usr/bin/python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('${pin%==*}') != '${pin#*==}')" 2>/dev/null; then
      $sudo_cmd /usr/bin/python3 -m pip install -q --root-user-action=ignore --no-deps \
        --break-system-packages "$@"
      return
    fi
  done
}

# onnxruntime for the audit's export family.
onnxruntime=(onnxruntime==1.17.3)
# PyTorch Lightning for dlcheck.integrations.lightning and its test: 2.2.5 is
# the newest that runs on Debian's torch 1.13 (2.3 needs torch 2.0), with the
# lightning-utilities and torchmetrics of its time.
lightning=(pytorch-lightning==2.2.5 lightning-utilities==0.11.2 torchmetrics==1.4.0)
# Hugging Face transformers for dlcheck.integrations.transformers and its
# test: 4.45.2 is the newest whose Trainer the test passes on torch 1.13 (4.46
# and 4.47 run, but compute an accumulated step's loss with
# num_items_in_batch, and the test with accumulation fails), with the
# tokenizers, accelerate, huggingface-hub and safetensors of its time.
transformers=(transformers==4.45.2 tokenizers==0.20.3 accelerate==0.34.2
  huggingface-hub==0.24.6 safetensors==0.4.4)
# The Python package's build backend (python/pyproject.toml). The test of
# `pip install ./python` (tests/python/pip_install.sh) builds with it, so
# that it needs no network.
skbuild=(scikit-build-core==0.10.7)
pip_pins "${onnxruntime[@]}"
pip_pins "${lightning[@]}"
pip_pins "${transformers[@]}"
pip_pins "${skbuild[@]}"
echo "deps: all ${#packages[@]} packages present; from PyPI: ${onnxruntime[*]} ${lightning[*]} ${transformers[*]} ${skbuild[*]}"
