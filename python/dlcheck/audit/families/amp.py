"""Mixed precision: the team's autocast + GradScaler step against the same
step in float32 (A1, A2; skipped steps reported).

  amp    the step as written (on the CPU: bfloat16 autocast, the adapter's
         scaler, e.g. CpuGradScaler)
  fp32   the same step with autocast forced off and the scaler disabled
Every clip_grad_norm_ and clip_grad_value_ call is watched, wherever the
team's code imported it from: one made while the gradients are still
scaled (before scaler.unscale_) clips the wrong norm or values (A2). The
scaler's calls are followed in order: optimizer.step() on gradients still
multiplied by the scale (scaler.step bypassed), or unscale_/step of
gradients that no scale() made since the last update() (a loss never
scaled, update() before step()) is A6. The gradients the optimizer gets
at step 0 are compared: their distance from fp32's, and the fraction that
is zero only under AMP (underflow, A1)."""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any, Iterator, Optional

import torch

from .. import patch
from ..adapter import AdapterError
from ..context import Context
from ..declaration import FamilyDeclaration
from ..loop import AutocastOff, Run, grad_distance
from ..scenario import Check, Family, NotTested, zero_count

DESCRIPTION = ("The team's mixed-precision step (autocast, GradScaler) against the same step "
               "in float32: unscaled before clipping, no underflow, close to fp32.")
#: relative distance of the step-0 gradient from fp32's that bfloat16 stays within
CLOSE = 0.1
#: what PyTorch raises when a kernel lacks the dtype autocast hands it (torch 1.13's CPU
#: bfloat16 layer_norm: "expected scalar type BFloat16 but found Float"), as an
#: AdapterError words the team's exception
UNSUPPORTED = re.compile(
    r"raised (RuntimeError|TypeError|NotImplementedError): [^\n]*("
    r"expected scalar type \w+ but found \w+|found dtype \w+ but expected \w+|"
    r"not implemented for '(BFloat16|Half)'|mixed dtype|same dtype|"
    r"type \([\w.]+\) and [\w ]+ type \([\w.]+\) should be the same)", re.IGNORECASE)


def _still_scaled(scaler: Any, optimizer: torch.optim.Optimizer) -> bool:
    if scaler is None or not scaler.is_enabled() or scaler.get_scale() == 1.0:
        return False
    if hasattr(scaler, "still_scaled"):
        return scaler.still_scaled()
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
    return getattr(state.get("stage"), "name", "READY") == "READY"


#: torch's gradient clipping functions, by name in torch.nn.utils.clip_grad
CLIPPERS = ("clip_grad_norm_", "clip_grad_value_")


@dataclass
class Clipping:
    """The clipping calls one variant made: how many, how many while the
    gradients were still scaled, and where the first of those was made."""
    calls: int = 0
    scaled: int = 0
    first: str = ""   # "clip_grad_norm_ at helper.py:12" of the first scaled call


def _caller(frame: Optional[FrameType]) -> str:
    """file:line of the first frame outside torch (the team's call)."""
    while frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


@contextlib.contextmanager
def watch_clipping(run: Run, seen: Clipping) -> Iterator[None]:
    """clip_grad_norm_ and clip_grad_value_ replaced, wherever a module holds
    them (torch.nn.utils, the adapter, a team module that did `from
    torch.nn.utils import clip_grad_norm_`), by wrappers that count the
    calls made while the gradients are still scaled. A reference held
    elsewhere (a class attribute, a functools.partial made at import) is
    not seen."""
    originals = {n: getattr(torch.nn.utils.clip_grad, n) for n in CLIPPERS}

    def watcher(name: str) -> Any:
        original = originals[name]

        @functools.wraps(original)
        def clip(*args: Any, **kwargs: Any) -> Any:
            seen.calls += 1
            if _still_scaled(run.scaler, run.optimizer):
                seen.scaled += 1
                seen.first = seen.first or f"{name} at {_caller(sys._getframe(1))}"
            return original(*args, **kwargs)
        return clip

    wrappers = {id(f): watcher(n) for n, f in originals.items()}
    with patch.swapped(patch.holders(originals.values(), run.adapter.module), wrappers):
        yield


@dataclass
class ScalerOrder:
    """The scaler's calls since its last update(), and the first call out
    of GradScaler's order (scale, backward, unscale_, clip, step, update)."""
    scaled: bool = False     # scale() since the last update()
    unscaled: bool = False   # unscale_() (or step()'s own) since then
    in_step: bool = False    # inside scaler.step(optimizer)
    violations: int = 0
    first: str = ""

    def violated(self, run: Run, what: str) -> None:
        self.violations += 1
        self.first = self.first or f"at step {run.steps_done}: {what} ({_caller(sys._getframe(2))})"


@contextlib.contextmanager
def watch_scaler_order(run: Run, order: ScalerOrder) -> Iterator[None]:
    """The run's scaler and optimizer with their calls followed (instance
    attributes, removed afterwards); nothing when there is no enabled
    scaler."""
    scaler, optimizer = run.scaler, run.optimizer
    if scaler is None or not scaler.is_enabled():
        yield
        return
    originals = {n: getattr(scaler, n) for n in ("scale", "unscale_", "step", "update")}
    opt_step = optimizer.step
    unscale_words = ("gradients that no scaler.scale() made since the last update() were "
                     "unscaled: the loss was not scaled, or update() ran before step()")

    def scale(outputs: Any) -> Any:
        order.scaled = True
        return originals["scale"](outputs)

    def unscale_(opt: Any) -> Any:
        if not order.scaled and not order.in_step:  # step() judged its own unscale_
            order.violated(run, unscale_words)
        order.unscaled = True
        return originals["unscale_"](opt)

    def step(opt: Any, *args: Any, **kwargs: Any) -> Any:
        if not order.scaled and not order.unscaled:
            order.violated(run, unscale_words)
        order.in_step, order.unscaled = True, True
        try:
            return originals["step"](opt, *args, **kwargs)
        finally:
            order.in_step = False

    def update(*args: Any, **kwargs: Any) -> Any:
        order.scaled = order.unscaled = False
        return originals["update"](*args, **kwargs)

    def optimizer_step(*args: Any, **kwargs: Any) -> Any:
        if order.scaled and not order.unscaled and not order.in_step:
            order.violated(run, "optimizer.step() on gradients still multiplied by the loss "
                                "scale, in place of scaler.step(optimizer)")
        return opt_step(*args, **kwargs)

    for name, fn in (("scale", scale), ("unscale_", unscale_), ("step", step),
                     ("update", update)):
        setattr(scaler, name, fn)
    optimizer.step = optimizer_step  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name in originals:
            delattr(scaler, name)
        optimizer.step = opt_step  # type: ignore[method-assign]


def run(ctx: Context) -> Family:
    fam = Family("amp", DESCRIPTION)
    s = ctx.settings
    if not ctx.adapter.has("make_scaler") and ctx.trained and not ctx.autocast_seen:
        fam.not_tested.append(NotTested("all_checks", FAMILY.ids,
                                        "the step uses neither autocast nor a GradScaler"))
        return fam
    fp32 = ctx.recorded(fam.scenario, "fp32", fp32=True)
    fp32.train(s.steps)
    fam.runs["fp32"] = fp32.save()
    fp32.close()

    amp = ctx.recorded(fam.scenario, "amp")
    clipping, order = Clipping(), ScalerOrder()
    with watch_clipping(amp, clipping), watch_scaler_order(amp, order):
        amp.train(s.steps)
    if not amp.autocast and amp.scaler is None:
        amp.close()
        fam.runs = {}
        fam.not_tested.append(NotTested("all_checks", FAMILY.ids,
                                        "the step uses neither autocast nor a scaler"))
        return fam
    rec = amp.rec
    rec.metric("clips_before_unscale", clipping.scaled)
    rec.note("clips_before_unscale", (
        f"{clipping.scaled} of {clipping.calls} clipping calls saw gradients still multiplied "
        f"by the loss scale ({amp.scaler.get_scale() if amp.scaler else 1:g}), the first "
        f"{clipping.first}: they clipped the scaled gradients." if clipping.scaled else
        f"{clipping.calls} clipping calls (clip_grad_norm_, clip_grad_value_), each after the "
        f"gradients were unscaled."))
    rec.metric("scaler_calls_out_of_order", order.violations)
    rec.note("scaler_calls_out_of_order", (
        f"{order.violations} calls out of GradScaler's order, the first {order.first}."
        if order.violations else "The scaler's calls came in GradScaler's order (scale, "
        "backward, unscale_, clip, step, update)." if amp.scaler is not None and
        amp.scaler.is_enabled() else "No enabled scaler: no order to follow."))
    g_amp, g_fp = amp.grads[0] if amp.grads else None, fp32.grads[0] if fp32.grads else None
    if g_amp and g_fp:
        dist = grad_distance(g_amp, g_fp)
        zero_amp = sum(int(((g_amp[k] == 0) & (g_fp[k] != 0)).sum()) for k in g_amp.keys() & g_fp)
        total = sum(g.numel() for g in g_fp.values())
        rec.metric("amp_step0_grad_distance", dist)
        rec.metric("amp_grad_underflow_fraction", zero_amp / max(total, 1))
        skipped = sum(amp.rec.series["skipped"]) if amp.rec.series.get("skipped") else 0
        rec.note("amp_step0", (
            f"At step 0 the gradient the optimizer got under AMP is at relative distance "
            f"{dist:.3g} from fp32's; {zero_amp} of {total} gradient values are zero only under "
            f"AMP (underflow); {skipped:.0f} of {len(amp.losses)} steps were skipped by the "
            f"scaler."))
    fam.runs["amp"] = amp.save()
    amp.close()
    fam.checks += [
        zero_count("clip_after_unscale", "amp", "clips_before_unscale", "A2",
                   "gradients are unscaled before they are clipped"),
        zero_count("scaler_calls_in_order", "amp", "scaler_calls_out_of_order", "A6",
                   "the optimizer steps through scaler.step on gradients scale() made"),
    ]
    if g_amp and g_fp:
        fam.checks += [
            Check("amp_gradients_match_fp32", "metric_max", "amp",
                  quantities=("amp_step0_grad_distance", "amp_step0"), threshold=CLOSE,
                  explained_by=("A1", "A2", "A6"),
                  about="the AMP step's gradient at step 0 is within bfloat16 error of fp32's"),
            Check("no_gradient_underflow", "metric_max", "amp",
                  quantities=("amp_grad_underflow_fraction", "amp_step0"), threshold=0.01,
                  catalogue=("A1",), about="no gradient flushes to zero under AMP"),
        ]
    fam.not_tested.append(NotTested(
        "loss_scale_overflow", ("A3",),
        "bfloat16 has float32's exponent range: a CPU run does not overflow; skipped steps "
        "are reported in amp_gradients_match_fp32's evidence"))
    return fam


FAMILY = FamilyDeclaration("amp", run, ("A1", "A2", "A3", "A6"), description=DESCRIPTION)


def autocast_unsupported(error: AdapterError, ctx: Context) -> bool:
    """Whether `error` is the team's step failing for want of a kernel in the
    dtype its autocast chose (a dtype error raised while autocast was on),
    rather than a bug in the adapter."""
    seen = ctx.autocast_seen or any(getattr(r, "autocast", False) for r in ctx.runs)
    return seen and UNSUPPORTED.search(str(error)) is not None


def without_autocast(family: FamilyDeclaration, ctx: Context, error: AdapterError) -> Family:
    """A family whose step raised `error` under the team's autocast on this
    machine: run again with autocast forced off, its checks hold for the
    step in float32 and a not_tested check says what was not run; the amp
    family (autocast is its subject) and a family that fails again are
    not tested, with the reason."""
    for r in ctx.runs:
        r.close()
    ctx.family_done()
    ctx.runs = []
    reason = f"the step cannot run under its autocast on this machine ({error})"
    if family.name != "amp":
        try:
            with AutocastOff(ctx.adapter).on():
                fam = family.run(ctx)
        except AdapterError as again:
            if not autocast_unsupported(again, ctx):
                raise
            for r in ctx.runs:
                r.close()
        else:
            fam.not_tested.append(NotTested(
                "under_team_autocast", (), f"this family ran with autocast off: {reason}"))
            return fam
    fam = Family(family.name, family.description)
    fam.not_tested.append(NotTested("all_checks", family.ids, reason))
    return fam
