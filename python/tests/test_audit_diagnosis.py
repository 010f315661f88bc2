"""Findings on code written unlike the examples:
- A2: clipping before unscale_ in a team module that imported
  clip_grad_norm_ / clip_grad_value_ by name."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dlcheck.audit import run_audit

from test_audit_adapter import GOOD

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"

#: test_audit_adapter's pipeline with a model of named parts (the adapters below add to it)
BASE = GOOD + """
import torch.nn as nn
from dlcheck.audit import CpuGradScaler


class Net(nn.Module):
    def __init__(self, norm=None):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 16), norm or nn.BatchNorm1d(16), nn.ReLU())
        self.fc = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.backbone(x))


def make_model():
    return Net()
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def by_name(result) -> dict:
    return {f"{o.family}/{o.name}": o for o in result.outcomes}


# ---- A2: clipping wherever the team's code calls it from -------------------------------------

AMP_HELPER = """
from torch.nn.utils import {fn}


def clip(model):
    return {fn}(model.parameters(), {arg})
"""

AMP_STEP = """
from {module} import clip


def make_scaler():
    return CpuGradScaler(init_scale=2.0 ** 12)


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    {unscale_first}
    clip(model)
    scaler.step(optimizer)
    scaler.update()
    return loss
"""


@pytest.mark.parametrize("fn,arg", [("clip_grad_norm_", "1.0"), ("clip_grad_value_", "0.01")])
def test_clipping_in_a_team_module_that_imported_it_by_name_is_a2(tmp_path: Path, fn: str,
                                                                    arg: str) -> None:
    module = f"team_{fn}"  # one module per case: the first import stays in sys.modules
    write(tmp_path, f"{module}.py", AMP_HELPER.format(fn=fn, arg=arg))
    broken = write(tmp_path, "broken.py",
                   BASE + AMP_STEP.format(module=module, unscale_first=""))
    fixed = write(tmp_path, "fixed.py", BASE + AMP_STEP.format(
        module=module, unscale_first="scaler.unscale_(optimizer)"))
    bad = run_audit(broken, tmp_path / "bad", families=["amp"])
    assert bad.ids == {"A2"}, bad.text + bad.message
    assert f"the first {fn} at {module}.py:6" in bad.findings["A2"][0].evidence
    good = run_audit(fixed, tmp_path / "good", families=["amp"])
    assert good.exit_code == 0, good.text + good.message
    # the audit put the team's reference back
    assert getattr(sys.modules[module], fn) is getattr(torch.nn.utils.clip_grad, fn)
    assert torch.nn.utils.clip_grad_norm_ is torch.nn.utils.clip_grad.clip_grad_norm_


def test_the_scaler_has_no_clipping_counter_it_cannot_keep() -> None:
    from dlcheck.audit import CpuGradScaler
    assert not hasattr(CpuGradScaler(), "clipped_while_scaled")
