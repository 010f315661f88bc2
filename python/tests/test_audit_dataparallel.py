"""D10, nn.DataParallel where DistributedDataParallel is meant: where
data_parallel_modules finds it (wrap_ddp's module, or inside make_model()'s
model), the note saying which, and the ddp family on a model built as
DataParallel: D10 alone, the checks between ranks not tested, no crash
(on the CPU DataParallel runs the module as it is)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch.nn as nn

from dlcheck.audit import run_audit
from dlcheck.audit.families.dataparallel import data_parallel_modules, describe
from dlcheck.audit.families.ddp import free_port, process_group

from test_audit_diagnosis import BASE, by_name, write


def adapter(build, wrap) -> SimpleNamespace:
    return SimpleNamespace(model=lambda seed: build(), wrap=wrap)


def test_data_parallel_is_found_in_the_wrapper_or_the_model() -> None:
    mlp = lambda: nn.Sequential(nn.Linear(2, 2))  # noqa: E731
    assert data_parallel_modules(adapter(mlp, nn.DataParallel), 0) == ([], ["<model>"])
    inner = lambda: nn.Sequential(nn.DataParallel(nn.Linear(2, 2)))  # noqa: E731
    built, wrapped = data_parallel_modules(adapter(inner, lambda m: m), 0)
    assert built == wrapped == ["0"]
    assert "make_model() builds nn.DataParallel (0)" in describe(built, wrapped)
    assert describe([], ["<model>"]).startswith("wrap_ddp returns nn.DataParallel (<model>)")
    with process_group(0, 1, free_port()):
        ddp = data_parallel_modules(adapter(mlp, nn.parallel.DistributedDataParallel), 0)
    assert ddp == ([], [])
    assert "the ranks are processes" in describe(*ddp)


BUILT_AS_DATA_PARALLEL = """
def make_model():
    return nn.DataParallel(Net())


def wrap_ddp(model):
    return model
"""


def test_a_model_built_as_data_parallel_is_d10_alone(tmp_path: Path) -> None:
    text = BASE.replace("def batches(seed, batch_size):",
                        "def batches(seed, batch_size, rank=0, world_size=1):")
    result = run_audit(write(tmp_path, "dp.py", text + BUILT_AS_DATA_PARALLEL), tmp_path / "out",
                       families=["ddp"])
    assert result.message == "" and result.ids == {"D10"}, result.text + result.message
    assert "make_model() builds nn.DataParallel (<model>)" in result.findings["D10"][0].evidence
    checks = by_name(result)
    assert checks["ddp/all_checks"].verdict == "not_tested"
    assert "D1" in checks["ddp/all_checks"].catalogue
