"""Mixed precision: the team's autocast + GradScaler step against the same
step in float32 (A1, A2; skipped steps reported).

  amp    the step as written (on the CPU: bfloat16 autocast, the adapter's
         scaler, e.g. CpuGradScaler)
  fp32   the same step with autocast forced off and the scaler disabled
Every clip_grad_norm_ call is watched: one made while the gradients are
still scaled (before scaler.unscale_) clips the wrong norm (A2). The
gradients the optimizer gets at step 0 are compared: their distance from
fp32's, and the fraction that is zero only under AMP (underflow, A1)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .context import Context
from .loop import Run, grad_distance
from .scenario import Check, Family, NotTested, zero_count

DESCRIPTION = ("The team's mixed-precision step (autocast, GradScaler) against the same step "
               "in float32: unscaled before clipping, no underflow, close to fp32.")
#: relative distance of the step-0 gradient from fp32's that bfloat16 stays within
CLOSE = 0.1


def _still_scaled(scaler: Any, optimizer: torch.optim.Optimizer) -> bool:
    if scaler is None or not scaler.is_enabled() or scaler.get_scale() == 1.0:
        return False
    if hasattr(scaler, "still_scaled"):
        return scaler.still_scaled()
    state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
    return getattr(state.get("stage"), "name", "READY") == "READY"


@contextlib.contextmanager
def watch_clipping(run: Run, counts: list) -> Iterator[None]:
    """clip_grad_norm_ (torch's and the adapter module's reference to it)
    counting the calls made while the gradients are still scaled."""
    original = torch.nn.utils.clip_grad_norm_

    def clip(*args: Any, **kwargs: Any) -> Any:
        counts[0] += 1
        counts[1] += _still_scaled(run.scaler, run.optimizer)
        return original(*args, **kwargs)

    holders = [(torch.nn.utils, "clip_grad_norm_"), (torch.nn.utils.clip_grad, "clip_grad_norm_")]
    holders += [(run.adapter.module, n) for n, v in vars(run.adapter.module).items()
                if v is original]
    try:
        for h, n in holders:
            setattr(h, n, clip)
        yield
    finally:
        for h, n in holders:
            setattr(h, n, original)


def run(ctx: Context) -> Family:
    fam = Family("amp", DESCRIPTION)
    s = ctx.settings
    if not ctx.adapter.has("make_scaler") and ctx.trained and not ctx.autocast_seen:
        fam.not_tested.append(NotTested("all_checks", ("A1", "A2", "A3"),
                                        "the step uses neither autocast nor a GradScaler"))
        return fam
    fp32 = ctx.recorded(fam.scenario, "fp32", fp32=True)
    fp32.train(s.steps)
    fam.runs["fp32"] = fp32.save()
    fp32.close()

    amp = ctx.recorded(fam.scenario, "amp")
    counts = [0, 0]
    with watch_clipping(amp, counts):
        amp.train(s.steps)
    if not amp.autocast and amp.scaler is None:
        amp.close()
        fam.runs = {}
        fam.not_tested.append(NotTested("all_checks", ("A1", "A2", "A3"),
                                        "the step uses neither autocast nor a scaler"))
        return fam
    rec = amp.rec
    rec.metric("clips_before_unscale", counts[1])
    rec.note("clips_before_unscale", (
        f"{counts[1]} of {counts[0]} clip_grad_norm_ calls saw gradients still multiplied by "
        f"the loss scale ({amp.scaler.get_scale() if amp.scaler else 1:g}): they clipped the "
        f"scaled norm." if counts[1] else
        f"{counts[0]} clip_grad_norm_ calls, each after the gradients were unscaled."))
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
    fam.checks.append(zero_count("clip_after_unscale", "amp", "clips_before_unscale", "A2",
                                 "gradients are unscaled before they are clipped"))
    if g_amp and g_fp:
        fam.checks += [
            Check("amp_gradients_match_fp32", "metric_max", "amp",
                  quantities=("amp_step0_grad_distance", "amp_step0"), threshold=CLOSE,
                  explained_by=("A1", "A2"),
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
