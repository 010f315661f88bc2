"""The inference family's note on the modes evaluate() leaves behind (M5):
reported, never failed, since whether the team's loop calls model.train()
after evaluating lies outside the adapter.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dlcheck.audit import run_audit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"

#: the examples' digits MLP with dropout; their evaluate() puts the model back in
#: training mode itself
RESTORES = """
    import torch
    from common import batches, evaluate, mlp, train_step


    def make_model():
        return mlp(64, dropout=0.2)


    def make_optimizer(model):
        return torch.optim.SGD(model.parameters(), lr=0.05)
    """
#: an evaluate() that leaves the model in eval mode (the loop would call model.train())
LEAVES_EVAL = RESTORES + """

    _evaluate = evaluate


    def evaluate(model):
        result = _evaluate(model)
        model.eval()
        return result
    """


def inference_note(tmp_path: Path, body: str) -> tuple[int, dict]:
    path = tmp_path / "pipeline.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n" +
                    textwrap.dedent(body))
    result = run_audit(path, tmp_path / "out", families=["inference"])
    assert result.message == "", result.message
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    scen = next(s for s in report["scenarios"] if s["name"] == "audit_inference")
    return result.exit_code, scen["runs"][0]


@pytest.mark.parametrize("body,left", [(LEAVES_EVAL, 1), (RESTORES, 0)],
                         ids=["leaves_eval_mode", "restores_the_mode"])
def test_modes_left_by_evaluate_are_noted_not_failed(tmp_path: Path, body: str,
                                                     left: int) -> None:
    code, run = inference_note(tmp_path, body)
    assert code == 0
    assert run["metrics"]["inference_left_in_eval_mode"] == left
