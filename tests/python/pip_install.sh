#!/usr/bin/env bash
# `pip install ./python` as a PyTorch team does it: in a fresh venv of
# Debian's python3 (--system-site-packages: Debian's torch, h5py, numpy,
# xxhash and the build backend ci/deps.sh installs), from a copy of the
# tree without build/, with no PYTHONPATH, DLCHECK_BIN or DLCHECK_ROOT.
# pip builds the C harness with CMake (scikit-build-core) and installs the
# `dlcheck` executable; then, from the copy's root: `dlcheck run
# --pitfalls scenarios` passes, `python -m dlcheck audit` of the G2 example
# exits 1 naming G2, versions agree, the pytest plugin is registered,
# `pip wheel` ships the same, a missing library is named with its Debian
# package, and `pip uninstall` removes it all.
#
# pip runs with --no-index --no-deps --no-build-isolation: offline, on the
# packages ci/deps.sh installs (Debian's h5py is registered under another
# distribution name, so pip would otherwise fetch a second h5py from PyPI).
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree venv=$work/venv
fail() { echo "pip_install: $*" >&2; exit 1; }

mkdir "$tree"
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
  case $f in build/*) ;; *) [ -e "$f" ] && printf '%s\0' "$f" ;; esac
done | tar --null -T - -cf - | tar -xf - -C "$tree"
/usr/bin/python3 -m venv --system-site-packages "$venv"
unset PYTHONPATH DLCHECK_BIN DLCHECK_ROOT
export PATH="$venv/bin:$PATH" PIP_DISABLE_PIP_VERSION_CHECK=1 DLCHECK_NO_CUDA_PROBE=1
pip_offline=(--no-index --no-deps --no-build-isolation)
# pip wheel reuses pip install's CMake build folder (the first build is clean)
reuse_build=(--config-settings "build-dir=$work/cmake-build")
cd "$tree"

start=$SECONDS
pip install -q "${pip_offline[@]}" "${reuse_build[@]}" ./python
echo "pip install ./python: $((SECONDS - start)) s"
[ "$(command -v dlcheck)" = "$venv/bin/dlcheck" ] || fail "dlcheck is not the venv's: $(command -v dlcheck)"

version=$(sed -n 's/^project(dlcheck VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ "$(dlcheck --version)" = "dlcheck $version" ] || fail "dlcheck --version: $(dlcheck --version), not $version"
python - "$venv" "$version" <<'EOF'
import os, subprocess, sys
import dlcheck
from dlcheck.audit.harness import HarnessError, find_binary
venv, version = sys.argv[1:]
assert dlcheck.__file__.startswith(venv), dlcheck.__file__
assert dlcheck.__version__ == version, dlcheck.__version__
# the installed executable first, found without PATH; DLCHECK_BIN overrides it
os.environ["PATH"] = "/usr/bin:/bin"
assert find_binary() == os.path.join(venv, "bin", "dlcheck"), find_binary()
os.environ["DLCHECK_BIN"] = "/nonexistent/dlcheck"
try:
    find_binary()
    raise AssertionError("DLCHECK_BIN did not override")
except HarnessError as e:
    assert "/nonexistent/dlcheck" in str(e), e
out = subprocess.run([sys.executable, "-m", "dlcheck", "--version"], capture_output=True, text=True)
assert out.stdout.strip() == f"dlcheck {version}", out
EOF

start=$SECONDS
dlcheck run --pitfalls scenarios >"$work/run.txt" || { cat "$work/run.txt"; fail "dlcheck run --pitfalls scenarios failed"; }
echo "dlcheck run --pitfalls scenarios: $((SECONDS - start)) s, $(tail -1 "$work/run.txt")"

rc=0
python -m dlcheck audit --out "$work/audit" examples/audit/g2_loss_not_divided.py >"$work/audit.txt" || rc=$?
[ $rc -eq 1 ] && grep -q '^FINDING G2' "$work/audit.txt" || { cat "$work/audit.txt"; fail "audit: exit $rc, G2 not named"; }
echo "python -m dlcheck audit examples/audit/g2_loss_not_divided.py: exit 1, G2"

# the plugin, loaded through its pytest11 entry point
pytest_help=$(python -m pytest -p no:cacheprovider --help)
grep -q -- '--dlcheck-audit' <<<"$pytest_help" || fail "the pytest plugin is not registered"

start=$SECONDS
pip wheel -q "${pip_offline[@]}" "${reuse_build[@]}" -w "$work/wheels" ./python
echo "pip wheel ./python: $((SECONDS - start)) s"
python - "$work/wheels" "$version" <<'EOF'
import pathlib, sys, zipfile
folder, version = sys.argv[1:]
wheel, = pathlib.Path(folder).glob(f"dlcheck-{version}-*.whl")
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    script = f"dlcheck-{version}.data/scripts/dlcheck"
    assert script in names and z.getinfo(script).external_attr >> 16 & 0o111, sorted(names)
    assert "dlcheck/pytest_plugin.py" in names, sorted(names)
    # wheel.packages names the top package: its subpackages come with it
    assert "dlcheck/audit/families/__init__.py" in names, sorted(names)
    entry_points = z.read(f"dlcheck-{version}.dist-info/entry_points.txt").decode()
    assert "[pytest11]" in entry_points, entry_points
EOF

# A missing system library is named with its Debian package.
missing() {  # expected-package, then pip's options/environment
  local want=$1 out; shift
  if out=$(env "$@" pip wheel "${pip_offline[@]}" -w "$work/none" ./python 2>&1); then
    fail "the build succeeded without $want"
  fi
  grep -q "apt-get install $want" <<<"$out" || { echo "$out"; fail "$want not named"; }
}
missing libhdf5-dev PIP_CONFIG_SETTINGS=cmake.define.CMAKE_DISABLE_FIND_PACKAGE_HDF5=ON
missing libfyaml-dev PKG_CONFIG_LIBDIR=/nonexistent

pip uninstall -q -y dlcheck
for f in dlcheck dlcheck-py; do
  [ ! -e "$venv/bin/$f" ] || fail "pip uninstall left $venv/bin/$f"
done
! python -c 'import dlcheck' 2>/dev/null || fail "dlcheck still importable after pip uninstall"
echo "pip uninstall: dlcheck, dlcheck-py and the package removed"
