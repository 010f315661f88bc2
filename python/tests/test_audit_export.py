"""The export family's pieces (audit/families/export.py): model inputs, output
flattening, the comparison against eager within the model's own rounding,
the served input's statistics (X4), the class-level input capture, and the
family reporting not_tested cleanly when onnxruntime cannot be imported.
The example pairs x1-x6 run the whole audit (test_audit_examples.py).

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dlcheck.audit import run_audit
from dlcheck.audit.families.export import (Case, Unavailable, capture_inputs, compare,
                                           input_difference, load, model_input, onnxruntime,
                                           outputs, reference)
from dlcheck.audit.harness import find_binary

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "audit"


@pytest.fixture(scope="module")
def binary() -> str:
    try:
        return find_binary()
    except Exception as e:  # noqa: BLE001
        pytest.fail(str(e))


def test_model_input_is_the_tensor_or_a_tuple_batch_first() -> None:
    x = torch.ones(2, 3)
    assert model_input(x) is x
    assert model_input((x, torch.zeros(2))) is x
    assert model_input([x]) is x
    with pytest.raises(TypeError, match="dict batch"):
        model_input({"x": x})


def test_outputs_flattens_tuples_dicts_and_numpy() -> None:
    a, b = torch.ones(2), torch.zeros(3)
    got = outputs({"logits": a, "aux": (b, np.ones(4, dtype=np.float32))})
    assert [t.shape for t in got] == [(2,), (3,), (4,)]
    assert outputs("not a tensor") == []


def case_for(model: torch.nn.Module, x: torch.Tensor) -> Case:
    (case,) = reference(model, [Case("batch", len(x), x, x)])
    return case


def test_band_is_the_models_own_rounding_and_an_equal_model_passes() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    case = case_for(model, torch.randn(5, 8))
    assert 0 < case.band < 1e-5 and "float64" in case.band_from
    assert compare(model, case).ok
    # a change of 1e-3 is far beyond float32 rounding
    bad = compare(lambda x: model(x) + 1e-3, case)
    assert not bad.ok and bad.ratio > 1 and bad.relative > 0
    assert "band" in bad.describe()


def test_failures_and_shape_changes_are_mismatches() -> None:
    model = torch.nn.Linear(3, 2)
    case = case_for(model, torch.ones(4, 3))

    def raises(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("Got invalid dimensions for input")
    assert "invalid dimensions" in compare(raises, case).error
    assert "shapes" in compare(lambda x: model(x)[:2], case).error


def test_band_falls_back_to_a_stated_rule_without_float64() -> None:
    class Float32Constant(torch.nn.Module):
        """A forward that builds a float32 matrix: its float64 copy raises."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) @ torch.ones(3, 2)
    case = case_for(Float32Constant(), torch.ones(4, 3))
    assert case.band > 0 and "no float64 copy" in case.band_from


def test_reference_drops_what_eager_cannot_run() -> None:
    model = torch.nn.Linear(3, 2)
    assert reference(model, [Case("wrong width", 2, torch.ones(2, 5), torch.ones(2, 5))]) == []


def test_input_difference_names_the_statistic() -> None:
    torch.manual_seed(0)
    t = torch.randn(6, 3, 4, 4)
    assert "dtype float16" in input_difference(t.half(), t)
    assert "channel order reversed" in input_difference(t.flip(1), t)
    assert "per-channel mean/std" in input_difference(t * 0.5 + 1, t)
    assert "value range" in input_difference(t * 0.5 + 1, t)
    assert "layout" in input_difference(t.permute(0, 2, 3, 1), t)
    assert "the same statistics" in input_difference(t.clone(), t)
    assert "shape" in input_difference(torch.ones(2, 5), torch.ones(2, 3))


def test_capture_sees_torchscript_inputs_and_restores_the_class(tmp_path: Path) -> None:
    path = str(tmp_path / "m.pt")
    torch.jit.trace(torch.nn.Linear(3, 2).eval(), torch.ones(1, 3)).save(path)
    m = torch.jit.load(path)
    before = torch.jit.RecursiveScriptModule.__call__
    with capture_inputs() as seen:
        m(torch.full((2, 3), 7.0))
    assert seen and float(seen[0][0, 0]) == 7.0
    assert torch.jit.RecursiveScriptModule.__call__ is before


def test_load_onnx_reports_fixed_axes(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    path = str(tmp_path / "m.onnx")
    torch.onnx.export(torch.nn.Linear(3, 2).eval(), torch.ones(4, 3), path, input_names=["x"])
    loaded = load(path)
    assert loaded.kind == "ONNX" and loaded.fixed == {0: 4, 1: 3}
    assert outputs(loaded.fn(torch.ones(4, 3)))[0].shape == (4, 2)


@pytest.fixture
def no_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnxruntime not importable (as on a machine without it)."""
    real = builtins.__import__

    def fake(name: str, *args, **kwargs):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ImportError("No module named 'onnxruntime'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)


def test_onnxruntime_missing_is_unavailable(no_onnxruntime: None) -> None:
    with pytest.raises(Unavailable, match="onnxruntime cannot be imported"):
        onnxruntime()


def test_team_onnx_export_without_onnxruntime_is_not_tested(no_onnxruntime: None, binary: str,
                                                            tmp_path: Path) -> None:
    r = run_audit(EXAMPLES / "x3_onnx_fixed_batch_axis.py", tmp_path / "out",
                  families=["export"], binary=binary)
    assert r.message == "" and r.exit_code == 0, r.text
    skipped = {o.name: o for o in r.outcomes if o.verdict == "not_tested"}
    for name in ("export_in_eval_mode", "export_keeps_control_flow", "export_dynamic_axes",
                 "half_export_within_tolerance", "export_matches_eager"):
        assert "onnxruntime cannot be imported" in skipped[name].evidence, name
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "<skipped" in junit


def test_own_exports_without_onnxruntime_check_torchscript_only(no_onnxruntime: None,
                                                                binary: str,
                                                                tmp_path: Path) -> None:
    r = run_audit(EXAMPLES / "m1_eval_without_eval_mode_fixed.py", tmp_path / "out",
                  families=["export"], binary=binary)
    assert r.exit_code == 0, r.text
    verdicts = {o.name: o.verdict for o in r.outcomes}
    assert verdicts["export_keeps_control_flow"] == "pass"
    assert verdicts["export_matches_eager"] == "not_tested"


def test_export_must_write_the_path_it_returns(binary: str, tmp_path: Path) -> None:
    adapter = tmp_path / "ad.py"
    adapter.write_text(
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "from x3_onnx_fixed_batch_axis import batches, make_model, make_optimizer, train_step\n"
        "def export(model, example_batch, path):\n"
        "    return path + '.nowhere'\n")
    r = run_audit(adapter, tmp_path / "out", families=["export"], binary=binary)
    assert r.exit_code == 2 and "export()" in r.message and "does not exist" in r.message


def test_half_tolerance_must_be_positive(binary: str, tmp_path: Path) -> None:
    adapter = tmp_path / "ad.py"
    adapter.write_text(
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "from m1_eval_without_eval_mode_fixed import batches, make_model, make_optimizer, "
        "train_step\n"
        "AUDIT = {'half_tolerance': -1}\n")
    r = run_audit(adapter, tmp_path / "out", families=["export"], binary=binary)
    assert r.exit_code == 2 and "half_tolerance" in r.message



def audit_inference_transform(body: str, binary: str, tmp_path: Path) -> Any:
    """The export family on x4_inference_skips_normalisation's training code
    with preprocess_for_inference(raw) returning `body`."""
    adapter = tmp_path / "ad.py"
    adapter.write_text(
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "from x4_inference_skips_normalisation import (batches, make_model, make_optimizer,\n"
        "                                              preprocess, train_step)\n"
        f"def preprocess_for_inference(raw):\n    return {body}\n")
    return run_audit(adapter, tmp_path / "out", families=["export"], binary=binary)


def test_inference_transform_is_checked_without_an_export(binary: str, tmp_path: Path) -> None:
    """X4 from preprocess_for_inference alone: an input of another dtype makes
    the eager model raise, counted as a mismatch with the dtype named; the
    pair x4_inference_skips_normalisation(.py, _fixed.py) shows the scale."""
    r = audit_inference_transform("preprocess(raw).double()", binary, tmp_path)
    assert r.exit_code == 1 and r.ids == {"X4"}, r.text
    x4 = next(o for o in r.outcomes if o.name == "serving_preprocess_matches")
    assert "dtype float64 served, float32 in training" in x4.evidence, x4.evidence


def test_inference_transform_that_raises_names_it(binary: str, tmp_path: Path) -> None:
    r = audit_inference_transform("raw.numpy()", binary, tmp_path)
    assert r.exit_code == 2 and "preprocess_for_inference" in r.message, r.message
    assert "must return a tensor, got ndarray" in r.message
