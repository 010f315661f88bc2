"""The example of examples/torch/README.md runs as the walk-through says:
the recorder costs at most five lines, two runs with the same settings are
bitwise the same, and dlcheck names what differs when they are not.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPT = HERE / "train_digits.py"


def dlcheck(*args: str) -> subprocess.CompletedProcess:
    path = os.environ.get("DLCHECK_BIN", str(ROOT / "build" / "release" / "cli" / "dlcheck"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no dlcheck binary at {path}: build it or set DLCHECK_BIN")
    env = dict(os.environ, DLCHECK_NO_CUDA_PROBE="1")
    return subprocess.run([path, *args], capture_output=True, text=True, env=env, timeout=120)


def train(out: Path, *flags: str) -> Path:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    r = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--epochs", "1", *flags],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote {out}" in r.stdout
    return out


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("runs") / "run.h5")


def test_the_recorder_takes_at_most_five_lines() -> None:
    lines = [line for line in SCRIPT.read_text().splitlines() if line.endswith("# dlcheck")]
    assert 1 <= len(lines) <= 5, lines
    # ... and no other line calls into dlcheck.
    calls = re.compile(r"\b(rec|dlcheck)\.\w+\(|^import dlcheck")
    assert not [line for line in SCRIPT.read_text().splitlines()
                if calls.search(line) and not line.endswith("# dlcheck")]


def test_same_settings_are_bitwise_the_same(baseline: Path, tmp_path: Path) -> None:
    again = train(tmp_path / "again.h5")
    r = dlcheck("compare", str(again), str(baseline))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("pass:") and "0 ulp" in r.stdout, r.stdout


def test_flags_that_change_no_number_show_in_the_environment(baseline: Path,
                                                             tmp_path: Path) -> None:
    # On the CPU, TF32 is a CUDA switch: the numbers stay bitwise equal and
    # the environment section says the flag changed.
    other = train(tmp_path / "tf32.h5", "--tf32")
    r = dlcheck("compare", str(other), str(baseline))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "environment" in r.stdout and "allow_tf32" in r.stdout, r.stdout


def test_autocast_is_found_with_its_first_step_and_tensor(baseline: Path,
                                                          tmp_path: Path) -> None:
    other = train(tmp_path / "bf16.h5", "--amp", "bf16")
    r = dlcheck("compare", str(other), str(baseline))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "loss first differs at step 0" in r.stdout, r.stdout
    assert "Bits first differ after step 0" in r.stdout, r.stdout
