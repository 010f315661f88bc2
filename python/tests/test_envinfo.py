"""The fingerprint: C keys and formats, PyTorch keys, parsed by the C binary."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess

import numpy as np
import pytest

from dlcheck import Trace, envinfo, fingerprint, write_trace
from dlcheck.__main__ import main
from dlcheck.tracefile import ENV_JSON_MAX, env_to_json


def golden_with(env: dict, path) -> str:
    t = Trace(kind="golden", env=env, recorded_at="2025-01-31T12:00:00Z",
              dlcheck_version="0.1.0", series={"loss": np.zeros(1)},
              digest_names=["param/w"], digests=np.zeros((1, 1), np.uint64),
              finals={"param/w": np.zeros(2, np.float32)})
    return write_trace(path, t)


def test_keys_in_fixed_order_and_c_formats(monkeypatch):
    monkeypatch.delenv("DLCHECK_NO_CUDA_PROBE", raising=False)
    env = fingerprint()
    assert tuple(env) == envinfo.KEYS
    assert all(isinstance(v, str) for v in env.values())
    assert env["dlcheck_version"] == "0.1.0" and env["logical_cores"].isdigit()
    assert len(env_to_json(env).encode()) <= ENV_JSON_MAX
    if env["cuda_driver"] == "not available":  # a machine without the driver, as C reads it
        assert env["cuda_devices"] == "no CUDA device (driver: not available)"
    assert env["torch_deterministic_algorithms"] in ("yes", "no", "yes (warn only)")


def test_the_c_binary_parses_the_fingerprint(tmp_path, run_c):
    env = fingerprint()
    env["cpu_model"] = "Ωμέγα \"quoted\" \\ CPU\ttab"  # UTF-8 and escapes the C parser must read
    path = golden_with(env, tmp_path / "g.h5")
    r = run_c("env", path)
    assert r.returncode == 0, r.stderr
    assert "differences from the machine that recorded" in r.stdout
    assert "torch_version" in r.stdout and "Ωμέγα \"quoted\" \\ CPU\ttab" in r.stdout
    r = run_c("compare", path, path)
    assert r.returncode == 0 and "environment (" in r.stdout and "the same" in r.stdout


def test_same_values_as_the_c_side_for_shared_keys(monkeypatch, run_c):
    monkeypatch.delenv("DLCHECK_NO_CUDA_PROBE", raising=False)
    c_env = json.loads(run_c("env", "--json", probe=True).stdout)
    env = fingerprint()
    for key in envinfo.C_KEYS:
        assert env[key] == c_env[key], key


def test_plain_trace_fingerprint_is_read_or_ignored_by_c(tmp_path, run_c):
    # The C reader reads env_fingerprint on goldens; on plain traces it is
    # being extended to: either way the file must load.
    t = Trace(env=fingerprint(), series={"loss": np.zeros(1)})
    r = run_c("env", write_trace(tmp_path / "t.h5", t))
    assert r.returncode == 0, r.stderr
    assert "holds no environment fingerprint" in r.stdout or "differences" in r.stdout


def test_not_probed_and_library_paths(monkeypatch):
    monkeypatch.setenv("DLCHECK_NO_CUDA_PROBE", "1")
    v = envinfo.cuda_values()
    assert v["cuda_driver"] == "not probed" and v["cuda_devices"].startswith("not probed (")
    monkeypatch.setenv("DLCHECK_NO_CUDA_PROBE", "0")
    v = envinfo.cuda_values(opener=lambda names: None)
    assert v == {"cuda_driver": "not available",
                 "cuda_devices": "no CUDA device (driver: not available)",
                 "cuda_runtime": "not available", "cublas": v["cublas"], "cudnn": v["cudnn"],
                 "nccl": "not available"}


class FakeDriver:
    """libcuda's entry points, as ctypes calls them."""

    def __init__(self, init_error=0, count=1):
        self.init_error, self.count = init_error, count

    def cuInit(self, flags):
        return self.init_error

    def cuDriverGetVersion(self, out):
        out._obj.value = 12040
        return 0

    def cuDeviceGetCount(self, out):
        out._obj.value = self.count
        return 0

    def cuDeviceGet(self, out, i):
        out._obj.value = i
        return 0

    def cuDeviceGetName(self, buf, n, dev):
        buf.value = b"Fake GPU"
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        out._obj.value = {75: 9, 76: 0, 16: 132}[attr]
        return 0


@pytest.mark.parametrize("driver, devices", [
    (FakeDriver(), "0: Fake GPU (sm_90, 132 SMs)"),
    (FakeDriver(init_error=100), "no CUDA device (cuInit error 100)"),
    (FakeDriver(count=0), "no CUDA device")])
def test_device_text_as_c(monkeypatch, driver, devices):
    monkeypatch.delenv("DLCHECK_NO_CUDA_PROBE", raising=False)
    v = envinfo.cuda_values(opener=lambda names: driver if "libcuda.so.1" in names else None)
    assert v["cuda_driver"] == "12.4" and v["cuda_devices"] == devices


def test_formats_and_fitting():
    assert envinfo.cuda_version_text(12040) == "12.4" and envinfo.cuda_version_text(0) == \
        "not available"
    assert envinfo.triple_text(90100, 10000) == "9.1.0" and envinfo.triple_text(8902, 1000) == \
        "8.9.2"
    assert envinfo._cpuinfo("model name\t: X\nflags\t\t: fma avx2 sse\n") == ("X", "avx2 fma")
    assert envinfo._cpuinfo("Features\t: neon\n") == ("unknown", "none")
    assert envinfo._os_release("A=1\nPRETTY_NAME='Deb 12'\n") == "Deb 12"
    assert envinfo._os_release(None) == "unknown"
    big = envinfo.fit({"a": "x" * 5000, "b": "y" * 5000, "c": "\0z\udcff"})
    assert len(env_to_json(big).encode()) <= ENV_JSON_MAX and big["c"] == "z?"
    with pytest.raises(ValueError):
        envinfo.fit({f"k{i}": "v" for i in range(2000)})


def test_main_env(capsys):
    assert main(["env", "--json"]) == 0
    assert tuple(json.loads(capsys.readouterr().out)) == envinfo.KEYS
    assert main(["env"]) == 0
    assert "torch_version" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "env" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([])


def test_ctypes_helpers_tolerate_missing_symbols():
    libc = ctypes.CDLL(None)
    assert envinfo._call_int(libc, "no_such_symbol_here") == 0
    assert envinfo._call_int(None, "x") == 0


def test_package_versions_are_looked_up_once_and_stay_right(monkeypatch):
    import importlib.metadata

    real = {n: envinfo._package_version(n) for n in ("torch", "torchvision")}
    assert real["torch"] == importlib.metadata.version("torch")
    assert envinfo._package_version("no-such-package-here") == "not installed"
    env = fingerprint()
    assert env["torch_package_version"] == real["torch"]
    assert env["torchvision_version"] == real["torchvision"]

    calls = []

    def counted(name):
        calls.append(name)
        return f"{name}-from-metadata"

    envinfo._package_version.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", counted)
    try:
        for _ in range(3):
            env = fingerprint()
            assert env["torch_package_version"] == "torch-from-metadata"
            assert env["torchvision_version"] == "torchvision-from-metadata"
        # once each, however many Recorders; of a data package's distributions
        # the first installed one (here, with every name found: the first)
        assert sorted(calls) == ["Pillow", "albumentations", "opencv-python", "torch",
                                 "torchvision"]
    finally:
        envinfo._package_version.cache_clear()  # the fake's answers go with it
    monkeypatch.undo()
    assert envinfo._package_version("torch") == real["torch"]


def test_data_packages_take_the_first_installed_distribution(monkeypatch):
    import importlib.metadata

    installed = {"opencv-python-headless": "4.9.0.80", "Pillow": "10.2.0"}

    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)

    envinfo._package_version.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", version)
    try:
        assert envinfo.data_package_values() == {
            "pillow_version": "10.2.0", "opencv_version": "4.9.0.80",
            "albumentations_version": "not installed"}
    finally:
        envinfo._package_version.cache_clear()


def _git(cwd, *args):
    subprocess.run(("git", "-c", "user.name=t", "-c", "user.email=t@t") + args, cwd=cwd,
                   check=True, capture_output=True)


def test_git_commit_and_dirty_flag(tmp_path):
    envinfo.git_values.cache_clear()
    assert envinfo.git_values(str(tmp_path)) == {"git_commit": "not a git repository",
                                                 "git_dirty": "not a git repository"}
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("print(1)\n")
    (repo / "notes.txt").write_text("untracked\n")
    _git(repo, "add", "train.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = subprocess.run(("git", "rev-parse", "HEAD"), cwd=repo, text=True,
                          capture_output=True, check=True).stdout.strip()
    assert envinfo.git_values(str(repo)) == {"git_commit": head, "git_dirty": "no"}
    (repo / "train.py").write_text("print(2)\n")  # an uncommitted change to a tracked file
    envinfo.git_values.cache_clear()
    assert envinfo.git_values(str(repo)) == {"git_commit": head,
                                             "git_dirty": "yes (1 tracked files changed)"}
    envinfo.git_values.cache_clear()


def test_fingerprint_names_the_working_folders_commit(tmp_path, monkeypatch):
    envinfo.git_values.cache_clear()
    monkeypatch.chdir(tmp_path)
    env = fingerprint()
    assert env["git_commit"] == "not a git repository"
    monkeypatch.setenv("PATH", "/nonexistent")  # no git at all
    envinfo.git_values.cache_clear()
    assert envinfo.git_values(str(tmp_path))["git_commit"] == "unknown (git could not run)"
    envinfo.git_values.cache_clear()


def test_built_and_loaded_libraries_of_this_torch():
    env = fingerprint()
    # Debian's torch: no CUDA, so no cuDNN compiled in and no NCCL to load
    assert env["torch_cudnn_built"] == "not available"
    assert env["torch_nccl_loaded"] == "not available"

    class Nccl:
        @staticmethod
        def ncclGetVersion(out):
            ctypes.cast(out, ctypes.POINTER(ctypes.c_int))[0] = 21803
            return 0

    def not_loaded(name):
        raise OSError(f"{name}: not loaded")

    assert envinfo._nccl_loaded(lambda name: Nccl()) == "2.18.3"
    assert envinfo._nccl_loaded(not_loaded) == "not loaded"
    assert os.RTLD_NOLOAD  # what the real opener asks for: never load one itself
