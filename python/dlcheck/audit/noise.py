"""Tolerances from the run's own noise, not fixed numbers.

Two float32 runs that split the same arithmetic differently (K
micro-batches against one batch) differ by rounding, and how much depends
on the model and the optimizer: an adaptive one (Adam, RMSprop) turns the
rounding noise of a near-zero gradient into a full step. So a comparison
of such runs is given a band measured on the reference run itself: its
float64 shadow (the same initial weights, batches and steps in double,
where autocast leaves float64 alone) holds the arithmetic's exact-enough
answer, and the float32 run's distance from it is the float32 run's own
rounding error. Two float32 runs each that far from the answer lie within
twice it of each other; the check allows WIDEN times it, as the gate of
calibrated goldens widens their repeats' band (docs/calibrated-goldens.md).
Under bfloat16 autocast the shadow measures the bfloat16 error too."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from .adapter import Adapter, AdapterError
from .loop import Run
from .randomness import DropoutOff

#: the band's multiple of the reference's own rounding error
WIDEN = 4


@dataclass
class Band:
    """A tolerance measured on a run: `atol` (None where it could not be
    measured) and `source`, one clause saying where it came from."""
    atol: Optional[float]
    source: str

    def tolerance(self, fallback: str) -> str:
        """The harness's rule: close(0, atol), or fallback when not measured."""
        return fallback if self.atol is None else f"close(0, {self.atol!r})"


def float32_ulp(magnitude: float) -> float:
    """One float32 ulp at `magnitude`: the least error a float32 value carries."""
    m = torch.tensor(abs(magnitude), dtype=torch.float32)
    return float(torch.nextafter(m, torch.tensor(math.inf)) - m)


def float64_band(adapter: Adapter, reference: Run, steps: int, what: str,
                 dropout_off: Optional[DropoutOff] = None) -> Band:
    """WIDEN times the largest difference between `reference`'s (called
    `what` in the text) trained
    parameters (after `steps` steps) and those of its float64 shadow; at
    least WIDEN float32 ulps of the largest parameter. Band(None, why)
    where the team's step cannot run in float64."""
    try:
        shadow = Run(adapter, seed=reference.seed, batch_size=reference.batch_size,
                     float64=True, dropout_off=dropout_off)
        try:
            finite = shadow.train(steps)
        finally:
            shadow.close()
    except AdapterError as e:
        return Band(None, f"its float64 shadow could not run: {e}")
    if not finite:
        return Band(None, "its float64 shadow went non-finite")
    exact = dict(shadow.named)
    worst, where, magnitude = 0.0, "", 0.0
    for name, p in reference.named:
        q = exact.get(name)
        if q is None or q.shape != p.shape or not p.numel():
            continue
        d = float((p.detach().double() - q.detach().double()).abs().max())
        magnitude = max(magnitude, float(p.detach().abs().max()))
        if d > worst or not where:
            worst, where = d, name
    if not where:
        return Band(None, "its float64 shadow holds none of its parameters")
    atol = WIDEN * max(worst, float32_ulp(magnitude))
    return Band(atol, f"{WIDEN} times {what}'s own rounding error (its trained parameters "
                      f"differ from its float64 shadow's by {worst:.3g} at most, in {where})")
