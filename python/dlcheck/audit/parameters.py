"""Parameters: every parameter that should train does (F1, F2, F3).

One training run of the team's step; for each parameter its requires_grad
and in-optimizer flags (the recorder writes them) and whether the
optimizer was ever given a gradient for it. Prefixes in AUDIT["frozen"]
are parameters meant to stay frozen and are left out."""
from __future__ import annotations

from .context import Context
from .scenario import Check, Family, zero_count

DESCRIPTION = ("Every parameter the team's model should train trains: requires_grad on, in "
               "the optimizer, given gradients by the training step.")


def _listing(names: list, what: str) -> str:
    if not names:
        return f"none {what}"
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return f"{shown} {what}"


def run(ctx: Context) -> Family:
    fam = Family("parameters", DESCRIPTION)
    s = ctx.settings
    r = ctx.recorded(fam.scenario, "trained")
    r.train(s.steps)
    declared = s.frozen

    def meant_frozen(name: str) -> bool:
        return any(name.startswith(p) for p in declared)

    in_opt = {id(p) for g in r.optimizer.param_groups for p in g["params"]}
    named = [(n, p) for n, p in r.named if not meant_frozen(n)]
    frozen = [n for n, p in named if not p.requires_grad]
    outside = [n for n, p in named if p.requires_grad and id(p) not in in_opt]
    given = [g for g in r.grads if g is not None]
    starved = [n for n, p in named if p.requires_grad and id(p) in in_opt and
               not any(n in g and bool(g[n].any()) for g in given)]
    rec = r.rec
    rec.metric("params_frozen_by_mistake", len(frozen))
    rec.note("params_frozen_by_mistake", _listing(
        frozen, "ha" + ("s" if len(frozen) == 1 else "ve") + " requires_grad=False and "
        "AUDIT['frozen'] does not declare them frozen."))
    rec.metric("params_not_in_optimizer", len(outside))
    rec.note("params_not_in_optimizer", _listing(
        outside, "require gradients but are in no param group of the optimizer."))
    rec.metric("params_without_gradient", len(starved))
    rec.note("params_without_gradient", _listing(
        starved, f"are in the optimizer but got no non-zero gradient in {len(r.grads)} steps."))
    fam.runs["trained"] = r.save()
    r.close()
    if not declared:
        fam.checks.append(Check(
            "every_parameter_trains", "frozen", "trained", threshold=0.01,
            explained_by=("F1", "F2", "F3"),
              about="every parameter tensor moved during training, none far less than the others"))
    fam.checks += [
        zero_count("no_parameter_frozen_by_mistake", "trained", "params_frozen_by_mistake", "F1",
                   "no parameter has requires_grad=False unless declared"),
        zero_count("every_trainable_parameter_in_optimizer", "trained", "params_not_in_optimizer",
                   "F2", "every parameter that requires gradients is optimized"),
        zero_count("every_optimized_parameter_gets_gradients", "trained",
                   "params_without_gradient", "F3",
                   "every optimized parameter receives a gradient"),
    ]
    return fam
