"""Non-finite values: a training run recorded with layer statistics at
every step (an inf/NaN loss included), where the harness's nonfinite check
finds the first inf/NaN by step and layer, output or gradient (N1). When
the loss went non-finite, the run is replayed from the same seed under
origin.py's tracer, which names the call that made the first inf/NaN (the
team's line, the module, the step) and whether it is a function outside
its domain or an overflow: the check's advice follows from it."""
from __future__ import annotations

from ..context import Context
from ..declaration import FamilyDeclaration
from ..scenario import Check, Family
from .origin import trace_origin

DESCRIPTION = "The team's training stays finite; the first inf/NaN is located by step and layer."


def run(ctx: Context) -> Family:
    fam = Family("nonfinite", DESCRIPTION)
    r = ctx.recorded(fam.scenario, "trained", stats_every=1)
    r.train(ctx.settings.steps)  # stops after the first non-finite loss, which is recorded
    if r.nonfinite is not None:
        replay = ctx.run()
        origin = trace_origin(replay, r.steps_done)
        replay.close()
        if origin is not None:
            r.rec.note("nonfinite_origin", origin.describe())
            r.rec.metric("nonfinite_origin_step", origin.step)
            r.rec.metric("nonfinite_origin_domain", int(origin.domain))
    fam.runs["trained"] = r.save()
    r.close()
    fam.checks.append(Check(
        "training_stays_finite", "nonfinite", "trained", catalogue=("N1",),
        about="no inf/NaN in the recorded loss, layer outputs, gradients or parameters"))
    return fam


FAMILY = FamilyDeclaration("nonfinite", run, ("N1",), description=DESCRIPTION)
