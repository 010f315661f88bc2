"""Shared fixtures: the C binary (env DLCHECK_BIN, default
<repo>/build/release/cli/dlcheck), a small model and a recorded run."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dlcheck_bin() -> str:
    path = os.environ.get("DLCHECK_BIN", str(REPO / "build" / "release" / "cli" / "dlcheck"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"the C binary {path} is missing: build it with `cmake --preset release && "
                    f"cmake --build build/release -j2` in {REPO}, or set DLCHECK_BIN")
    return path


@pytest.fixture(scope="session")
def run_c(dlcheck_bin: str) -> Callable[..., subprocess.CompletedProcess]:
    """Runs the C binary (CUDA libraries not probed unless probe=True)."""
    def run(*args: str, probe: bool = False) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        if not probe:
            env["DLCHECK_NO_CUDA_PROBE"] = "1"
        return subprocess.run([dlcheck_bin, *args], capture_output=True, text=True, env=env,
                              cwd=REPO, timeout=120)
    return run


@pytest.fixture(scope="session")
def c_golden(tmp_path_factory, run_c) -> Path:
    """The golden the C binary records for tests/cli/small."""
    out = tmp_path_factory.mktemp("golden")
    r = run_c("record", "--golden-dir", str(out), "tests/cli/small")
    assert r.returncode == 0, r.stderr
    return out / "small" / "cpu.h5"


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(8, 16),
                               torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 3))


def train(rec, model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int = 3,
          clip: float = 0.0, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 8, generator=gen)
        y = torch.randint(0, 3, (16,), generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip) if clip else None
        opt.step()
        rec.step(loss, grad_norm=norm)
