"""Non-finite values: a training run recorded with layer statistics at
every step (an inf/NaN loss included), where the harness's nonfinite check
finds the first inf/NaN by step and layer, output or gradient (N1)."""
from __future__ import annotations

from .context import Context
from .scenario import Check, Family

DESCRIPTION = "The team's training stays finite; the first inf/NaN is located by step and layer."


def run(ctx: Context) -> Family:
    fam = Family("nonfinite", DESCRIPTION)
    r = ctx.recorded(fam.scenario, "trained", stats_every=1)
    r.train(ctx.settings.steps)  # stops after the first non-finite loss, which is recorded
    fam.runs["trained"] = r.save()
    r.close()
    fam.checks.append(Check(
        "training_stays_finite", "nonfinite", "trained", catalogue=("N1",),
        about="no inf/NaN in the recorded loss, layer outputs, gradients or parameters"))
    return fam
