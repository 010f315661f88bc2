"""Hugging Face transformers: `RecorderCallback` records a `Trainer.train`
into a dlcheck trace with the content of the plain `dlcheck.Recorder`.

    from dlcheck.integrations.transformers import RecorderCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[RecorderCallback("run.h5")])
    trainer.train()                              # run.h5 written by rank 0

The Trainer hands callbacks neither the loss nor the norm it clips, so the
callback takes them where they are made:
    loss       the `loss` of the model's output (`outputs.loss` or
               `outputs["loss"]`, as the Trainer reads it), averaged over
               the step's gradient_accumulation_steps micro-batches; a
               model whose output holds none (a compute_loss of your own)
               is refused at its first training forward
    grad_norm  measured when each backward pass has finished (the autograd
               engine's end-of-backward callback), so the last one of a
               step is the accumulated gradient before max_grad_norm
               clipping; gradients still multiplied by the GradScaler's
               scale (fp16) are measured divided by it
    lr         param_groups[0]["lr"] in on_optimizer_step, which the
               Trainer calls after optimizer.step() and before the
               scheduler's step: the lr the step used
and the recorder's digests, layer statistics and finals. The parameter
names are the model's own.

The Trainer calls no callback when train() raises: nothing is written
then, and `self.recorder` holds what was recorded (`save()` it in your
own `except`)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Iterable, Optional, Union

import torch
import transformers

from .._h5 import check_parent_dir
from ..recorder import Recorder


def _loss_of(output: Any) -> Optional[torch.Tensor]:
    """The loss a model's output holds, as the Trainer reads it."""
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


class RecorderCallback(transformers.TrainerCallback):
    """Records Trainer.train into the trace at `path` (written by the world
    process zero at the end; its folder must exist now).

    run, scenario      the trace's root attributes (Recorder's)
    seed               the trace's seed; None: TrainingArguments.seed
    stats_every, stats_steps   layer statistics as Recorder chooses them
    check_ranks        all-gather parameter and buffer digests across ranks
                       at the end (metrics rank_param_mismatch, ...)

    The recorder (`self.recorder`) is made in on_train_begin, when the
    Trainer has built its optimizer."""

    def __init__(self, path: Union[str, os.PathLike], *, run: str = "reference",
                 scenario: str = "", seed: Optional[int] = None, stats_every: int = 0,
                 stats_steps: Optional[Iterable[int]] = None, check_ranks: bool = False):
        check_parent_dir(path)
        self.path = os.fspath(path)
        self.options = dict(run=run, scenario=scenario, stats_every=stats_every,
                            stats_steps=stats_steps, check_ranks=bool(check_ranks))
        self.seed = seed
        self.recorder: Optional[Recorder] = None
        self._hook: Any = None
        self._losses: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        scaler = getattr(optimizer, "scaler", None)
        seed = self.seed if self.seed is not None else args.seed
        self.recorder = Recorder(model, inner, scaler, seed=seed, path=self.path, **self.options)
        self._hook = model.register_forward_hook(self._forward_hook)
        self._losses = []

    def _forward_hook(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not module.training or not torch.is_grad_enabled():
            return  # evaluation
        loss = _loss_of(output)
        if loss is None:
            raise RuntimeError("dlcheck RecorderCallback: the model's output holds no 'loss' "
                               "(labels missing, or a compute_loss of your own?): return the "
                               "loss from forward, or record with dlcheck.Recorder yourself")
        self._losses.append(float(loss.detach()))
        if loss.requires_grad:
            loss.register_hook(self._queue_measure)

    def _queue_measure(self, grad: torch.Tensor) -> None:
        # Runs as backward starts; the engine runs the callback once it has
        # finished, when every .grad holds this micro-batch's share.
        torch.autograd.Variable._execution_engine.queue_callback(self.recorder.observe_grads)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None,
                          **kwargs: Any) -> None:
        loss = sum(self._losses) / len(self._losses)
        self.recorder.step(loss, lr=optimizer.param_groups[0]["lr"])
        self._losses = []

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rec, self.recorder = self.recorder, None
        try:
            rec.save()
        finally:
            rec.close()
            self._hook.remove()
