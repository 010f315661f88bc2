#!/usr/bin/env bash
# The whole test suite: formatting and checks/' include order, warning-free
# release build and tests, ASan+UBSan
# build and tests, the Python package's tests (pytest, line coverage of
# python/) and its pip install in a fresh venv, the CLI under valgrind,
# coverage build with gcovr line coverage of engine/ and checks/, the fuzz
# targets for a fixed time, and the cross-compiler bitwise check.
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

step() { printf '\n== %s ==\n' "$*"; }

step "formatting (.clang-format, clang-format 14)"
ci/format.sh

step "stages: each folder includes only what docs/design.md allows, no circles"
ci/check-stages.sh

step "release build (gcc, -Werror)"
cmake --preset release >/dev/null
cmake --build build/release -j"$jobs"
ctest --preset release -j"$jobs"
# The object files show the call circles that no include names.
stages=$(ci/check-stages.sh --objects build/release) || { echo "$stages"; exit 1; }
echo "$stages" | tail -1

step "Python: recorder, PyTorch conformance traces, examples (pytest, coverage of python/)"
# Debian's interpreter: it has python3-torch, h5py, numpy, xxhash, pytest.
DLCHECK_BIN="$PWD/build/release/cli/dlcheck" PYTHONPATH="$PWD/python" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests fixtures/torch examples \
  --cov=python/dlcheck --cov-report=term --cov-fail-under=85

step "Python: pip install ./python in a fresh venv (C harness built by scikit-build-core)"
tests/python/pip_install.sh

step "ASan + UBSan build"
cmake --preset asan >/dev/null
cmake --build build/asan -j"$jobs"
ctest --preset asan -j"$jobs"

step "valgrind: the CLI end to end (memcheck, leaks)"
# Valgrind hides AVX-512, so this also runs the AVX2 kernels; the CUDA
# probe is skipped (dlopen of cuBLAS is slow and noisy under valgrind).
DLCHECK_NO_CUDA_PROBE=1 valgrind --quiet --leak-check=full --error-exitcode=9 \
  --suppressions=engine/backend/cuda/valgrind.supp \
  build/release/cli/dlcheck run --pitfalls scenarios/grad_accum scenarios/ckpt_roundtrip

step "coverage build"
cmake --preset coverage >/dev/null
cmake --build build/coverage -j"$jobs"
find build/coverage -name '*.gcda' -delete
ctest --preset coverage -j"$jobs"
gcovr --root . --filter 'engine/' --filter 'checks/' --exclude 'engine/backend/cuda/' \
      --object-directory build/coverage --gcov-ignore-parse-errors --print-summary \
      --fail-under-line 85 \
      build/coverage | tail -4

step "fuzzing: scenario, trace, state dict and fixture readers, report writers, CLI arguments (libFuzzer, 30 s each)"
# A fixed seed so that a finding reproduces; fuzz/README.md says what to do
# with one (a dlcheck finding fails the step, a library's is listed).
CC=clang DLC_FUZZ_ARGS="-seed=1" fuzz/run.sh 30

if [ -x ci/determinism.sh ]; then
  step "bitwise across compilers and optimisation levels"
  ci/determinism.sh
fi
