"""The environment family (E1-E3 of the team's own PyTorch): one recorded
step of the team's code, judged by the harness's torch_environment check
from the recorder's fingerprint. Debian's torch has no CUDA, so the
process's torch values are replaced by a CUDA wheel's (envinfo.torch_values
and cuda_values, what the recorder reads) to make each ID fail; on the real
process every check is not tested, never passed.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

from pathlib import Path

import pytest

from dlcheck import envinfo
from dlcheck.audit import run_audit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"
ADAPTER = EXAMPLES / "clean" / "closure_sgd_generic_loop.py"

#: a PyPI wheel for CUDA 12.1 on an A100 with a driver for CUDA 12.4
WHEEL = {"torch_cuda": "12.1", "torch_gpus": "0: NVIDIA A100-SXM4-80GB (sm_80)",
         "torch_arch_list": "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
         "torch_cudnn": "8902", "torch_cudnn_built": "8902",
         "torch_nccl": "2.18.1", "torch_nccl_loaded": "2.18.1"}


def audit(tmp_path: Path, monkeypatch, driver: str, **torch: str):
    real_torch, real_cuda = envinfo.torch_values, envinfo.cuda_values
    monkeypatch.setattr(envinfo, "torch_values", lambda: {**real_torch(), **WHEEL, **torch})
    monkeypatch.setattr(envinfo, "cuda_values", lambda: {**real_cuda(), "cuda_driver": driver})
    result = run_audit(ADAPTER, tmp_path / "out", families=["environment"])
    assert result.message == "", result.message
    return result, {o.name.split("/")[-1]: o.verdict for o in result.outcomes}


def test_a_wheel_that_fits_the_machine_passes(tmp_path, monkeypatch):
    result, verdicts = audit(tmp_path, monkeypatch, "12.4")
    assert result.exit_code == 0 and not result.ids
    assert verdicts == {"torch_e1": "pass", "torch_e2": "pass", "torch_e3": "pass"}


@pytest.mark.parametrize("driver, torch, found", [
    ("11.8", {}, "E1"),                                                    # driver too old
    ("12.4", {"torch_gpus": "0: Tesla T4 (sm_75)",
              "torch_arch_list": "sm_80 sm_86 sm_90"}, "E2"),              # no sm_75 kernels
    ("12.4", {"torch_cudnn": "8700"}, "E3"),                               # another cuDNN loaded
], ids=["E1", "E2", "E3"])
def test_each_mismatch_is_its_own_finding(tmp_path, monkeypatch, driver, torch, found):
    result, verdicts = audit(tmp_path, monkeypatch, driver, **torch)
    assert result.exit_code == 1
    assert result.ids == {found}, result.ids
    assert verdicts[f"torch_{found.lower()}"] == "fail"
    assert "fix" in result.catalogue[found]


def test_a_cpu_torch_is_not_tested_never_passed(tmp_path):
    result = run_audit(ADAPTER, tmp_path / "out", families=["environment"])
    assert result.exit_code == 0 and not result.ids
    assert {o.verdict for o in result.outcomes} == {"not_tested"}
    assert "PyTorch built without CUDA" in result.text
