"""amp.watch_scaler_order: GradScaler's calls followed in order (A6), on a
CpuGradScaler and a plain SGD step; the example pair
a6_optimizer_step_bypasses_scaler(.py, _fixed.py) runs the whole audit."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import torch

from dlcheck.audit import CpuGradScaler
from dlcheck.audit.families.amp import ScalerOrder, watch_scaler_order


def follow(step: Callable, scaler=None) -> ScalerOrder:
    model = torch.nn.Linear(3, 1)
    run = SimpleNamespace(scaler=scaler or CpuGradScaler(init_scale=8.0),
                          optimizer=torch.optim.SGD(model.parameters(), lr=0.1), steps_done=2)
    order = ScalerOrder()
    with watch_scaler_order(run, order):
        step(model, run.optimizer, run.scaler)
    assert not {"scale", "unscale_", "step", "update"} & set(vars(run.scaler))
    return order


def loss(model: torch.nn.Module) -> torch.Tensor:
    return model(torch.ones(2, 3)).sum()


def test_the_documented_order_is_silent() -> None:
    def step(model, opt, scaler):
        scaler.scale(loss(model)).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
    assert follow(step).violations == 0


def test_optimizer_step_on_scaled_gradients() -> None:
    def step(model, opt, scaler):
        scaler.scale(loss(model)).backward()
        opt.step()
    order = follow(step)
    assert order.violations == 1
    assert order.first.startswith("at step 2: optimizer.step() on gradients still multiplied")
    assert "test_audit_scaler_order.py" in order.first


def test_update_before_step_unscales_what_no_scale_made() -> None:
    def step(model, opt, scaler):
        scaler.scale(loss(model)).backward()
        scaler.update()
        scaler.step(opt)
    order = follow(step)
    assert order.violations == 1 and "no scaler.scale() made" in order.first


def test_a_loss_never_scaled_is_seen_at_unscale() -> None:
    def step(model, opt, scaler):
        loss(model).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    assert follow(step).violations == 1


def test_a_disabled_scaler_is_not_followed() -> None:
    def step(model, opt, scaler):
        loss(model).backward()
        opt.step()
    assert follow(step, CpuGradScaler(enabled=False)).violations == 0
