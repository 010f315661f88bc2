"""CpuGradScaler: torch.cuda.amp.GradScaler's contract on CPU tensors (the
CUDA one disables itself without a GPU), so that a training step written
for GradScaler runs, with its scaling, unscaling, skipped steps and scale
updates, under CPU bfloat16 autocast in an audit.

    def make_scaler():            # in the adapter
        return CpuGradScaler(init_scale=2.0 ** 12)

still_scaled() tells whether the gradients are still multiplied by the
scale; the audit's mixed-precision family asks it when the team's code
clips (A2), as it reads GradScaler's per-optimizer stage otherwise.
"""
from __future__ import annotations

import enum
from typing import Any, Iterable, Optional, Union

import torch


class Stage(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class CpuGradScaler:
    """Dynamic loss scaling as torch.cuda.amp.GradScaler does it (same
    defaults, same state_dict keys), on any device."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not growth_factor > 1.0 or not 0.0 < backoff_factor < 1.0 or growth_interval < 1:
            raise ValueError("growth_factor must be > 1, backoff_factor in (0, 1), "
                             "growth_interval >= 1")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._growth_tracker = int(growth_interval), 0
        self._per_optimizer_states: dict[int, dict[str, Any]] = {}
        self._scaled = False  # scale() called since the last update()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def _state(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return self._per_optimizer_states.setdefault(
            id(optimizer), {"stage": Stage.READY, "found_inf": False})

    def scale(self, outputs: Union[torch.Tensor, Iterable]) -> Any:
        if not self._enabled:
            return outputs
        self._scaled = True
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale
        return type(outputs)(self.scale(o) for o in outputs)

    def still_scaled(self) -> bool:
        """Whether gradients produced since scale() have not been unscaled."""
        return self._enabled and self._scaled and not any(
            s["stage"] is not Stage.READY for s in self._per_optimizer_states.values())

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] is Stage.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is Stage.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv, found = 1.0 / self._scale, False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if not bool(torch.isfinite(p.grad).all()):
                        found = True
                    p.grad.mul_(inv)
        state.update(stage=Stage.UNSCALED, found_inf=found)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Optional[Any]:
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        state = self._state(optimizer)
        if state["stage"] is Stage.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is Stage.READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = Stage.STEPPED
        return result

    def update(self, new_scale: Optional[float] = None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        elif any(s["found_inf"] for s in self._per_optimizer_states.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._per_optimizer_states = {}
        self._scaled = False

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state["scale"])
        self._growth_factor = float(state["growth_factor"])
        self._backoff_factor = float(state["backoff_factor"])
        self._growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
