"""Accumulation: K micro-batches through the team's own accumulation path
against one batch of K times the size (G1, G2, G3; G5 reported).

Runs (the same samples, the same initial weights):
  big_batch               each step one batch of batch_size rows
  accumulated             each step the same rows as K micro-batches
  accumulated_as_written  the same, without the audit zeroing the
                          gradients before each step: only a step that
                          never zeroes them (G1) makes it differ
and one-step probes with each micro-batch alone. The diagnosis of a
mismatch is measured at step 0, from the gradients the optimizer was given:
K times the big batch's (G2), the last micro-batch's share (G3), or, when
the micro-batches weigh unequally (variable-length sequences with token
masks), the plain mean of each micro-batch's own mean (G4).

Every run trains with dropout made the identity (randomness.py): K
micro-batches would draw other masks than one batch. The big batch's
float64 shadow and the accumulated run's (big_batch_float64,
accumulated_float64) give each trained tensor the rounding band it is
compared within (noise.py)."""
from __future__ import annotations

import copy
import math

from ...recorder import Recorder
from ..context import BATCHNORM, BF16_TOLERANCE, Context, has_module
from ..declaration import FamilyDeclaration
from ..loop import Run, grad_distance, grad_mean, grad_norm, grad_shares
from ..noise import Shadow, band_rule, band_source, float64_shadow
from ..randomness import DropoutOff
from ..scenario import Check, Family, NotTested

DESCRIPTION = ("The team's gradient accumulation: K micro-batches against one batch of K "
               "times the size, from the same weights on the same samples.")
#: A step-0 gradient this close (relative) to a pattern is that pattern.
CLOSE = 0.05
#: The plain mean of the micro-batches' gradients this far (relative) from the
#: big batch's: they weigh unequally (token counts), and G4 can be told apart.
UNEQUAL = 1e-3
#: the same under autocast (bfloat16 rounds each micro-batch on its own)
UNEQUAL_BF16 = 0.1


def _micro_batch_gradients(ctx: Context, k: int, dropout: DropoutOff) -> list:
    """Each micro-batch of the first step alone from the initial weights:
    the gradient the team's step gives the optimizer for its own mean."""
    probe = ctx.run(accumulation=k, dropout_off=dropout)
    start = copy.deepcopy(probe.model.state_dict())
    per_micro = []
    for mb in probe.next_micro_batches():
        probe.model.load_state_dict(start)
        probe.step(micro=[mb])
        per_micro.append(probe.grads[-1])
    probe.close()
    return per_micro


def _note_step0_patterns(rec: Recorder, ctx: Context, g_big: dict, g_acc: dict,
                         per_micro: list) -> None:
    """The accumulated step-0 gradient against the big batch's, K times it
    (G2) and the last micro-batch's share (G3)."""
    s, k = ctx.settings, ctx.settings.accumulation
    ratio = grad_norm(g_acc) / max(grad_norm(g_big), 1e-300)
    d_big = grad_distance(g_acc, g_big)
    d_k = grad_distance(g_acc, g_big, k)
    # G3 leaves the last micro-batch's gradient at its share of the big batch's: 1/K
    # when the micro-batches weigh the same, its token share when they do not. The
    # shares are read off the big batch's gradient, so that a correct step whose
    # micro-batch gradients happen to be nearly parallel is not taken for it.
    share = grad_shares(g_big, per_micro)[-1] if all(per_micro) else 1.0 / k
    d_last = grad_distance(g_acc, per_micro[-1], share) if share > 0 else math.inf
    rec.metric("step0_grad_ratio_to_big_batch", ratio)
    rec.metric("step0_distance_from_big_batch", d_big)
    rec.metric("step0_distance_from_k_times_big_batch", d_k)
    rec.metric("step0_distance_from_last_micro_batch", d_last)
    rec.note("accumulation_step0", (
        f"At step 0 the accumulated gradient (K={k} micro-batches of {s.batch_size // k}) "
        f"has {ratio:.4g} times the norm of the big batch's (relative distance "
        f"{d_big:.3g}); its distance from K times the big batch's gradient is {d_k:.3g}, "
        f"from the last micro-batch's share alone {d_last:.3g}." +
        (f" A step that divides by a fixed count (a configured K={k}) gives the same "
         f"picture: its one-batch call is divided by {k} too. Either way, divide by "
         f"len(micro_batches) (docs/audit.md)." if d_k < CLOSE else "")))


def _note_unequal_weights(acc: Run, g_big: dict, per_micro: list, batchnorm: bool) -> bool:
    """Whether the micro-batches weigh unequally in the big batch's loss
    (token counts); if so, how the accumulated gradient weighs them (G4)."""
    g_acc = acc.grads[0]
    mean = grad_mean(per_micro) if all(per_micro) and not batchnorm else None
    spread = grad_distance(mean, g_big) if mean and g_big else 0.0
    weighted = bool(g_acc) and spread > (UNEQUAL_BF16 if acc.autocast else UNEQUAL)
    if weighted:
        # 0: the accumulated gradient is the plain mean of the micro-batches' own means
        # (G4); 1: it is the big batch's, each micro-batch weighted by its share
        token = grad_distance(g_acc, mean) * grad_norm(mean) / (spread * grad_norm(g_big))
        acc.rec.metric("step0_per_micro_batch_mean_ratio", token)
        acc.rec.note("accumulation_token_mean", (
            f"The micro-batches do not weigh equally in the big batch's loss (variable token "
            f"counts?): the plain mean of their own step-0 gradients is at relative distance "
            f"{spread:.3g} from the big batch's. The accumulated gradient's distance from that "
            f"plain mean is {token:.3g} of it (0: each micro-batch's mean counted equally, "
            f"1: weighted by its share of the batch)."))
    return weighted


def _train_as_written(ctx: Context, fam: Family, dropout: DropoutOff) -> None:
    """The accumulated run without the audit zeroing the gradients (G1)."""
    written = ctx.recorded(fam.scenario, "accumulated_as_written",
                           accumulation=ctx.settings.accumulation, dropout_off=dropout)
    written.train(ctx.settings.steps, audit_zero_grad=False)
    fam.runs["accumulated_as_written"] = written.save()
    written.close()


def _check_against_big_batch(fam: Family, ctx: Context, big_shadow: Shadow, acc_shadow: Shadow,
                             autocast: bool, batchnorm: bool) -> None:
    s = ctx.settings
    # where the step cannot run in float64: the fixed rules of float32 summation order
    # and of bfloat16 (scenarios/amp_fp32)
    fallback = BF16_TOLERANCE if autocast else "close(1e-4, 1e-6)"
    fam.checks.append(Check(
        "accumulation_matches_big_batch", "equivalence", "big_batch", "accumulated",
        quantities=("params",), **band_rule(big_shadow, acc_shadow, fallback),
        explained_by=("G2", "G3", "G4"),
        about=(f"{s.accumulation} micro-batches train the same weights as one batch of "
               f"{s.batch_size}, {band_source(big_shadow, acc_shadow, fallback)}" +
               (" (the model has BatchNorm: micro-batch statistics differ, G5, reported as "
                "expected)" if batchnorm else ""))))
    if batchnorm:
        fam.checks[-1].expect_divergence = True


def _check_step0_patterns(fam: Family, diagnosed: bool) -> None:
    if diagnosed:
        fam.checks += [
            Check("loss_divided_by_accumulation_count", "metric_min", "accumulated",
                  quantities=("step0_distance_from_k_times_big_batch", "accumulation_step0"),
                  threshold=CLOSE, catalogue=("G2",),
                  about="the accumulated gradient is not K times the big batch's"),
            Check("every_micro_batch_contributes", "metric_min", "accumulated",
                  quantities=("step0_distance_from_last_micro_batch", "accumulation_step0"),
                  threshold=CLOSE, catalogue=("G3",),
                  about="the accumulated gradient is not the last micro-batch's share alone"),
        ]
    else:
        fam.not_tested.append(NotTested(
            "step0_gradient_diagnosis", ("G2", "G3"),
            "the first step gave the optimizer no gradients (skipped by the scaler?)"))


def _check_gradients_zeroed(fam: Family) -> None:
    fam.checks.append(Check(
        "gradients_zeroed_between_steps", "equivalence", "accumulated", "accumulated_as_written",
        quantities=("loss", "params"), tolerance="bitwise", catalogue=("G1",),
        about="the step zeroes gradients itself: zeroing them before each step changes no bit"))


def _check_unequal_weights(fam: Family, weighted: bool, batchnorm: bool) -> None:
    if weighted:
        fam.checks.append(Check(
            "loss_normalised_over_whole_batch", "metric_min", "accumulated",
            quantities=("step0_per_micro_batch_mean_ratio", "accumulation_token_mean"),
            threshold=0.5, catalogue=("G4",),
            about="micro-batches of unequal weight (token counts) count by their share, not "
                  "each its own mean"))
    else:
        fam.not_tested.append(NotTested(
            "loss_normalised_over_whole_batch", ("G4",),
            "the model has BatchNorm: micro-batch statistics (G5) hide how the micro-batches "
            "are weighted" if batchnorm else
            "every micro-batch weighs the same in the big batch's loss (no variable-length "
            "masks): a per-micro-batch mean cannot differ from the whole batch's"))


def run(ctx: Context) -> Family:
    fam = Family("accumulation", DESCRIPTION)
    s = ctx.settings
    k = s.accumulation
    dropout = DropoutOff(ctx.adapter.module)
    big = ctx.recorded(fam.scenario, "big_batch", dropout_off=dropout)
    big.train(s.steps)
    fam.runs["big_batch"] = big.save()
    batchnorm = has_module(big.model, BATCHNORM)
    big.close()
    big_shadow = float64_shadow(ctx, fam.scenario, big, s.steps, dropout)
    per_micro = _micro_batch_gradients(ctx, k, dropout)

    acc = ctx.recorded(fam.scenario, "accumulated", accumulation=k, dropout_off=dropout)
    acc.train(s.steps)
    g_big, g_acc = big.grads[0], acc.grads[0]
    diagnosed = bool(g_big and g_acc and per_micro[-1])
    if diagnosed:
        _note_step0_patterns(acc.rec, ctx, g_big, g_acc, per_micro)
    weighted = _note_unequal_weights(acc, g_big, per_micro, batchnorm)
    fam.runs["accumulated"] = acc.save()
    acc.close()
    acc_shadow = float64_shadow(ctx, fam.scenario, acc, s.steps, dropout)
    for shadow in (big_shadow, acc_shadow):
        if shadow.run:
            fam.runs[shadow.run] = shadow.path
    _train_as_written(ctx, fam, dropout)

    fam.description += " " + dropout.describe()
    _check_against_big_batch(fam, ctx, big_shadow, acc_shadow, big.autocast, batchnorm)
    _check_step0_patterns(fam, diagnosed)
    _check_gradients_zeroed(fam)
    _check_unequal_weights(fam, weighted, batchnorm)
    return fam


FAMILY = FamilyDeclaration("accumulation", run, ("G1", "G2", "G3", "G4", "G5"),
                           description=DESCRIPTION)
