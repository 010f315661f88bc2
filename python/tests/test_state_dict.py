"""save_state_dict writes what the engine's init_weights reads."""
from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from dlcheck import read_trace, save_state_dict

REPO = Path(__file__).resolve().parents[2]


def small_scenario_with(weights: str) -> str:
    """tests/cli/small's scenario, started from `weights`."""
    text = (REPO / "tests" / "cli" / "small" / "scenario.yaml").read_text()
    assert "\nseed: 1\n" in text
    return text.replace("\nseed: 1\n", f"\nseed: 1\ninit_weights: {weights}\n")


def test_the_engine_starts_from_the_saved_weights(tmp_path, run_c):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 10))
    weights = save_state_dict(model, tmp_path / "init.h5")
    scenario = tmp_path / "small"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text(small_scenario_with(weights))
    r = run_c("record", "--golden-dir", str(tmp_path / "g"), str(scenario))
    assert r.returncode == 0, r.stdout + r.stderr
    t = read_trace(tmp_path / "g" / "small" / "cpu.h5")
    for key, value in model.state_dict().items():
        assert torch.equal(t.final_tensor(f"init/{key}"), value), key  # bitwise: a copy


def test_layout_dtypes_and_module_prefix(tmp_path):
    bn = torch.nn.BatchNorm1d(3)
    sd = {"module." + k: v for k, v in bn.state_dict().items()}
    sd["module.half"] = torch.ones(2, dtype=torch.float16)
    path = save_state_dict(sd, tmp_path / "w.h5")
    with h5py.File(path, "r") as f:
        g = f["model"]
        assert list(g) == ["weight", "bias", "running_mean", "running_var",
                           "num_batches_tracked", "half"]
        assert g["num_batches_tracked"].shape == () and g["num_batches_tracked"].dtype == np.int64
        assert g["half"].dtype == np.float32 and g["weight"].dtype == np.float32


@pytest.mark.parametrize("sd, err", [
    ({}, ValueError), ({"a/b": torch.zeros(1)}, ValueError), ({".": torch.zeros(1)}, ValueError),
    ({"a": torch.zeros(1), "module.a": torch.zeros(1)}, ValueError),
    ({"a": torch.zeros(1, 1, 1, 1, 1)}, ValueError), ({"a": 1.0}, TypeError),
    ({"a": torch.zeros(2, dtype=torch.complex64)}, TypeError), ([1], TypeError)])
def test_bad_state_dicts_write_nothing(tmp_path, sd, err):
    with pytest.raises(err):
        save_state_dict(sd, tmp_path / "w.h5")
    assert os.listdir(tmp_path) == []
