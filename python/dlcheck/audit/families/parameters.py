"""Parameters: every parameter that should train does (F1, F2, F3), and
the state training changes is in the state dict (F4, modulestate.py).

One training run of the team's step; for each parameter its requires_grad
and in-optimizer flags (the recorder writes them), whether the optimizer
was ever given a gradient for it, and whether a parameter given one, with
a learning rate above 0, changed at all. No threshold on how far a
parameter moved: a LayerNorm gain under plain SGD moves 0.3% in a few
steps, and that is training. Prefixes in AUDIT["frozen"] are parameters
meant to stay frozen and are left out."""
from __future__ import annotations

import torch

from ..context import Context
from ..declaration import FamilyDeclaration
from ..scenario import Check, Family, NotTested, zero_count
from . import modulestate
from .export import model_input

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
    start = {n: p.detach().clone() for n, p in r.named}
    plain = modulestate.Snapshot.of(r.inner)
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
    # the learning rates the steps used (an LR scheduler changes them; the last one may be 0)
    lr = {id(p): max([step[i] for step in r.lrs if i < len(step)], default=g.get("lr", 0.0))
          for i, g in enumerate(r.optimizer.param_groups) for p in g["params"]}
    unmoved = [n for n, p in named if p.requires_grad and id(p) in in_opt and n not in starved
               and lr[id(p)] > 0 and torch.equal(p.detach(), start[n])]
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
    rec.metric("params_not_updated", len(unmoved))
    rec.note("params_not_updated", _listing(
        unmoved, f"got non-zero gradients and have a learning rate above 0, yet no element "
        f"changed in {len(r.grads)} steps (is optimizer.step() skipped or undone?)."))
    unregistered = _unregistered_state(ctx, r, plain)
    fam.runs["trained"] = r.save()
    r.close()
    fam.checks += [
        Check("every_parameter_trains", "metric_max", "trained",
              quantities=("params_not_updated", "params_not_updated"), threshold=0,
              about="every parameter given a non-zero gradient, with a learning rate above 0, "
                    "changed during training"),
        zero_count("no_parameter_frozen_by_mistake", "trained", "params_frozen_by_mistake", "F1",
                   "no parameter has requires_grad=False unless declared"),
        zero_count("every_trainable_parameter_in_optimizer", "trained", "params_not_in_optimizer",
                   "F2", "every parameter that requires gradients is optimized"),
        zero_count("every_optimized_parameter_gets_gradients", "trained",
                   "params_without_gradient", "F3",
                   "every optimized parameter receives a gradient"),
    ]
    if unregistered:
        fam.not_tested.append(NotTested("module_state_registered", ("F4",), unregistered))
    else:
        fam.checks.append(zero_count(
            "module_state_registered", "trained", "plain_state_lost_at_reload", "F4",
            "every tensor training changes is a parameter or buffer (in the state dict)"))
    return fam


FAMILY = FamilyDeclaration("parameters", run, ("F1", "F2", "F3", "F4"), description=DESCRIPTION)


def _unregistered_state(ctx: Context, r, before: modulestate.Snapshot) -> str:
    """Records plain_state_lost_at_reload (F4) and its note; the reason it
    could not be measured, or "" when it was."""
    changed, constant = modulestate.changes(before, r.inner)
    try:  # a batch read only when something changed: the usual model holds only constants
        x = model_input(ctx.adapter.next_batch(ctx.adapter.batch_iter(
            ctx.settings.seed, ctx.settings.batch_size), 0)) if changed else None
    except TypeError as e:
        found = modulestate.Lost(changed, constant, [], str(e))
    else:
        found = modulestate.lost_at_reload(r.inner, lambda: ctx.adapter.model(ctx.settings.seed),
                                           before, x, seed=ctx.settings.seed)
    if found.why_untested:
        return (f"plain tensor attributes changed by training, not in the state dict: "
                f"{modulestate.describe(found.changed)}; whether a reload loses them was not "
                f"measured: {found.why_untested}")
    r.rec.metric("plain_state_lost_at_reload", len(found.lost))
    r.rec.note("plain_state_lost_at_reload", found.note())
    return ""
