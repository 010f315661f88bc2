"""The audit's proof: every broken script of examples/audit/ is flagged with
its catalogue ID and no other, its fixed twin passes, and every catalogue
ID has a broken/fixed pair or a stated reason why it has none.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from dlcheck.audit import run_audit
from dlcheck.audit.harness import find_binary

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "audit"
#: Catalogue IDs without an example pair, and why (a new ID must be added
#: to the examples or here).
NO_PAIR = {
    "G5": "BatchNorm over micro-batches is an expected divergence, reported and not failed",
    "A1": "float16 autocast does not exist on the CPU (torch 1.13: bfloat16 only, and no float16 "
          "matmul); bfloat16 has float32's exponent range, so gradients do not underflow",
    "A3": "bfloat16 gradients do not overflow at any scale a CPU run reaches",
    "A4": "the CPU has no float16 autocast; bfloat16 losses are computed in float32",
    "A5": "needs fp16 and bf16 both measured: fp16 autocast is CUDA-only",
    "M5": "whether the team's loop calls model.train() after evaluating lies outside the "
          "adapter (an epoch loop that does is correct code): the inference family notes the "
          "modules evaluate() leaves in eval mode rather than failing",
    "N2": "CPU PyTorch's reductions are ordered for a fixed thread count; a Python thread "
          "pool summing in completion order differs only by chance, a flaky example",
    "N4": "a CUDA/cuDNN/NCCL version change needs a GPU and a golden recorded on another",
    "E1": "driver/runtime versions exist only with a GPU",
    "E2": "built GPU architectures exist only with a GPU",
    "E3": "CUDA library versions exist only with a GPU",
}


def pairs() -> list[tuple[str, Path, Path]]:
    """(catalogue ID, broken script, fixed twin) for every example pair."""
    found = []
    for broken in sorted(EXAMPLES.glob("*.py")):
        m = re.match(r"([a-z])(\d+)_.*", broken.stem)
        if not m or broken.stem.endswith("_fixed"):
            continue
        fixed = broken.with_name(broken.stem + "_fixed.py")
        found.append((m.group(1).upper() + m.group(2), broken, fixed))
    return found


def catalogue_ids(binary: str) -> set:
    """Every catalogue ID `dlcheck list` prints (lines "ID  scenario  mistake")."""
    r = subprocess.run([binary, "list"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, DLCHECK_NO_CUDA_PROBE="1"))
    assert r.returncode == 0, r.stderr
    return {line.split()[0] for line in r.stdout.splitlines()
            if re.match(r"[A-Z]\d+\s", line)}


@pytest.fixture(scope="session")
def binary() -> str:
    try:
        return find_binary()
    except Exception as e:  # noqa: BLE001
        pytest.fail(str(e))


TIMES: dict[str, float] = {}


@pytest.mark.parametrize("pitfall,broken,fixed", pairs(), ids=[p[1].stem for p in pairs()])
def test_broken_is_flagged_with_its_id_and_fixed_twin_passes(pitfall: str, broken: Path,
                                                             fixed: Path, binary: str,
                                                             tmp_path: Path) -> None:
    assert fixed.exists(), f"{broken.name} has no fixed twin {fixed.name}"
    t0 = time.monotonic()
    bad = run_audit(broken, tmp_path / "broken", binary=binary)
    TIMES[broken.stem] = time.monotonic() - t0
    assert bad.message == "", bad.message
    assert bad.exit_code == 1, bad.text
    assert bad.ids == {pitfall}, f"{broken.name}: expected only {pitfall}\n{bad.text}"
    t0 = time.monotonic()
    good = run_audit(fixed, tmp_path / "fixed", binary=binary)
    TIMES[fixed.stem] = time.monotonic() - t0
    assert good.message == "", good.message
    assert good.exit_code == 0 and not good.ids, f"{fixed.name}:\n{good.text}"
    assert (tmp_path / "fixed" / "report.json").exists()


def test_every_catalogue_id_has_a_pair_or_a_reason(binary: str) -> None:
    ids = catalogue_ids(binary)
    assert ids, "dlcheck list printed no catalogue"
    covered = {p[0] for p in pairs()}
    missing = sorted(ids - covered - set(NO_PAIR))
    assert not missing, f"catalogue IDs without a broken/fixed pair in examples/audit: {missing}"
    stale = sorted(covered & set(NO_PAIR))
    assert not stale, f"IDs with a pair are still listed in NO_PAIR: {stale}"


def test_issue_ids_have_pairs() -> None:
    required = {"G1", "G2", "G3", "G4", "M1", "M2", "M3", "M4", "F1", "F2", "F3", "C1", "C2",
                "C3", "C4", "C5", "C6", "C7", "D1", "D2", "D3", "D4", "D5", "D8", "A2", "N1",
                "N3"}
    assert required <= {p[0] for p in pairs()}


def test_readme_table_lists_every_pair() -> None:
    text = (EXAMPLES / "README.md").read_text()
    for pitfall, broken, fixed in pairs():
        assert f"`{broken.name}`" in text and f"`{fixed.name}`" in text, broken.name


def test_command_line_silent_when_fixed_exit_1_when_broken(binary: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), DLCHECK_BIN=binary)
    exe = "/usr/bin/python3"
    r = subprocess.run([exe, "-m", "dlcheck.audit", str(EXAMPLES / "g2_loss_not_divided_fixed.py"),
                        "--out", str(tmp_path / "ok")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = subprocess.run([exe, "-m", "dlcheck.audit", str(EXAMPLES / "g2_loss_not_divided.py"),
                        "--out", str(tmp_path / "bad")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FINDING G2" in r.stdout and "fix" in r.stdout


def test_report_times(request: pytest.FixtureRequest) -> None:
    """Prints the audit time of every example that ran (pytest -s shows it)."""
    for name, seconds in sorted(TIMES.items()):
        print(f"audit time {name}: {seconds:.2f} s")
