"""Tolerances from the run's own noise (audit/noise.py) and dropout made
the identity across a batch split (audit/randomness.py): correct code that
a fixed rule failed passes, and the mistakes are still caught with their
IDs on the same models.

Models (python/tests/audit_models/): a transformer tagger with dropout
under RMSprop and a token-level loss (G1-G4), an MLP with LayerNorm under
plain SGD (F1-F3). Needs the dlcheck binary (DLCHECK_BIN)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from dlcheck.audit import run_audit
from dlcheck.audit.adapter import load_adapter
from dlcheck.audit.context import Context
from dlcheck.audit.loop import cast_floats
from dlcheck.audit.noise import band_rule, band_source, float64_shadow
from dlcheck.audit.randomness import DropoutOff
from dlcheck.tracefile import read_trace

MODELS = Path(__file__).resolve().parent / "audit_models"


def model_module(name: str, variant: str) -> ModuleType:
    """A fresh copy of audit_models/<name>.py with VARIANT set."""
    spec = importlib.util.spec_from_file_location(f"audit_model_{name}_{variant}",
                                                  MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.VARIANT = variant
    return module


def audit(tmp_path: Path, name: str, variant: str, family: str, binary: str):
    result = run_audit(model_module(name, variant), tmp_path / variant, families=[family],
                       binary=binary)
    assert result.message == "", result.message
    return result


def check_of(result, name: str) -> dict:
    return next(o for o in result.outcomes if o.name == name)


# ---- the accumulation family on the transformer with dropout under RMSprop -------------------

def test_correct_attention_under_rmsprop_passes_within_its_own_band(tmp_path: Path,
                                                                    dlcheck_bin: str) -> None:
    result = audit(tmp_path, "attention_tokens", "correct", "accumulation", dlcheck_bin)
    assert result.exit_code == 0, result.text
    report = json.loads((tmp_path / "correct" / "report.json").read_text())
    scen = next(s for s in report["scenarios"] if s["name"] == "audit_accumulation")
    # the report says how randomness was handled and where the band came from
    assert "Dropout made the identity" in scen["description"]
    assert "dropout calls ran with p = 0" in scen["description"]
    # the weights are judged against both runs' float64 shadows, recorded as runs
    runs = [r["name"] for r in scen["runs"]]
    assert "big_batch_float64" in runs and "accumulated_float64" in runs
    match = next(c for c in scen["checks"] if c["name"] == "accumulation_matches_big_batch")
    assert "distances from big_batch_float64 and accumulated_float64 added" in \
        match["evidence"], match["evidence"]


@pytest.mark.parametrize("variant,pitfall", [
    ("g1_no_zero_grad", "G1"), ("g2_not_divided", "G2"),
    ("g3_zero_grad_per_micro_batch", "G3"), ("g4_mean_per_micro_batch", "G4")])
def test_accumulation_mistakes_caught_on_the_same_model(tmp_path: Path, dlcheck_bin: str,
                                                        variant: str, pitfall: str) -> None:
    result = audit(tmp_path, "attention_tokens", variant, "accumulation", dlcheck_bin)
    assert result.exit_code == 1, result.text
    assert result.ids == {pitfall}, result.text


# ---- the parameters family on LayerNorm under plain SGD -------------------------------------

def test_layernorm_under_sgd_trains(tmp_path: Path, dlcheck_bin: str) -> None:
    result = audit(tmp_path, "layernorm_mlp", "correct", "parameters", dlcheck_bin)
    assert result.exit_code == 0, result.text
    assert check_of(result, "every_parameter_trains").verdict == "pass"


@pytest.mark.parametrize("variant,pitfall", [
    ("f1_frozen", "F1"), ("f2_not_in_optimizer", "F2"), ("f3_dead", "F3")])
def test_parameter_mistakes_caught_on_the_same_model(tmp_path: Path, dlcheck_bin: str,
                                                     variant: str, pitfall: str) -> None:
    result = audit(tmp_path, "layernorm_mlp", variant, "parameters", dlcheck_bin)
    assert result.exit_code == 1, result.text
    assert result.ids == {pitfall}, result.text


def test_a_parameter_given_gradients_that_never_changes_fails(tmp_path: Path,
                                                              dlcheck_bin: str) -> None:
    # A step that restores the LayerNorm gain after optimizer.step(): gradients, lr > 0,
    # and no change: the one case every_parameter_trains exists for.
    module = model_module("layernorm_mlp", "correct")
    step = module.train_step

    def undone(model, optimizer, micro_batches):
        keep = model[1].weight.detach().clone()
        loss = step(model, optimizer, micro_batches)
        with torch.no_grad():
            model[1].weight.copy_(keep)
        return loss

    module.train_step = undone
    result = run_audit(module, tmp_path / "undone", families=["parameters"], binary=dlcheck_bin)
    assert result.exit_code == 1, result.text
    outcome = check_of(result, "every_parameter_trains")
    assert outcome.verdict == "fail" and "1.weight" in outcome.evidence, outcome.evidence


# ---- the determinism family: 1 against 2 threads -------------------------------------------

def test_thread_counts_compared_within_their_own_rounding(tmp_path: Path,
                                                          dlcheck_bin: str) -> None:
    result = audit(tmp_path, "attention_tokens", "correct", "determinism", dlcheck_bin)
    assert result.exit_code == 0, result.text
    outcome = check_of(result, "thread_count_free")
    assert outcome.verdict == "pass"
    assert "distances from first_float64 and two_threads_float64 added" in outcome.evidence, \
        outcome.evidence


def test_noise_keyed_by_thread_count_is_caught(tmp_path: Path, dlcheck_bin: str) -> None:
    # augmentation noise from a stream seeded by the thread count: each run repeats itself,
    # 1 and 2 threads differ by far more than their rounding
    module = model_module("layernorm_mlp", "correct")
    clean = module.batches

    def keyed(seed, batch_size):
        g = torch.Generator().manual_seed(torch.get_num_threads())
        for x, y in clean(seed, batch_size):
            yield x + 1e-3 * torch.randn(x.shape, generator=g), y

    module.batches = keyed
    result = run_audit(module, tmp_path / "keyed", families=["determinism"], binary=dlcheck_bin)
    assert result.exit_code == 1, result.text
    assert result.ids == {"N3"}, result.text
    assert check_of(result, "thread_count_free").verdict == "fail"


# ---- the pieces ----------------------------------------------------------------------------

def test_dropout_off_neutralises_every_path_and_restores_them() -> None:
    from torch.nn.functional import dropout as imported  # a team module's own binding

    team = ModuleType("team_code")
    team.dropout = imported
    attention = torch.nn.MultiheadAttention(8, 2, dropout=0.5)
    gru = torch.nn.GRU(8, 8, num_layers=2, dropout=0.5)
    model = torch.nn.ModuleDict({"attention": attention, "gru": gru})
    x = torch.randn(5, 3, 8)
    off = DropoutOff(team)
    with off.around(model):
        assert torch.equal(F.dropout(x, 0.5, True), x)
        assert torch.equal(torch.nn.Dropout(0.9)(x), x)
        assert torch.equal(team.dropout(x, 0.5, True), x)
        y1, _ = attention(x, x, x)
        y2, _ = attention(x, x, x)
        assert torch.equal(y1, y2)                      # no attention dropout drawn
        assert torch.equal(gru(x)[0], gru(x)[0])        # nor the GRU's between its layers
        assert F.dropout(x, 0.5, False) is not None     # eval-mode calls go through untouched
    assert off.calls == 6, off.calls                    # 5 functional calls, 1 recurrent layer
    assert F.dropout is imported and team.dropout is imported and gru.dropout == 0.5
    assert not torch.equal(F.dropout(x, 0.5, True), x)
    assert "6 dropout calls" in off.describe()
    assert DropoutOff().describe() == "No dropout ran in these runs."


def test_dropout_off_keeps_autograd_and_inplace_semantics() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    with DropoutOff().around(torch.nn.Linear(1, 1)):
        y = F.dropout(x * 2, 0.5, True)
        y.add_(1.0)  # a real dropout returns a new tensor: in-place use must not reach x * 2
        y.sum().backward()
        z = torch.randn(4, 3)
        assert F.dropout(z, 0.5, True, inplace=True) is z
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


def test_float64_shadow_is_recorded_and_falls_back_when_it_cannot(tmp_path: Path) -> None:
    ad = load_adapter(MODELS / "layernorm_mlp.py")
    ctx = Context(ad, str(tmp_path))
    ref = ctx.recorded("audit_x", "big_batch")
    ref.train(3)
    shadow = float64_shadow(ctx, "audit_x", ref, 3)
    assert shadow.run == "big_batch_float64" and Path(shadow.path).is_file()
    assert band_rule(shadow, shadow, "x") == {"noise": "big_batch_float64",
                                              "noise_b": "big_batch_float64"}
    assert "float64 shadow, runs big_batch_float64 and" in band_source(shadow, shadow, "x")
    trace = read_trace(shadow.path)
    assert trace.run == "big_batch_float64" and len(trace.series["loss"]) == 3

    def float32_only(model, optimizer, micro_batches):
        optimizer.zero_grad()
        for x, y in micro_batches:
            w = torch.ones(2, dtype=torch.float32)  # a constant the team fixed to float32
            F.cross_entropy(model(x), y, weight=w).backward()
        optimizer.step()
        return 0.0

    ad.functions["train_step"] = float32_only
    none = float64_shadow(ctx, "audit_x", ref, 3)
    assert none.run is None and "cannot run in float64" in none.why
    assert band_rule(shadow, none, "close(1e-4, 1e-6)") == {"tolerance": "close(1e-4, 1e-6)"}
    assert band_source(shadow, none, "close(1e-4, 1e-6)").startswith("within close(1e-4, 1e-6) (")


def test_cast_floats_reaches_nested_batches() -> None:
    batch = {"x": torch.ones(2), "ids": torch.ones(2, dtype=torch.long),
             "pair": (torch.zeros(1), [torch.zeros(1)]), "name": "b"}
    out = cast_floats(batch, torch.float64)
    assert out["x"].dtype == torch.float64 and out["ids"].dtype == torch.long
    assert out["pair"][0].dtype == torch.float64 and out["pair"][1][0].dtype == torch.float64
    assert out["name"] == "b"


def test_fused_attention_dropout_is_zeroed() -> None:
    # torch 2's F.scaled_dot_product_attention takes dropout_p itself (torch 1.13 has none):
    # the stand-in zeroes it, positional or by keyword, and counts the calls that would drop
    from dlcheck.audit.randomness import _attention_neutral

    seen: list = []
    counter = [0]
    off = _attention_neutral(lambda q, k, v, *a, **kw: seen.append((a, kw)), counter)
    off(1, 2, 3, None, 0.1)
    off(1, 2, 3, dropout_p=0.2, is_causal=True)
    off(1, 2, 3, dropout_p=0.0)
    assert seen == [((None, 0.0), {}), ((), {"dropout_p": 0.0, "is_causal": True}),
                    ((), {"dropout_p": 0.0})]
    assert counter == [2]
