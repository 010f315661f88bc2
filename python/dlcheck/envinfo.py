"""The environment fingerprint of a PyTorch process: a flat JSON object of
strings, in a fixed key order, that the C side's dlc_env_diff compares key
by key with any other fingerprint (a C golden's, another run's).

The keys checks/store/env_text.c writes come first, with the same value formats, where
Python knows them: dlcheck_version, cpu_model, cpu_flags, logical_cores, os,
os_release, glibc, hdf5 (the HDF5 h5py runs on), cuda_driver,
cuda_devices, cuda_runtime, cublas, cudnn, nccl (found, like the C side,
by loading libcuda/libcudart/libcublas/libcudnn/libnccl at run time; "not
available" when absent, "not probed" with DLCHECK_NO_CUDA_PROBE set),
nvidia_tf32_override, cublas_workspace_config. The C build keys compiler,
build_flags and optimized are left out (they describe the C binary).
Then what decides a PyTorch run's numerics (TORCH_KEYS), with what E1-E3
need to judge the team's own wheel on its machine (checks/store/env_torch.h:
torch_cuda against cuda_driver, torch_arch_list against torch_gpus,
torch_cudnn_built and torch_nccl against torch_cudnn and torch_nccl_loaded);
the versions of the packages a data path depends on (DATA_PACKAGES), and
the project's git commit and whether its tracked files differ from it
(PROJECT_KEYS).
"""
from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import platform
import re
import subprocess
from typing import Callable, Optional, Sequence

import h5py
import numpy as np
import torch

from . import __version__
from .tracefile import ENV_JSON_MAX, env_to_json

NOT_AVAILABLE = "not available"
NOT_PROBED = "not probed"
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "f16c")
MAX_VALUE = 2047  # the C side's MAX_VALUE - 1

C_KEYS = ("dlcheck_version", "cpu_model", "cpu_flags", "logical_cores", "os", "os_release",
          "glibc", "hdf5", "cuda_driver", "cuda_devices", "cuda_runtime", "cublas", "cudnn",
          "nccl", "nvidia_tf32_override", "cublas_workspace_config")
TORCH_KEYS = ("torch_version", "torch_cuda", "torch_cudnn", "torch_nccl", "torch_gpus",
              "torch_arch_list", "torch_deterministic_algorithms",
              "torch_matmul_allow_tf32", "torch_matmul_fp16_reduced_precision",
              "torch_float32_matmul_precision", "torch_cudnn_enabled",
              "torch_cudnn_allow_tf32", "torch_cudnn_benchmark",
              "torch_cudnn_deterministic", "torch_num_threads", "torch_num_interop_threads",
              "torch_blas", "torch_lapack", "torch_mkldnn", "python_version", "numpy_version",
              "torch_package_version", "torchvision_version", "h5py_version",
              "torch_cudnn_built", "torch_nccl_loaded")
#: the packages a team's data path decodes and transforms its samples with:
#: key -> the distributions that provide it, the first installed one counts
DATA_PACKAGES = {
    "pillow_version": ("Pillow", "pillow"),
    "opencv_version": ("opencv-python", "opencv-python-headless", "opencv-contrib-python",
                       "opencv-contrib-python-headless"),
    "albumentations_version": ("albumentations",),
}
PROJECT_KEYS = ("git_commit", "git_dirty")
KEYS = C_KEYS + TORCH_KEYS + tuple(DATA_PACKAGES) + PROJECT_KEYS


# ---- CPU and OS, as checks/store/env_probe.c reads them -----------------------------

def _cpuinfo(text: str) -> tuple[str, str]:
    model, flags = "unknown", "unknown"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep:
            continue
        if key == "model name" and model == "unknown":
            model = value.strip(" \t")
        elif key in ("flags", "Features") and flags == "unknown":
            words = set(value.split())
            flags = " ".join(f for f in CPU_FLAGS if f in words) or "none"
    return model, flags


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _os_release(text: Optional[str]) -> str:
    for line in (text or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            v = line[len("PRETTY_NAME="):]
            if len(v) >= 2 and v[0] in "\"'" and v[-1] == v[0]:
                v = v[1:-1]
            return v
    return "unknown"


def _glibc() -> str:
    try:
        v = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # pragma: no cover - not glibc
        v = ""
    return v.split()[-1] if v.startswith("glibc ") else "unknown"


def _hdf5() -> str:
    loaded = h5py.version.hdf5_version_tuple
    built = h5py.version.hdf5_built_version_tuple
    text = "%d.%d.%d" % tuple(loaded)
    if tuple(loaded) != tuple(built):
        text += " (built against %d.%d.%d)" % tuple(built)
    return text


# ---- CUDA, found at run time as the C side finds it ------------------------------

def _open_first(names: Sequence[str]) -> Optional[ctypes.CDLL]:
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    return None


def _call_int(lib: Optional[ctypes.CDLL], symbol: str) -> int:
    """int f(int *) from lib, or 0."""
    fn = getattr(lib, symbol, None) if lib is not None else None
    v = ctypes.c_int(0)
    if fn is None or fn(ctypes.byref(v)) != 0:
        return 0
    return v.value


def cuda_version_text(v: int) -> str:
    """12040 -> "12.4" (env.c cuda_version_text)."""
    return NOT_AVAILABLE if v <= 0 else f"{v // 1000}.{v % 1000 // 10}"


def triple_text(v: int, div: int) -> str:
    """major*div + minor*100 + patch -> "major.minor.patch" (env.c triple_text)."""
    return NOT_AVAILABLE if v <= 0 else f"{v // div}.{v % div // 100}.{v % 100}"


def _devices(cuda: ctypes.CDLL) -> str:
    init_error = cuda.cuInit(0) if hasattr(cuda, "cuInit") else -1
    if init_error:
        return f"no CUDA device (cuInit error {init_error})"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device"
    parts = []
    for i in range(min(count.value, 16)):
        dev, name = ctypes.c_int(0), ctypes.create_string_buffer(128)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) or cuda.cuDeviceGetName(name, 128, dev):
            continue
        attrs = []
        for attr in (75, 76, 16):  # compute capability major, minor, SM count
            v = ctypes.c_int(0)
            cuda.cuDeviceGetAttribute(ctypes.byref(v), attr, dev)
            attrs.append(v.value)
        text = name.value.decode("utf-8", "replace")
        parts.append(f"{len(parts)}: {text} (sm_{attrs[0]}{attrs[1]}, {attrs[2]} SMs)")
    return "; ".join(parts) or "no CUDA device"


def _cublas() -> int:
    lib = _open_first(("libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"))
    prop = getattr(lib, "cublasGetProperty", None) if lib is not None else None
    v = [ctypes.c_int(0) for _ in range(3)]
    if prop is None or any(prop(i, ctypes.byref(v[i])) != 0 for i in range(3)):
        return 0
    return v[0].value * 10000 + v[1].value * 100 + v[2].value


def _cudnn() -> int:
    lib = _open_first(("libcudnn.so", "libcudnn.so.9", "libcudnn.so.8"))
    fn = getattr(lib, "cudnnGetVersion", None) if lib is not None else None
    if fn is None:
        return 0
    fn.restype = ctypes.c_size_t
    v = int(fn())
    return v if v <= 2 ** 31 - 1 else 0


def cuda_values(opener: Callable[[Sequence[str]], Optional[ctypes.CDLL]] = _open_first
                ) -> dict[str, str]:
    """cuda_driver .. nccl as checks/store/env_probe.c probes and formats them."""
    skip = os.environ.get("DLCHECK_NO_CUDA_PROBE", "")
    if skip and skip != "0":
        out = dict.fromkeys(("cuda_driver", "cuda_runtime", "cublas", "cudnn", "nccl"),
                            NOT_PROBED)
        out["cuda_devices"] = "not probed (DLCHECK_NO_CUDA_PROBE is set)"
        return out
    cuda = opener(("libcuda.so.1", "libcuda.so"))
    driver = _call_int(cuda, "cuDriverGetVersion")
    devices = _devices(cuda) if cuda is not None else "no CUDA device (driver: not available)"
    runtime = _call_int(opener(("libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                "libcudart.so.11.0")), "cudaRuntimeGetVersion")
    cudnn = _cudnn()
    nccl = _call_int(opener(("libnccl.so.2", "libnccl.so")), "ncclGetVersion")
    return {"cuda_driver": cuda_version_text(driver), "cuda_devices": devices,
            "cuda_runtime": cuda_version_text(runtime), "cublas": triple_text(_cublas(), 10000),
            "cudnn": triple_text(cudnn, 10000 if cudnn >= 90000 else 1000),
            "nccl": triple_text(nccl, 10000 if nccl >= 20900 else 1000)}


# ---- PyTorch --------------------------------------------------------------------------

def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _config_value(config: str, key: str) -> str:
    m = re.search(rf"\b{key}=([^,\n]*)", config)
    return m.group(1).strip() if m else "unknown"


@functools.lru_cache(maxsize=None)
def _package_version(name: str) -> str:
    """The installed distribution's version (importlib.metadata), or "not
    installed". Cached for the life of the process: the lookup scans every
    sys.path entry (up to ~0.5 s with a long path, and every Recorder takes
    a fingerprint), and the version of a package a process has imported
    does not change under it."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _first_installed(names: Sequence[str]) -> str:
    for name in names:
        version = _package_version(name)
        if version != "not installed":
            return version
    return "not installed"


def data_package_values() -> dict[str, str]:
    """The versions of the packages in DATA_PACKAGES, "not installed" where absent."""
    return {key: _first_installed(names) for key, names in DATA_PACKAGES.items()}


@functools.lru_cache(maxsize=None)
def git_values(cwd: str) -> dict[str, str]:
    """The commit of the git repository holding cwd (where the team's run
    starts) and whether tracked files differ from it. Cached per folder for
    the life of the process, as _package_version is: every Recorder takes a
    fingerprint, and two git calls each would add up."""
    def git(*args: str) -> Optional[subprocess.CompletedProcess]:
        try:  # --no-optional-locks: status must not write the index under a running job
            return subprocess.run(("git", "--no-optional-locks") + args, cwd=cwd, text=True,
                                  capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    head = git("rev-parse", "HEAD")
    if head is None:
        return {"git_commit": "unknown (git could not run)", "git_dirty": "unknown"}
    if head.returncode != 0:
        return {"git_commit": "not a git repository", "git_dirty": "not a git repository"}
    status = git("status", "--porcelain", "--untracked-files=no")
    if status is None or status.returncode != 0:
        dirty = "unknown"
    else:
        changed = [line for line in status.stdout.splitlines() if line.strip()]
        dirty = f"yes ({len(changed)} tracked files changed)" if changed else "no"
    return {"git_commit": head.stdout.strip(), "git_dirty": dirty}


def _working_folder() -> str:
    try:
        return os.getcwd()
    except OSError:  # the folder was removed under the process
        return "/nonexistent"


def _cudnn_built() -> str:
    """The cuDNN torch was compiled against, numbered as
    torch.backends.cudnn.version() numbers the one it loaded."""
    try:
        from torch._C import _cudnn  # absent from builds without cuDNN
        major, minor, patch = _cudnn.getCompileVersion()
    except (ImportError, AttributeError, RuntimeError, ValueError, TypeError):
        return NOT_AVAILABLE
    return str(major * (10000 if major >= 9 else 1000) + minor * 100 + patch)


def _nccl_loaded(opener: Callable[[str], ctypes.CDLL] = functools.partial(
        ctypes.CDLL, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)) -> str:
    """The NCCL this process has loaded (torch's shared libnccl), never one
    that a search would load: a torch that links NCCL statically, or not
    at all, has none to compare with what it was built against."""
    try:
        lib = opener("libnccl.so.2")
    except OSError:
        return "not loaded"
    v = _call_int(lib, "ncclGetVersion")
    return triple_text(v, 10000 if v >= 20900 else 1000) if v else "not loaded"


def _torch_gpus() -> str:
    if not torch.cuda.is_available():
        return NOT_AVAILABLE
    parts = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        parts.append(f"{i}: {p.name} (sm_{p.major}{p.minor})")
    return "; ".join(parts)


def torch_values() -> dict[str, str]:
    """What decides a PyTorch run's numerics, as this process has it set."""
    cudnn = torch.backends.cudnn
    cudnn_version = cudnn.version() if cudnn.is_available() else None
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else ""
    except (AttributeError, RuntimeError):  # pragma: no cover - built without NCCL
        nccl = ""
    det = torch.are_deterministic_algorithms_enabled()
    if det and torch.is_deterministic_algorithms_warn_only_enabled():
        det_text = "yes (warn only)"
    else:
        det_text = _yes(det)
    matmul = torch.backends.cuda.matmul
    config = torch.__config__.show()
    return {
        "torch_version": str(torch.__version__),
        "torch_cuda": torch.version.cuda or NOT_AVAILABLE,
        "torch_cudnn": str(cudnn_version) if cudnn_version else NOT_AVAILABLE,
        "torch_nccl": nccl or NOT_AVAILABLE,
        "torch_gpus": _torch_gpus(),
        "torch_arch_list": " ".join(torch.cuda.get_arch_list()) or NOT_AVAILABLE,
        "torch_deterministic_algorithms": det_text,
        "torch_matmul_allow_tf32": _yes(matmul.allow_tf32),
        "torch_matmul_fp16_reduced_precision":
            _yes(getattr(matmul, "allow_fp16_reduced_precision_reduction", False)),
        "torch_float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch_cudnn_enabled": _yes(cudnn.enabled),
        "torch_cudnn_allow_tf32": _yes(cudnn.allow_tf32),
        "torch_cudnn_benchmark": _yes(cudnn.benchmark),
        "torch_cudnn_deterministic": _yes(cudnn.deterministic),
        "torch_num_threads": str(torch.get_num_threads()),
        "torch_num_interop_threads": str(torch.get_num_interop_threads()),
        "torch_blas": _config_value(config, "BLAS_INFO"),
        "torch_lapack": _config_value(config, "LAPACK_INFO"),
        "torch_mkldnn": _yes(torch.backends.mkldnn.is_available()),
        "python_version": platform.python_version(),
        "numpy_version": np.__version__,
        "torch_package_version": _package_version("torch"),
        "torchvision_version": _package_version("torchvision"),
        "h5py_version": h5py.__version__,
        "torch_cudnn_built": _cudnn_built(),
        "torch_nccl_loaded": _nccl_loaded() if torch.version.cuda else NOT_AVAILABLE,
    }


# ---- the fingerprint ---------------------------------------------------------------------

def _clean(value: str) -> str:
    """Valid UTF-8 without NULs (the C parser refuses \\u0000 and
    surrogates), at most MAX_VALUE bytes."""
    v = value.encode("utf-8", "replace").decode("utf-8").replace("\0", "")
    while len(v.encode("utf-8")) > MAX_VALUE:
        v = v[:-1]
    return v


def fit(env: dict[str, str], limit: int = ENV_JSON_MAX) -> dict[str, str]:
    """Shortens the longest values ("..." at the end) until the JSON fits in
    `limit` bytes of UTF-8, as the C reader's buffer requires."""
    env = {k: _clean(v) for k, v in env.items()}
    while len(env_to_json(env).encode("utf-8")) > limit:
        key = max(env, key=lambda k: len(env[k]))
        if len(env[key]) <= 8:
            raise ValueError(f"the environment fingerprint cannot fit in {limit} bytes")
        env[key] = env[key][:len(env[key]) // 2] + "..."
    return env


def fingerprint() -> dict[str, str]:
    """This process's fingerprint, keys in KEYS order. Never fails: what
    cannot be found reads "unknown" or "not available"."""
    model, flags = _cpuinfo(_read("/proc/cpuinfo") or "")
    u = os.uname()
    cores = os.sysconf("SC_NPROCESSORS_ONLN") if hasattr(os, "sysconf") else 0
    env = {
        "dlcheck_version": __version__,
        "cpu_model": model,
        "cpu_flags": flags,
        "logical_cores": str(max(int(cores), 0)),
        "os": f"{u.sysname} {u.release} {u.machine}",
        "os_release": _os_release(_read("/etc/os-release")),
        "glibc": _glibc(),
        "hdf5": _hdf5(),
        **cuda_values(),
        "nvidia_tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE", "unset"),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "unset"),
        **torch_values(),
        **data_package_values(),
        **git_values(_working_folder()),
    }
    return fit({k: env[k] for k in KEYS})


def fingerprint_json() -> str:
    """fingerprint() as the JSON text a trace's env_fingerprint holds."""
    return env_to_json(fingerprint())
