"""origin.py: the call that made the first inf/NaN, found by replaying the
training under a torch function mode and hooks on the backward graph, and
whether it left a function's domain or overflowed (the nonfinite check's
advice follows from it). The end-to-end pair (n1_log_of_zero.py and its
fixed twin) is held by test_audit_examples.py."""
from __future__ import annotations

import torch
import torch.nn as nn

from dlcheck.audit.families.origin import Tracer, base_name


class Net(nn.Module):
    def __init__(self, feature):
        super().__init__()
        self.feature = feature
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(self.feature(x))


def origin_of(model, x, step=7):
    tracer = Tracer(model, lambda: step)
    try:
        with tracer:
            model(x).sum().backward()
    finally:
        tracer.close()
    return tracer.origin


def test_base_names_of_calls_and_backward_nodes():
    assert base_name("__rtruediv__") == "rtruediv"
    assert base_name("log_") == "log"
    assert base_name("SqrtBackward0") == "sqrt"


def test_log_of_zero_is_a_domain_error_at_the_team_line():
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    o = origin_of(Net(torch.log), x)
    assert o is not None and o.domain and o.step == 7
    assert o.op == "torch log" and o.phase == "forward"
    assert o.module == "Net (the model)"
    assert "1 values <= 0 of 4, smallest 0" in o.detail
    assert "test_audit_origin.py" in o.where
    assert "outside its domain" in o.describe()


def test_division_by_zero_counts_the_zero_divisors():
    x = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    o = origin_of(Net(lambda v: torch.ones_like(v) / v), x)
    assert o.domain and "the divisor holds 2 zeros" in o.detail


def test_exp_overflow_is_not_a_domain_error():
    x = torch.tensor([[100.0, 1.0, 2.0, 3.0]])
    o = origin_of(Net(torch.exp), x)
    assert not o.domain and "largest magnitude 100" in o.detail
    assert "overflow" in o.describe()


def test_sqrt_at_zero_is_found_in_the_backward():
    # sqrt(0) = 0 is finite; its derivative 1 / (2 sqrt(0)) is not
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0]], requires_grad=True)
    o = origin_of(Net(torch.sqrt), x)
    assert o.phase == "backward" and o.op == "SqrtBackward0" and o.domain


def test_finite_training_has_no_origin_and_leaves_no_hooks():
    model = Net(torch.tanh)
    assert origin_of(model, torch.randn(3, 4)) is None
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not model.fc._forward_hooks


def test_a_call_outside_the_model_says_so():
    model = Net(torch.tanh)
    tracer = Tracer(model, lambda: 0)
    try:
        with tracer:
            torch.log(model(torch.randn(2, 4)) * 0).sum()
    finally:
        tracer.close()
    assert tracer.origin.phase.startswith("code outside the model") and not tracer.origin.module
