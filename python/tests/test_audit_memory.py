"""The memory family (R1, R2, M2 kept): the growth rule on synthetic
series, the census of live graphs and tensors, and the family on teams'
steps: retention caught, a correct step silent whatever it allocates
once, a loop cut short by a scheduler sized to AUDIT["steps"] judged on
what it measured.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import gc

import random
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from dlcheck.audit import run_audit
from dlcheck.audit.families.memory import (WARMUP, Census, Series, census, holdings, kept_in,
                                  steady_growth, tensor_bytes)

from test_audit_adapter import GOOD, adapter

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "audit"


# ---- the growth rule -----------------------------------------------------------------------

def test_flat_series_does_not_grow() -> None:
    assert steady_growth([100] * 11, WARMUP, 0) == 0


def test_warm_up_allocation_does_not_grow() -> None:
    # gradients at step 1, optimizer state at step 2, then flat
    assert steady_growth([0, 500, 900] + [900] * 8, WARMUP, 0) == 0


def test_one_off_jump_after_warm_up_does_not_grow() -> None:
    # a cache filled once, at step 5
    assert steady_growth([0, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9], WARMUP, 0) == 0


def test_linear_growth_is_its_slope() -> None:
    assert steady_growth([0, 40] + [40 + 7 * i for i in range(1, 10)], WARMUP, 0) == 7


def test_noisy_flat_series_does_not_grow() -> None:
    rng = random.Random(0)
    for _ in range(200):
        series = [1000 + rng.randint(-64, 64) for _ in range(11)]
        assert steady_growth(series, WARMUP, 0) == 0


def test_noisy_growth_is_its_smallest_step() -> None:
    rng = random.Random(1)
    series = [0.0]
    for _ in range(10):
        series.append(series[-1] + 100 + rng.uniform(-30, 30))
    diffs = [b - a for a, b in zip(series[WARMUP:], series[WARMUP + 1:])]
    assert steady_growth(series, WARMUP, 0) == pytest.approx(min(diffs))


def test_growth_at_or_below_the_floor_is_not_growth() -> None:
    steps = [4 * i for i in range(11)]
    assert steady_growth(steps, WARMUP, 4) == 0
    assert steady_growth(steps, WARMUP, 3) == 4


def test_too_short_a_series_is_not_judged() -> None:
    assert steady_growth([0, 1, 2, 3], WARMUP, 0) == 0
    assert steady_growth([0, 1, 2, 3, 4], WARMUP, 0) == 1


# ---- the census ----------------------------------------------------------------------------

def test_census_counts_a_kept_graph_in_nodes_and_a_detached_tensor_in_bytes() -> None:
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    before = census()
    loss = (x @ w).relu().sum()       # SumBackward0, ReluBackward0, MmBackward0, AccumulateGrad
    with_graph = census()
    loss.backward()                   # backward frees the saved tensors, not the nodes
    after_backward = census()
    kept = (x @ w).detach().clone()   # 8 x 16 float32, no graph
    detached = census()
    assert with_graph.graph_nodes - before.graph_nodes == 4
    assert after_backward.graph_nodes - before.graph_nodes == 4
    assert with_graph.graph_bytes - before.graph_bytes == 4
    assert detached.plain_bytes - after_backward.plain_bytes == kept.numel() * 4
    assert detached.graph_nodes == after_backward.graph_nodes
    del loss, kept
    assert census().graph_nodes == before.graph_nodes


def test_census_sees_only_what_is_reachable() -> None:
    before = census()

    class Cycle:
        pass
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    a.t = torch.zeros(1000)
    del a, b                          # unreachable: gc.collect() in the census frees it
    assert census().plain_bytes == before.plain_bytes


def test_census_reads_no_attribute_of_other_objects() -> None:
    # torch.distributed.reduce_op warns on any attribute read, __class__ too
    import torch.distributed  # noqa: F401
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        census()


def test_holdings_name_the_team_names_and_model_attributes_holding_graphs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = torch.randn(3, requires_grad=True)
    # one file imported twice (as the adapter, and by name from its fixed twin)
    first, second = ModuleType("team_first"), ModuleType("team_second")
    first.__file__ = second.__file__ = str(tmp_path / "holding_train.py")
    first.LOSSES, second.LOSSES = [w * 2, w * 3], []
    monkeypatch.setitem(sys.modules, "team_first", first)
    monkeypatch.setitem(sys.modules, "team_second", second)
    model = torch.nn.Sequential(torch.nn.Linear(3, 1))
    model[0].cache = {"last": w * 4}
    before = holdings(model)  # earlier tests' adapters may hold graphs too: only these count
    mine = ("LOSSES in holding_train.py", "model.0.cache")
    assert {k: len(v) for k, v in before.items() if k in mine} == {mine[0]: 2, mine[1]: 1}
    first.LOSSES.append(w * 5)
    assert kept_in(before, holdings(model)) == ["LOSSES in holding_train.py (1 new, 3 held)"]


def test_notes_give_the_series_and_the_growth() -> None:
    growing = Series("training step", [Census(i, 0, 100 * i) for i in range(11)], 24.0)
    assert "0, 100, 200" in growing.bytes_note()
    assert "grow by at least 100 bytes every training step" in growing.bytes_note()
    assert "grow by at least 1 nodes every training step" in growing.graph_note()
    flat = Series("evaluate() call", [Census(3, 0, 50)] * 6, 24.0)
    assert "no steady growth" in flat.bytes_note() and "no steady growth" in flat.graph_note()


def test_batch_bytes_count_nested_tensors() -> None:
    batch = {"x": torch.zeros(4, 3), "y": [torch.zeros(4, dtype=torch.int64), "label"]}
    assert tensor_bytes(batch) == 4 * 3 * 4 + 4 * 8


# ---- the family ----------------------------------------------------------------------------

def memory(tmp_path: Path, text: str) -> dict:
    result = run_audit(adapter(tmp_path, text), tmp_path / "out", families=["memory"])
    assert result.message == "", result.message
    return {o.name: o for o in result.outcomes}


def failed(outcomes: dict) -> dict:
    return {name: o.catalogue for name, o in outcomes.items() if o.verdict == "fail"}


def keeping(kept: str) -> str:
    """GOOD whose step keeps `kept` after each micro-batch's backward in a module-level list."""
    return GOOD.replace("        loss.backward()\n",
                        f"        loss.backward()\n        KEPT.append({kept})\n") + "\nKEPT = []\n"


@pytest.mark.parametrize("kept,expected", [
    ("loss", {"training_keeps_no_graph": ("R1",)}),
    ("loss.detach()", {}),          # a scalar a step: bookkeeping, below one sample's bytes
    ("loss.item()", {}),
    # outputs collected over an epoch for its metric: correct, noted and not checked
    ("model(x).detach()", {}),
], ids=["graph", "detached_scalar", "number", "detached_outputs"])
def test_what_a_step_keeps(tmp_path: Path, kept: str, expected: dict) -> None:
    outcomes = memory(tmp_path, keeping(kept))
    assert failed(outcomes) == expected, {n: o.evidence for n, o in outcomes.items()}
    if expected:
        assert "during the training steps by: KEPT in pipeline.py (10 new, 10 held)" in \
            outcomes["training_keeps_no_graph"].evidence
    assert outcomes["evaluation_keeps_nothing"].verdict == "not_tested"  # GOOD has no evaluate


def smoothing(loss: str) -> str:
    """GOOD whose step keeps a running average of `loss` for a progress bar."""
    return GOOD.replace("    return loss\n",
                        f"    EMA['loss'] = 0.9 * EMA['loss'] + 0.1 * {loss}\n"
                        f"    return loss.item()\n") + "\nEMA = {'loss': 0.0}\n"


def test_running_average_of_losses_kept_as_a_tensor_chains_graphs(tmp_path: Path) -> None:
    # each step's average holds the last one's graph: a chain as long as the run
    outcomes = memory(tmp_path, smoothing("loss"))
    assert failed(outcomes) == {"training_keeps_no_graph": ("R1",)}
    assert "during the training steps by: EMA in pipeline.py (1 new, 1 held)." in \
        outcomes["training_keeps_no_graph"].evidence


def test_running_average_of_numbers_is_silent(tmp_path: Path) -> None:
    outcomes = memory(tmp_path, smoothing("loss.item()"))
    assert failed(outcomes) == {}
    assert outcomes["training_keeps_no_graph"].verdict == "pass"


OPAQUE_BATCHES = """

class Batch:
    # the team's own batch type: the audit finds no tensor in it
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

def batches(seed, batch_size):
    g = torch.Generator().manual_seed(seed)
    while True:
        yield Batch(torch.randn(batch_size, 4, generator=g),
                    torch.randint(0, 3, (batch_size,), generator=g))

def split_batch(batch, k):
    return [Batch(x, y) for x, y in zip(batch.x.chunk(k), batch.y.chunk(k))]

def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for b in micro_batches:
        loss = F.cross_entropy(model(b.x), b.y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss

def evaluate(model):
    with torch.no_grad():
        return float(model(torch.zeros(2, 4)).sum())
"""


def test_batches_of_unknown_size_leave_the_tensor_check_untested(tmp_path: Path) -> None:
    text = GOOD.replace("def batches", "def _unused_batches").replace(
        "def train_step", "def _unused_train_step") + OPAQUE_BATCHES
    outcomes = memory(tmp_path, text)
    assert outcomes["training_keeps_no_graph"].verdict == "pass"
    assert outcomes["evaluation_keeps_no_graph"].verdict == "pass"
    assert outcomes["evaluation_keeps_no_tensors"].verdict == "not_tested"
    assert "one sample's bytes" in outcomes["evaluation_keeps_no_tensors"].evidence


def test_scheduler_sized_to_the_audit_steps_ends_the_loop_there(tmp_path: Path) -> None:
    # OneCycleLR raises past total_steps: the family's steps beyond AUDIT["steps"] are not the
    # adapter's fault, and the steps it measured are judged
    text = GOOD + """
AUDIT = {"steps": 6}

def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=7)
"""
    outcomes = memory(tmp_path, text)
    assert outcomes["training_keeps_no_graph"].verdict == "pass"
    assert "ended early" in outcomes["training_keeps_no_graph"].evidence


def test_a_step_that_raises_within_the_audit_steps_is_the_adapters_error(tmp_path: Path) -> None:
    text = GOOD + """
def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=2)
"""
    result = run_audit(adapter(tmp_path, text), tmp_path / "out", families=["memory"])
    assert result.exit_code == 2 and "make_scheduler()" in result.message, result.message


# ---- the example pairs, this family alone (test_audit_examples.py audits them whole) --------

@pytest.mark.parametrize("stem,check,ids,held_by", [
    ("r1_loss_kept_with_graph", "training_keeps_no_graph", ("R1",),
     "by: LOSSES in r1_loss_kept_with_graph.py (10 new, "),
    ("r1_forward_appends_to_list", "training_keeps_no_graph", ("R1",),
     "by: model.features (10 new, 10 held)."),
    ("r2_eval_keeps_every_prediction", "evaluation_keeps_no_tensors", ("R2",), ""),
    ("m2_eval_keeps_loss_with_graph", "evaluation_keeps_no_graph", ("M2",),
     "during the evaluate() calls by: HISTORY in m2_eval_keeps_loss_with_graph.py (5 new, "),
])
def test_pairs(stem: str, check: str, ids: tuple, held_by: str, tmp_path: Path) -> None:
    broken = run_audit(EXAMPLES / f"{stem}.py", tmp_path / "broken", families=["memory"])
    outcomes = {o.name: o for o in broken.outcomes}
    assert failed(outcomes) == {check: ids}, broken.text
    assert held_by in outcomes[check].evidence
    fixed = run_audit(EXAMPLES / f"{stem}_fixed.py", tmp_path / "fixed", families=["memory"])
    assert {o.verdict for o in fixed.outcomes} == {"pass"}, fixed.text


def test_a_census_counts_what_is_made_inside_a_big_process() -> None:
    # A long pytest run (or a team's process) holds millions of objects: the
    # family's census must cost what its runs make, and still see what they keep.
    from dlcheck.audit.families.memory import _census_of_new_objects
    heap = [[i] for i in range(300_000)]  # lists: gc tracks them (dicts of ints it may not)
    kept = []
    with _census_of_new_objects():
        walked = len(gc.get_objects())  # what a census walks: not the heap made before
        first = census()
        kept.extend(torch.randn(8, requires_grad=True) * 2 for _ in range(3))
        second = census()
    assert walked < len(heap)
    assert second.graph_nodes - first.graph_nodes >= 3  # the three graphs kept are seen
    assert len(gc.get_objects()) > len(heap)  # unfrozen after: gc walks everything again
