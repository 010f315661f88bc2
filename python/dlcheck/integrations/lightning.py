"""PyTorch Lightning: `RecorderCallback` records a `Trainer.fit` into a
dlcheck trace with the content of the plain `dlcheck.Recorder`.

    from dlcheck.integrations.lightning import RecorderCallback
    trainer = Trainer(max_epochs=2, callbacks=[RecorderCallback("run.h5")])
    trainer.fit(model, loader)                  # run.h5 written by rank 0

Per optimizer step (Lightning's automatic optimization, one optimizer):
    loss       the sum of the step's micro-batch losses as Lightning hands
               them to on_train_batch_end: each divided by
               accumulate_grad_batches, so the mean of the micro-batch losses
    grad_norm  measured in on_before_optimizer_step: after Lightning's
               GradScaler unscale_ and before its gradient clipping
    lr         param_groups[0]["lr"] in on_before_optimizer_step (Lightning
               steps a per-step scheduler before on_train_batch_end, so the
               lr read there would be the next step's)
    loss_scale, skipped    from the precision plugin's GradScaler (16-mixed)
and the recorder's digests, layer statistics and finals; at the end the
logged metrics named in `metrics` (trainer.callback_metrics). The
parameter names are the LightningModule's own (`net.0.weight`).

A fit that raises (an error, or Ctrl-C, which Lightning turns into a
graceful stop) still writes what was recorded, with the note
`interrupted` saying what happened after how many steps: `dlcheck
compare` against a complete trace then fails on that note rather than on
a silently shorter run.

The callback subclasses the Lightning package already imported
(`lightning.pytorch` or `pytorch_lightning`), else the first of the two
that imports."""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any, Iterable, Optional, Union

from .._h5 import check_parent_dir
from ..recorder import Recorder

#: The two packages Lightning ships as (the `lightning` umbrella and the
#: standalone one); their Callback classes are distinct.
LIGHTNING_PACKAGES = ("lightning.pytorch", "pytorch_lightning")


def _lightning() -> Any:
    """The Lightning package the team uses: one already imported, else the
    first that imports. ImportError naming what to install when none does."""
    for name in LIGHTNING_PACKAGES:
        if name in sys.modules:
            return sys.modules[name]
    for name in LIGHTNING_PACKAGES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("dlcheck.integrations.lightning needs PyTorch Lightning: "
                      "pip install pytorch-lightning (or lightning)")


pl = _lightning()


class RecorderCallback(pl.Callback):
    """Records Trainer.fit into the trace at `path` (written by global rank
    0 when training ends; its folder must exist now).

    run, scenario      the trace's root attributes (Recorder's)
    seed               the trace's seed; None: PL_GLOBAL_SEED, which
                       seed_everything() sets, else 0
    stats_every, stats_steps   layer statistics as Recorder chooses them
    check_ranks        all-gather parameter and buffer digests across ranks
                       at the end (metrics rank_param_mismatch, ...)
    metrics            names of logged values (self.log) to store as trace
                       metrics at the end; one not logged is named in the
                       note `metrics_not_logged`

    The recorder (`self.recorder`) is made in on_train_start, when
    Lightning has built the optimizer and precision plugin."""

    def __init__(self, path: Union[str, os.PathLike], *, run: str = "reference",
                 scenario: str = "", seed: Optional[int] = None, stats_every: int = 0,
                 stats_steps: Optional[Iterable[int]] = None, check_ranks: bool = False,
                 metrics: Iterable[str] = ()):
        super().__init__()
        check_parent_dir(path)
        if isinstance(metrics, str):
            raise TypeError("metrics must be a list of names, not one str")
        self.path = os.fspath(path)
        self.options = dict(run=run, scenario=scenario, stats_every=stats_every,
                            stats_steps=stats_steps)
        self.seed, self.check_ranks, self.metric_names = seed, bool(check_ranks), list(metrics)
        self.recorder: Optional[Recorder] = None
        self.recorded: Optional[Recorder] = None  # the last fit's, once it ended
        self._saved = False
        self._begin_step()

    def _begin_step(self) -> None:
        self._loss, self._lr, self._stepped = 0.0, None, False

    # ---- Lightning's hooks ---------------------------------------------------------------

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._saved = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError("RecorderCallback records Lightning's automatic optimization; "
                               "with manual optimization call dlcheck.Recorder's step() after "
                               "your optimizer.step() in training_step")
        if len(trainer.optimizers) != 1:
            raise RuntimeError(f"RecorderCallback records one optimizer; this module "
                               f"configures {len(trainer.optimizers)}")
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.recorder = Recorder(pl_module, trainer.optimizers[0], scaler, seed=seed,
                                 path=self.path, check_ranks=self.check_ranks, **self.options)
        self._begin_step()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.recorder.observe_grads()
        self._lr, self._stepped = optimizer.param_groups[0]["lr"], True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None:  # None: training_step skipped the batch
            self._loss += float(loss)
        if self._stepped:  # the batch that ended an accumulation and stepped
            self.recorder.step(self._loss, lr=self._lr)
            self._begin_step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer, interrupted=None)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._saved:  # max_epochs=0, an empty loader, every batch skipped
            raise RuntimeError(f"RecorderCallback: Trainer.fit made no optimizer step, so "
                               f"there is no trace to write to {self.path}")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        what = f"{type(exception).__name__}: {exception}".replace("\0", "").strip().rstrip(":")
        self._finish(trainer, interrupted=f"Trainer.fit stopped by {what}")

    # ---- the end -------------------------------------------------------------------------

    def _finish(self, trainer: Any, interrupted: Optional[str]) -> None:
        """Writes the trace once (removing the recorder's hooks). After an
        exception the ranks may not all get here, so the digests are not
        gathered then (a collective would hang)."""
        rec, self.recorder = self.recorder, None
        if rec is None:
            return
        try:
            self._store_metrics(rec, trainer.callback_metrics)
            if interrupted is not None:
                rec.note("interrupted", f"{interrupted[:900]} after {rec.steps} optimizer steps")
                rec.check_ranks_at_save = False
                if not trainer.is_global_zero:
                    return
            if rec.steps:
                rec.save()
                self._saved = True
        finally:
            rec.close()
            self.recorded = rec

    def _store_metrics(self, rec: Recorder, logged: Mapping[str, Any]) -> None:
        missing = [n for n in self.metric_names if n not in logged]
        for name in self.metric_names:
            if name in logged:
                rec.metric(name, logged[name])
        if missing:
            rec.note("metrics_not_logged", ", ".join(missing))
