"""Non-finite values: a training run with layer statistics at every step,
the first inf/NaN located by step and layer (N1)."""
from __future__ import annotations

from .context import Context
from .scenario import Check, Family

DESCRIPTION = "The team's training stays finite; the first inf/NaN is located by step and layer."


def run(ctx: Context) -> Family:
    fam = Family("nonfinite", DESCRIPTION)
    s = ctx.settings
    r = ctx.recorded(fam.scenario, "trained", stats_every=1)
    r.locate_nonfinite()
    finite = r.train(s.steps)
    bad = r.nonfinite
    r.rec.metric("nonfinite_found", 0 if bad is None else 1)
    r.rec.note("nonfinite_found", "No inf/NaN in any layer output, gradient or parameter." if bad
               is None else f"The {bad.describe()}" + ("" if finite else
                                                       f"; the loss was non-finite at step "
                                                       f"{r.steps_done - 1} and training "
                                                       f"stopped there") + ".")
    if bad is not None:
        r.rec.metric("nonfinite_first_step", bad.step)
    fam.runs["trained"] = r.save()
    r.close()
    fam.checks += [
        Check("training_stays_finite", "nonfinite", "trained", catalogue=("N1",),
              about="no inf/NaN in the recorded loss, layer outputs, gradients or parameters"),
        Check("no_inf_or_nan_anywhere", "metric_max", "trained",
              quantities=("nonfinite_found", "nonfinite_found"), threshold=0, catalogue=("N1",),
              about="no inf/NaN in any step, including one the recorder cannot hold"),
    ]
    return fam
