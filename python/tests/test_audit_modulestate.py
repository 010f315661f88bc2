"""F4's search (audit/families/modulestate.py): plain tensors reachable from a
model's modules, which of them training changed, and which of those a
reload from the state dict loses (two reloaded models, one given the
changed tensors, answer differently, bit for bit: no tolerance, both run
the same float32 code on the same input). Constants and caches that are
never read back must not fail. The pair f4_weight_average_as_plain_tensor
(.py, _fixed.py) shows it end to end."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from dlcheck.audit import run_audit
from dlcheck.audit.families.modulestate import Snapshot, lost_at_reload, plain_tensors

from test_audit_adapter import GOOD, adapter

X = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))


class Masked(nn.Module):
    """A constant mask and scale (built from the config), a cache of the last
    output (never read back), a plain view of the weight."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.mask = torch.tril(torch.ones(4, 4))
        self.consts = {"scale": [torch.tensor(0.5)]}
        self.weight_t = self.lin.weight.t()
        self.last = None

    def forward(self, x):
        y = self.lin(x) @ self.mask * self.consts["scale"][0]
        self.last = y.detach()
        return y


class Counted(nn.Module):
    """A plain step counter (in place) and a running mean set at the first
    training forward, both read back by forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.count = torch.zeros(())
        self.stats = {"mean": None}

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            with torch.no_grad():
                self.count += 1
                self.stats["mean"] = y.mean(0) if self.stats["mean"] is None else \
                    0.5 * self.stats["mean"] + 0.5 * y.mean(0)
        return (y - (self.stats["mean"] if self.stats["mean"] is not None else 0)) * self.count


def trained(build, steps: int = 3):
    torch.manual_seed(0)
    model = build()
    before = Snapshot.of(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(X).square().mean().backward()
        opt.step()
    return model, before


def fresh(build):
    def make():
        torch.manual_seed(0)
        return build()
    return make


def test_plain_tensors_are_named_and_registered_ones_views_and_graphs_left_out() -> None:
    model = nn.Sequential(Masked(), nn.BatchNorm1d(4))
    model[0].derived = model[0].lin.weight * 2  # computed by autograd from a parameter
    names = set(plain_tensors(model))
    assert names == {"0.mask", "0.consts['scale'][0]"}, names
    wn = nn.utils.weight_norm(nn.Linear(4, 4))  # its weight is a plain, recomputed tensor
    assert not plain_tensors(wn)


def test_constants_and_a_cache_never_read_back_are_not_lost() -> None:
    model, before = trained(Masked)
    found = lost_at_reload(model, fresh(Masked), before, X)
    assert found.why_untested == "" and not found.lost
    assert [c.name for c in found.changed] == ["last"]
    assert found.constant == ["mask", "consts['scale'][0]"]
    note = found.note()
    assert "no tensor that training changes is missing" in note and "last" in note, note


def test_a_counter_in_place_and_a_mean_set_in_training_are_lost() -> None:
    model, before = trained(lambda: nn.Sequential(nn.Linear(4, 4), Counted()))
    found = lost_at_reload(model, fresh(lambda: nn.Sequential(nn.Linear(4, 4), Counted())),
                           before, X)
    assert found.why_untested == ""
    how = {c.name: c.how for c in found.lost}
    assert how == {"1.count": "in place, 1 of 1 elements changed",
                   "1.stats['mean']": "set during training"}, how
    assert "1.count [] float32" in found.note()


def test_the_same_state_as_a_buffer_is_not_plain() -> None:
    class Buffered(Counted):
        def __init__(self):
            super().__init__()
            del self.count
            self.register_buffer("count", torch.zeros(()))

    model, before = trained(Buffered)
    assert "count" not in plain_tensors(model)
    found = lost_at_reload(model, fresh(Buffered), before, X)
    assert [c.name for c in found.lost] == ["stats['mean']"]


def test_a_reload_that_fails_is_not_tested_with_the_reason() -> None:
    model, before = trained(Counted)
    found = lost_at_reload(model, lambda: nn.Linear(4, 4), before, X)
    assert not found.lost and "load_state_dict" not in found.why_untested
    assert found.why_untested.startswith("comparing a model reloaded from the state dict "
                                         "failed: RuntimeError"), found.why_untested


PLAIN_COUNTER = GOOD.replace("""def make_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))""",
                             """class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                       torch.nn.Linear(8, 3))
        self.seen = torch.zeros(())

    def forward(self, x):
        x = x["x"] if isinstance(x, dict) else x
        if self.training:
            self.seen += 1
        return self.net(x) / (1 + self.seen)

def make_model():
    return Scaled()""")


def test_the_parameters_family_names_the_lost_tensor_or_says_why_not_tested(
        tmp_path: Path) -> None:
    bad = run_audit(adapter(tmp_path, PLAIN_COUNTER), tmp_path / "bad",
                    families=["parameters"])
    assert bad.ids == {"F4"}, bad.text
    assert "seen [] float32 (in place" in " ".join(bad.text.split()), bad.text
    # a batch whose model input the audit cannot find: changed, but not measured
    dict_batches = PLAIN_COUNTER.replace("yield torch.randn(batch_size, 4, generator=g),",
                                         "yield {'x': torch.randn(batch_size, 4, generator=g)},")
    dict_batches = dict_batches.replace("for x, y in micro_batches:",
                                        "for b, y in micro_batches:\n        x = b")
    odd = run_audit(adapter(tmp_path, dict_batches, "odd.py"), tmp_path / "odd",
                    families=["parameters"])
    assert odd.exit_code == 0, odd.text + odd.message
    assert "module_state_registered" in odd.text and "NOT TESTED" in odd.text, odd.text
    assert "seen [] float32" in " ".join(odd.text.split()), odd.text
