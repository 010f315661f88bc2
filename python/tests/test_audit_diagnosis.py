"""Findings on code written unlike the examples:
- A2: clipping before unscale_ in a team module that imported
  clip_grad_norm_ / clip_grad_value_ by name;
- checkpoints: sub-state-dicts (no false C5, a real missing key still C5),
  a module. prefix from the adapter's wrap_ddp (C4), a failed resume
  explained by C4, C3 only when training draws random numbers;
- N3's catalogue text;
- a step that cannot run under CPU bfloat16 autocast: not tested, the
  other families go on."""
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


# ---- checkpoints of sub-state-dicts ----------------------------------------------------------

PARTS = """
def save_checkpoint(path, model, optimizer):
    torch.save({{"backbone": {backbone}, "fc": model.fc.state_dict(),
                "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()}}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.backbone.load_state_dict(ckpt["backbone"], strict=False)
    model.fc.load_state_dict(ckpt["fc"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
"""


def test_a_checkpoint_of_sub_state_dicts_is_read_part_by_part(tmp_path: Path) -> None:
    good = run_audit(write(tmp_path, "parts.py", BASE + PARTS.format(
        backbone="model.backbone.state_dict()")), tmp_path / "good", families=["checkpoint"])
    assert good.exit_code == 0, good.text + good.message
    checks = by_name(good)
    for name in ("checkpoint_keys_unprefixed", "checkpoint_has_every_key",
                 "checkpoint_shapes_match"):
        assert checks[f"checkpoint/{name}"].verdict == "pass", good.text
    # the backbone saved without its BatchNorm statistics, loaded with strict=False
    bad = run_audit(write(tmp_path, "parts_bad.py", BASE + PARTS.format(
        backbone="dict(model.backbone.named_parameters())")), tmp_path / "bad",
        families=["checkpoint"])
    assert bad.ids == {"C5"}, bad.text + bad.message
    assert "backbone.1.running_mean" in bad.findings["C5"][0].evidence


# ---- the checkpoint family wraps with wrap_ddp ------------------------------------------------

WRAPPED = """
def wrap_ddp(model):
    return nn.parallel.DistributedDataParallel(model)


def save_checkpoint(path, model, optimizer):
    torch.save({{"model": {saved}.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    {saved}.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
"""


def test_a_module_prefix_saved_from_the_adapters_wrap_ddp_is_c4(tmp_path: Path) -> None:
    bad = run_audit(write(tmp_path, "wrapped.py", BASE + WRAPPED.format(saved="model")),
                    tmp_path / "bad", families=["checkpoint"])
    assert bad.ids == {"C4"}, bad.text + bad.message
    assert "module.backbone.0.weight" in bad.findings["C4"][0].evidence
    good = run_audit(write(tmp_path, "unwrapped.py", BASE + WRAPPED.format(
        saved='getattr(model, "module", model)')), tmp_path / "good", families=["checkpoint"])
    assert good.exit_code == 0, good.text + good.message
    assert not torch.distributed.is_initialized()


# ---- C4 explains the resume; C3 only with random draws ---------------------------------------

PREFIX_NOT_LOADED = """
def make_model():
    return nn.DataParallel(Net())


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    # "load what fits" into the plain model: no key fits, nothing is loaded
    own = model.module.state_dict()
    model.module.load_state_dict({k: v for k, v in ckpt["model"].items() if k in own},
                                 strict=False)
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])
"""


def test_a_resume_that_fails_through_the_prefix_is_explained_by_c4(tmp_path: Path) -> None:
    result = run_audit(write(tmp_path, "prefix.py", BASE + PREFIX_NOT_LOADED),
                       tmp_path / "out", families=["checkpoint"])
    assert result.ids == {"C4"}, result.text + result.message
    assert by_name(result)["checkpoint/resume_matches_straight_run"].verdict == "fail"
    assert "no catalogue ID diagnosed" not in result.text
    assert "also      checkpoint/resume_matches_straight_run failed" in result.text


HEAD_REBUILT = """
def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.fc = nn.Linear(16, 5)  # the head rebuilt from today's config: draws its init
    own = model.state_dict()
    model.load_state_dict({k: v for k, v in ckpt["model"].items()
                           if own[k].shape == v.shape}, strict=False)
    optimizer.load_state_dict(ckpt["optimizer"])
"""


def test_c3_is_not_diagnosed_on_a_model_that_draws_no_random_numbers(tmp_path: Path) -> None:
    result = run_audit(write(tmp_path, "head.py", BASE + HEAD_REBUILT), tmp_path / "out",
                       families=["checkpoint"])
    assert result.ids == {"C6"}, result.text + result.message
    c3 = by_name(result)["checkpoint/rng_state_restored"]
    assert c3.verdict == "not_tested" and "draws nothing" in c3.evidence, c3


def test_c3_is_still_diagnosed_when_dropout_draws(tmp_path: Path) -> None:
    result = run_audit(EXAMPLES / "c3_rng_state_not_saved.py", tmp_path / "out",
                       families=["checkpoint"])
    assert result.ids == {"C3"}, result.text + result.message


# ---- a step that cannot run under the team's autocast ----------------------------------------

LAYERNORM_AMP = """
def make_model():
    return Net(nn.LayerNorm(16))


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy({forward}, y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss
"""


def test_a_family_that_cannot_run_under_autocast_is_not_tested(tmp_path: Path) -> None:
    # torch 1.13's CPU layer_norm has no bfloat16 kernel: "expected scalar type BFloat16"
    result = run_audit(write(tmp_path, "ln.py", BASE + LAYERNORM_AMP.format(forward="model(x)")),
                       tmp_path / "out", families=["parameters", "amp"])
    assert result.message == "" and result.exit_code == 0, result.text + result.message
    checks = by_name(result)
    amp = checks["amp/all_checks"]
    assert amp.verdict == "not_tested" and amp.catalogue == ("A1", "A2", "A3", "A6")
    assert "train_step()" in amp.evidence and "ln.py:" in amp.evidence
    assert "expected scalar type BFloat16" in amp.evidence
    assert checks["parameters/no_parameter_frozen_by_mistake"].verdict == "pass"
    assert checks["parameters/under_team_autocast"].verdict == "not_tested"
    assert "autocast off" in checks["parameters/under_team_autocast"].evidence


@pytest.mark.parametrize("forward", ["model(x.double())", "model(x)[:, :2]"])
def test_other_failures_under_autocast_still_stop_the_audit(tmp_path: Path, forward: str) -> None:
    """A dtype error outside autocast, or any other error under it, is the
    adapter's bug: exit 2 naming the function."""
    text = BASE + LAYERNORM_AMP.format(forward=forward)
    if forward.endswith("double())"):
        text = text.replace('with torch.autocast("cpu", dtype=torch.bfloat16):', "if True:")
    else:
        text = text.replace("Net(nn.LayerNorm(16))", "Net()")
    result = run_audit(write(tmp_path, "bug.py", text), tmp_path / "out",
                       families=["parameters", "amp"])
    assert result.exit_code == 2 and "train_step()" in result.message, result.text


# ---- N3's catalogue text ---------------------------------------------------------------------

def test_n3_explains_worker_streams_and_a_fix_that_removes_the_worker_count(
        tmp_path: Path) -> None:
    result = run_audit(EXAMPLES / "n3_augmentation_noise_per_worker.py", tmp_path / "out",
                       families=["determinism"])
    assert result.ids == {"N3"}, result.text + result.message
    n3 = result.catalogue["N3"]
    assert "keyed by thread" not in n3["mistake"] and "worker" in n3["mistake"]
    assert "sample index" in n3["fix"] and "num_workers" in n3["fix"]
    assert "never per thread" not in n3["fix"]
