"""Inference: the team's evaluate() twice on the same model (M1, M2, M3),
and a fine-tuning run's frozen BatchNorm statistics (M4).

After a few training steps, evaluate(model) runs twice while hooks watch
every forward pass: the model's outputs (two identical evaluations must
give the same ones), the modules that ran in training mode, whether
gradients were enabled and how many bytes autograd saved for a backward
that never comes; buffers are compared before and after. The modes
evaluate() leaves behind are reported (M5 is a note, not a check: whether
the team's loop calls model.train() after evaluating lies outside the
adapter, so failing on it would fail correct code)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from ..context import BATCHNORM, DROPOUT, Context
from ..declaration import FamilyDeclaration
from ..scenario import Family, NotTested, zero_count

DESCRIPTION = ("The team's evaluation: repeatable, in eval mode, without autograd, leaving "
               "the BatchNorm statistics alone; frozen BatchNorm stays frozen while training.")


class Watch:
    """Hooks on a model for the duration of evaluate() calls."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.outputs: list[list[torch.Tensor]] = []
        self.train_mode: set[str] = set()
        self.grad_enabled = 0
        self.forwards = 0
        self.saved_bytes = 0

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        outputs: list[torch.Tensor] = []
        self.outputs.append(outputs)
        hooks = []
        for name, m in self.model.named_modules():
            if isinstance(m, BATCHNORM + DROPOUT):
                hooks.append(m.register_forward_pre_hook(self._mode_hook(name or "model")))

        def top(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            self.forwards += 1
            self.grad_enabled += torch.is_grad_enabled()
            if isinstance(output, torch.Tensor):
                outputs.append(output.detach().clone())
        hooks.append(self.model.register_forward_hook(top))

        def pack(t: torch.Tensor) -> torch.Tensor:
            self.saved_bytes += t.numel() * t.element_size()
            return t
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                yield
        finally:
            for h in hooks:
                h.remove()

    def _mode_hook(self, name: str) -> Any:
        def hook(module: torch.nn.Module, inputs: Any) -> None:
            if module.training:
                self.train_mode.add(f"{name} ({type(module).__name__})")
        return hook

    def repeat_diff(self) -> float:
        a, b = self.outputs
        if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
            return float("inf")
        return max((float((x.double() - y.double()).abs().max()) for x, y in zip(a, b)
                    if x.numel()), default=0.0)


def _buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: b.detach().clone() for k, b in model.named_buffers()}


def _change(before: dict, after: dict, only: Any = None) -> tuple[float, list]:
    changed, worst = [], 0.0
    for k, b in before.items():
        if only is not None and not only(k):
            continue
        d = float((after[k].double() - b.double()).abs().max()) if b.numel() else 0.0
        if d > 0:
            changed.append(k)
            worst = max(worst, d)
    return worst, changed


def _frozen_batchnorm(model: torch.nn.Module, declared: tuple) -> list[str]:
    """Names of BatchNorm modules whose parameters are all frozen (requires_grad
    off, or under a prefix AUDIT['frozen'] declares)."""
    names = []
    for name, m in model.named_modules():
        params = list(m.named_parameters(prefix=name))
        if isinstance(m, BATCHNORM) and m.track_running_stats and params and all(
                not p.requires_grad or any(n.startswith(d) for d in declared) for n, p in params):
            names.append(name)
    return names


def run(ctx: Context) -> Family:
    fam = Family("inference", DESCRIPTION)
    s = ctx.settings
    r = ctx.recorded(fam.scenario, "trained")
    frozen_bn = _frozen_batchnorm(r.inner, s.frozen)
    start = _buffers(r.inner)
    r.train(s.steps)
    after_training = _buffers(r.inner)
    rec = r.rec
    if frozen_bn:
        moved, keys = _change(start, after_training,
                              lambda k: any(k.startswith(b + ".running_") for b in frozen_bn))
        rec.metric("frozen_buffer_change", moved)
        rec.note("frozen_buffer_change", (
            f"Frozen BatchNorm {', '.join(frozen_bn[:4])}: " +
            (f"{', '.join(keys[:4])} moved by up to {moved:.3g} during {s.steps} training "
             f"steps (the module ran in training mode)." if keys else
             "running statistics unchanged by training.")))
    watch = Watch(r.model)
    values = []
    training = {n for n, m in r.model.named_modules() if m.training}
    for _ in range(2):
        with watch.call():
            values.append(ctx.adapter.evaluate(r.model))
    left = sorted(f"{n or 'model'} ({type(m).__name__})" for n, m in r.model.named_modules()
                  if n in training and not m.training and isinstance(m, BATCHNORM + DROPOUT))
    r.model.train()
    diff = watch.repeat_diff()
    moved, keys = _change(after_training, _buffers(r.inner))
    modes = sorted(watch.train_mode)
    rec.metric("inference_repeat_max_diff", diff)
    rec.note("inference_repeat", (
        f"Two evaluate() calls on the same model: model outputs differ by up to {diff:.3g}; "
        f"returned {values[0]} then {values[1]}. " +
        (f"In training mode during evaluate(): {', '.join(modes[:6])}." if modes else
         "Every Dropout/BatchNorm module ran in eval mode.")))
    rec.metric("inference_left_in_eval_mode", len(left))
    rec.note("inference_left_in_eval_mode", (
        f"evaluate() returns with {', '.join(left[:4])}{' ...' if len(left) > 4 else ''} in "
        f"eval mode: unless the training loop calls model.train() after evaluating, training "
        f"goes on with dropout off and BatchNorm frozen (M5). The audit puts the model back "
        f"in training mode itself." if left else
        "evaluate() leaves every Dropout/BatchNorm module in the mode it found."))
    rec.metric("inference_buffer_change", moved)
    rec.note("inference_buffer_change", (
        f"evaluate() changed {', '.join(keys[:4])} by up to {moved:.3g}." if keys else
        "evaluate() left every buffer unchanged."))
    rec.metric("inference_saved_bytes", watch.saved_bytes)
    rec.note("inference_saved_bytes", (
        f"Gradients were enabled in {watch.grad_enabled} of {watch.forwards} forward passes of "
        f"evaluate(); autograd kept {watch.saved_bytes} bytes of activations for a backward "
        f"that never runs."))
    fam.runs["trained"] = r.save()
    r.close()
    if not watch.forwards:
        fam.not_tested.append(NotTested("evaluation_checks", ("M1", "M2", "M3"),
                                        "evaluate(model) never called the model's forward"))
    else:
        fam.checks += [
            zero_count("evaluation_repeatable", "trained", "inference_repeat_max_diff", "M1",
                       "two identical evaluations give identical outputs",
                       note="inference_repeat"),
            zero_count("evaluation_keeps_no_activations", "trained", "inference_saved_bytes",
                       "M2", "evaluation runs without autograd (no_grad)"),
            zero_count("evaluation_leaves_buffers", "trained", "inference_buffer_change", "M3",
                       "evaluation leaves BatchNorm running statistics alone"),
        ]
    if frozen_bn:
        fam.checks.append(zero_count(
            "frozen_batchnorm_stays", "trained", "frozen_buffer_change", "M4",
            "frozen BatchNorm keeps its running statistics in training"))
    else:
        fam.not_tested.append(NotTested("frozen_batchnorm_stays", ("M4",),
                                        "the model has no BatchNorm whose parameters are frozen"))
    return fam


FAMILY = FamilyDeclaration("inference", run, ("M1", "M2", "M3", "M4"),
                           needs=("evaluate",), description=DESCRIPTION)
