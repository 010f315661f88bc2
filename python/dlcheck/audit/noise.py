"""Tolerances from the run's own noise, not fixed numbers.

Two float32 runs that split the same arithmetic differently (K
micro-batches against one batch, two ranks against one process) differ by
rounding, and how much depends on the model and the optimizer: an adaptive
one (Adam, RMSprop) turns the rounding noise of a near-zero gradient into
a full step. So such a comparison is judged against the reference run's
float64 shadow: the same initial weights, batches and steps in double
(autocast leaves float64 alone), recorded as a run of its own. Its
distance from the float32 run is that run's own rounding error, tensor by
tensor; two float32 runs each that far from the answer lie within twice it
of each other. The harness's equivalence check, given the shadow as its
`noise` run, allows each tensor WIDEN times its own distance
(scenarios/README.md), as the gate of calibrated goldens widens their
repeats' band. Under bfloat16 autocast the shadow measures the bfloat16
error too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .adapter import AdapterError
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

    def rule(self, fallback: str) -> dict:
        """The comparison's keyword arguments for Check: noise=the shadow,
        or the fallback tolerance when there is none."""
        return {"noise": self.run} if self.run else {"tolerance": fallback}

    def describe(self, what: str, fallback: str) -> str:
        """Where the comparison's tolerance comes from, for its `about`."""
        if self.run:
            return (f"within {WIDEN} times {what}'s own rounding error, tensor by tensor (its "
                    f"distance from its float64 shadow, run {self.run})")
        return f"within {fallback} ({self.why})"


def float64_shadow(ctx: Context, scenario: str, reference: Run, steps: int,
                   dropout_off: Optional[DropoutOff] = None) -> Shadow:
    """Trains and records `reference`'s float64 shadow for `steps` steps as
    run `<reference run>_float64`; Shadow(None, None, why) where the team's
    step cannot run in float64 (a constant it built in float32, say)."""
    name = f"{reference.rec.run if reference.rec else 'reference'}_float64"
    path = ctx.trace_path(scenario, name)
    try:
        shadow = Run(ctx.adapter, seed=reference.seed, batch_size=reference.batch_size,
                     float64=True, dropout_off=dropout_off)
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
