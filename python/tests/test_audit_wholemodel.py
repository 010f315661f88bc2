"""C8, the whole model pickled into the checkpoint: where pickled_modules
finds nn.Module objects in a loaded checkpoint (nested, a ScriptModule
not), the checkpoint family flagging torch.save(model) with C8 alone (the
key diagnosis reads the pickled model's state dict, so no false C5), a
checkpoint of state dicts passing, and a format torch.load cannot read
not tested."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from dlcheck.audit import run_audit
from dlcheck.audit.families.checkpoint import pickled_modules

from test_audit_diagnosis import BASE, by_name, write


def test_pickled_modules_are_found_where_they_sit() -> None:
    net = nn.Sequential(nn.Linear(2, 2))
    assert pickled_modules(net) == ["<file> (torch.nn.modules.container.Sequential)"]
    found = pickled_modules({"model": net.state_dict(), "ema": [1, {"net": nn.Linear(2, 2)}],
                             "optimizer": {"state": {}, "param_groups": []}})
    assert found == ["ema.1.net (torch.nn.modules.linear.Linear)"]
    assert pickled_modules({"model": net.state_dict(), "step": 3}) == []
    assert pickled_modules({"scripted": torch.jit.script(net)}) == []


WHOLE = """
def save_checkpoint(path, model, optimizer):
    torch.save({saved}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    {load}
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
"""


def test_a_whole_model_in_the_checkpoint_is_c8_alone(tmp_path: Path) -> None:
    bad = run_audit(write(tmp_path, "whole.py", BASE + WHOLE.format(
        saved='{"net": model, "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}',
        load='model.load_state_dict(ckpt["net"].state_dict())')), tmp_path / "bad",
        families=["checkpoint"])
    assert bad.ids == {"C8"}, bad.text + bad.message
    assert "net (whole.Net)" in bad.findings["C8"][0].evidence
    checks = by_name(bad)
    # the pickled model's own state dict is what the key diagnosis reads: every key there
    for name in ("checkpoint_has_every_key", "checkpoint_shapes_match",
                 "resume_matches_straight_run"):
        assert checks[f"checkpoint/{name}"].verdict == "pass", bad.text


def test_state_dicts_beside_other_entries_pass(tmp_path: Path) -> None:
    good = run_audit(write(tmp_path, "sd.py", BASE + WHOLE.format(
        saved='{"net": model.state_dict(), "optimizer": optimizer.state_dict(), '
              '"rng": torch.get_rng_state(), "epoch": 3, "config": {"hidden": 16}}',
        load='model.load_state_dict(ckpt["net"])')), tmp_path / "good", families=["checkpoint"])
    assert good.exit_code == 0, good.text + good.message
    assert by_name(good)["checkpoint/checkpoint_holds_no_whole_model"].verdict == "pass"


OWN_FORMAT = """
import io


def save_checkpoint(path, model, optimizer):
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, buf)
    with open(path, "wb") as f:
        f.write(buf.getvalue()[::-1])


def load_checkpoint(path, model, optimizer):
    with open(path, "rb") as f:
        ckpt = torch.load(io.BytesIO(f.read()[::-1]))
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
"""


def test_a_format_torch_load_cannot_read_is_not_tested(tmp_path: Path) -> None:
    result = run_audit(write(tmp_path, "own.py", BASE + OWN_FORMAT), tmp_path / "out",
                       families=["checkpoint"])
    assert result.exit_code == 0, result.text + result.message
    check = by_name(result)["checkpoint/checkpoint_holds_no_whole_model"]
    assert check.verdict == "not_tested" and "torch.load cannot read" in check.evidence
