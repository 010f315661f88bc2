"""The adapter contract: a malformed adapter (a missing factory, a wrong
return type, a step that raises) is exit 2 with a message naming the
adapter function, and leaves nothing behind."""
from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from dlcheck.audit import FAMILIES, AdapterError, CpuGradScaler, load_adapter, run_audit
from dlcheck.audit.adapter import split_batch

GOOD = """
import torch
import torch.nn.functional as F

def make_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))

def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)

def batches(seed, batch_size):
    g = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randn(batch_size, 4, generator=g), torch.randint(0, 3, (batch_size,), generator=g)

def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss
"""


def adapter(tmp_path: Path, text: str, name: str = "pipeline.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def audit_fails(tmp_path: Path, text: str, function: str) -> str:
    out = tmp_path / "reports" / "out"
    result = run_audit(adapter(tmp_path, text), out)
    assert result.exit_code == 2, result.text or result.message
    assert f"{function}()" in result.message, result.message
    assert not out.exists(), "a failed audit must leave no report"
    assert not list(out.parent.iterdir()), "a failed audit must leave no temporary folder"
    return result.message


def test_good_adapter_passes(tmp_path: Path) -> None:
    result = run_audit(adapter(tmp_path, GOOD), tmp_path / "out")
    assert result.exit_code == 0, result.text + result.message
    assert (tmp_path / "out" / "report.json").exists()
    assert (tmp_path / "out" / "summary.txt").read_text() == result.text
    assert "not tested" not in result.text.lower() or "NOT TESTED" in result.text


def test_missing_factory_names_it(tmp_path: Path) -> None:
    msg = audit_fails(tmp_path, GOOD.replace("def make_optimizer", "def make_optimiser"),
                      "make_optimizer")
    assert "missing" in msg


def test_wrong_return_type_names_the_function(tmp_path: Path) -> None:
    text = GOOD.replace("return torch.nn.Sequential(", "return dict(m=torch.nn.Sequential(") \
        .replace("torch.nn.Linear(8, 3))", "torch.nn.Linear(8, 3)))")
    assert "torch.nn.Module" in audit_fails(tmp_path, text, "make_model")
    text = GOOD.replace("    return loss\n", "    return [loss]\n")
    assert "loss" in audit_fails(tmp_path, text, "train_step")
    text = GOOD.replace("return torch.optim.SGD(model.parameters(), lr=0.1)", "return None")
    audit_fails(tmp_path, text, "make_optimizer")


def test_step_that_raises_names_train_step_and_the_line(tmp_path: Path) -> None:
    text = GOOD.replace("    optimizer.step()\n", "    optimizer.step()\n    1 / 0\n")
    msg = audit_fails(tmp_path, text, "train_step")
    assert "ZeroDivisionError" in msg and "pipeline.py" in msg


def test_batches_that_run_out_or_raise(tmp_path: Path) -> None:
    text = GOOD.replace("    while True:\n", "    for _ in range(2):\n")
    assert "ran out" in audit_fails(tmp_path, text, "batches")


def test_import_error_and_bad_settings(tmp_path: Path) -> None:
    audit_fails(tmp_path, GOOD + "\nimport no_such_module_here\n", "<module>")
    assert "accumulation" in audit_fails(tmp_path, GOOD + "\nAUDIT = {'accumulation': 1}\n",
                                         "AUDIT")


def test_checkpoint_functions_come_in_pairs(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="load_checkpoint"):
        load_adapter(adapter(tmp_path, GOOD + "\ndef save_checkpoint(path, model, opt):\n"
                                              "    pass\n"))


def test_out_dir_that_is_not_a_report_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "data.txt").write_text("keep me")
    result = run_audit(adapter(tmp_path, GOOD), out)
    assert result.exit_code == 2 and "not an earlier audit" in result.message
    assert (out / "data.txt").read_text() == "keep me"


def test_split_batch_structures() -> None:
    x, y = torch.arange(8.0).reshape(8, 1), torch.arange(8)
    parts = split_batch((x, y), 4)
    assert len(parts) == 4 and parts[3][1].tolist() == [6, 7]
    parts = split_batch({"x": x, "y": y}, 2)
    assert parts[1]["y"].tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError):
        split_batch(x[:6], 4)


def test_cpu_grad_scaler_skips_inf_steps_and_backs_off() -> None:
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=1.0)
    s = CpuGradScaler(init_scale=4.0, growth_interval=1)
    s.scale((w * 2).sum()).backward()
    assert s.still_scaled()
    s.step(opt)
    s.update()
    assert w.tolist() == [-1.0, -1.0] and s.get_scale() == 8.0
    w.grad = torch.tensor([float("inf"), 1.0])
    s._scaled = True
    s.step(opt)
    s.update()
    assert w.tolist() == [-1.0, -1.0] and s.get_scale() == 4.0
    assert s.state_dict()["scale"] == 4.0


def test_evaluate_with_a_wrong_return_type_names_it(tmp_path: Path) -> None:
    text = GOOD + "\ndef evaluate(model):\n    return 'fine'\n"
    assert "a number" in audit_fails(tmp_path, text, "evaluate")


def test_rank_processes_report_the_function_that_failed(tmp_path: Path) -> None:
    text = GOOD + textwrap.dedent("""
        def wrap_ddp(model):
            raise ValueError("no GPU for DDP here")
        """)
    assert "rank and world_size" in audit_fails(tmp_path, text, "batches")
    text = text.replace("def batches(seed, batch_size):", "def batches(seed, batch_size, rank=0, "
                        "world_size=1):")
    msg = audit_fails(tmp_path, text, "wrap_ddp")
    assert "no GPU for DDP here" in msg and "rank" in msg


def test_summary_names_every_family_and_what_was_not_tested(tmp_path: Path) -> None:
    result = run_audit(adapter(tmp_path, GOOD), tmp_path / "out")
    families = {o.family for o in result.outcomes}
    assert families == set(FAMILIES)  # every registered family, run or not tested
    untested = {o.family: o.evidence for o in result.outcomes if o.verdict == "not_tested"}
    assert "evaluate" in untested["inference"] and "save_checkpoint" in untested["checkpoint"]
    assert "wrap_ddp" in untested["ddp"] and "autocast" in untested["amp"]
    assert all(o.verdict != "not_tested" or o.evidence for o in result.outcomes)


def test_a_scheduler_on_the_optimizer_draws_no_warning_from_the_audits_patch(
        tmp_path: Path) -> None:
    # Teams hang a scheduler on the optimizer and step it in train_step; the audit's own
    # optimizer.step wrapper once made torch warn that step() "has been overridden after
    # learning rate scheduler initialization" for every such adapter.
    text = GOOD.replace("    return torch.optim.SGD(model.parameters(), lr=0.1)",
                        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                        "    opt.scheduler = torch.optim.lr_scheduler.StepLR(opt, 2)\n"
                        "    return opt").replace("    optimizer.step()\n",
                                                  "    optimizer.step()\n"
                                                  "    optimizer.scheduler.step()\n")
    assert "scheduler.step()" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run_audit(adapter(tmp_path, text), tmp_path / "out",
                           families=["parameters", "accumulation"])
    assert result.exit_code == 0, result.text + result.message
