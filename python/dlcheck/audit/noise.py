"""Tolerances from the runs' own noise, not fixed numbers.

Two float32 runs that split the same arithmetic differently (K
micro-batches against one batch, two ranks against one process) differ by
rounding, and how much depends on the model, the optimizer and the split:
an adaptive optimizer (Adam, RMSprop) turns the rounding noise of a
near-zero gradient into a full step, and K micro-batches whose partial
sums cancel round far worse than one batch (a global bias: 1 ulp from the
exact answer in one batch, 64 ulps in four). So each side of such a
comparison gets a float64 shadow: the same initial weights, batches and
steps in double (autocast leaves float64 alone), recorded as a run of its
own. A run's distance from its shadow is its own rounding error, tensor by
tensor. When the code is right the two shadows agree (float64 rounding
aside), and the triangle inequality bounds the two float32 runs' distance
by the sum of their own errors; the harness's equivalence check, given the
shadows as its `noise` and `noise_b` runs, allows each tensor WIDEN times
that sum (scenarios/README.md), as the gate of calibrated goldens widens
their repeats' band. A step whose arithmetic differs between the two runs
(G2, G3, ...) makes the shadows differ too, by far more. Under bfloat16
autocast the shadows measure the bfloat16 error as well."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .adapter import Adapter, AdapterError
from .context import Context
from .loop import Run
from .randomness import DropoutOff

#: the band's multiple of the reference's own rounding error (the harness's default)
WIDEN = 4


@dataclass
class Shadow:
    """A reference run's float64 shadow: its run name in the family and
    trace path, or None and why it could not run."""
    run: Optional[str]
    path: Optional[str]
    why: str = ""


def record_shadow(adapter: Adapter, path: str, name: str, scenario: str, steps: int,
                  **run: Any) -> Shadow:
    """Trains a float64 Run of `adapter` (`run`: Run's keywords, as the
    float32 run had them) for `steps` steps and records it at `path` as run
    `name`; Shadow(None, None, why) where the team's step cannot run in
    float64 (a constant it built in float32, say)."""
    try:
        shadow = Run(adapter, float64=True, **run)
        shadow.record(path, name, scenario)
        try:
            finite = shadow.train(steps)
            shadow.save()
        finally:
            shadow.close()
    except AdapterError as e:
        return Shadow(None, None, f"the step cannot run in float64 to measure its own "
                                  f"rounding: {e}")
    if not finite:
        return Shadow(None, None, "its float64 shadow went non-finite")
    return Shadow(name, path)


def float64_shadow(ctx: Context, scenario: str, reference: Run, steps: int,
                   dropout_off: Optional[DropoutOff] = None) -> Shadow:
    """`reference`'s float64 shadow, recorded in the family's traces as run
    `<reference run>_float64` (record_shadow)."""
    name = f"{reference.rec.run if reference.rec else 'reference'}_float64"
    return record_shadow(ctx.adapter, ctx.trace_path(scenario, name), name, scenario, steps,
                         seed=reference.seed, batch_size=reference.batch_size,
                         accumulation=reference.accumulation, dropout_off=dropout_off)


def band_rule(a: Shadow, b: Shadow, fallback: str) -> dict:
    """Check keywords comparing runs a and b: their shadows as the noise
    runs, or the fallback tolerance when either has none."""
    if a.run and b.run:
        return {"noise": a.run, "noise_b": b.run}
    return {"tolerance": fallback}


def band_source(a: Shadow, b: Shadow, fallback: str) -> str:
    """Where the comparison's tolerance comes from, for its `about`."""
    if a.run and b.run:
        return (f"within {WIDEN} times the two runs' own rounding errors added, tensor by tensor "
                f"(each run's distance from its float64 shadow, runs {a.run} and {b.run})")
    return f"within {fallback} ({a.why or b.why})"
