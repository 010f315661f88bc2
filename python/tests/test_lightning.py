"""dlcheck.integrations.lightning.RecorderCallback against pytorch-lightning
(the version ci/deps.sh pins, the newest that runs on Debian's torch 1.13):
a fit recorded twice compares equal, another learning rate does not, and
the callback's trace is the plain Recorder's trace of the same loop, bit
for bit (same CPU, same order of operations: no tolerance)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

import dlcheck
from dlcheck.integrations.lightning import RecorderCallback

STEPS_PER_EPOCH = 4  # 64 samples in batches of 16
TRAINER_OPTIONS = ("accumulate_grad_batches", "precision", "gradient_clip_val", "devices",
                   "strategy")
CLIP = 0.5  # below most steps' gradient norms, so that clipping acts


@pytest.fixture(autouse=True)
def lightning_on_torch_1_13(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 1.13's torch.distributed._shard cannot be imported on Python
    3.11 (a dataclass default that 3.11 refuses), and Lightning imports it
    in every LightningModule.__init__ to register ShardedTensor hooks
    these tests do not use: the hook is left out only where the import
    fails. Lightning's advice on dataloader workers is not under test."""
    try:
        import torch.distributed._shard  # noqa: F401
    except ValueError:
        monkeypatch.setattr(pl.LightningModule,
                            "_register_sharded_tensor_state_dict_hooks_if_available",
                            lambda self: None)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(64, 6, generator=gen), torch.randint(0, 3, (64,), generator=gen))


class Classifier(pl.LightningModule):
    """An MLP with BatchNorm (a buffer); SGD, a per-step StepLR so that the
    recorded lr changes within the run."""

    def __init__(self, lr: float = 0.1, fail_at: Optional[int] = None):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16),
                                       torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.lr, self.fail_at, self.calls = lr, fail_at, 0

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.calls == self.fail_at:
            raise ArithmeticError("injected failure")
        self.calls += 1
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def fit(path: Path, model: Optional[pl.LightningModule] = None, epochs: int = 2,
        **options: Any) -> RecorderCallback:
    trainer_options: dict[str, Any] = {"gradient_clip_val": CLIP, "devices": 1}
    trainer_options.update({k: options.pop(k) for k in options.copy()
                            if k in TRAINER_OPTIONS})
    cb = RecorderCallback(path, **options)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[cb],
                         **trainer_options)
    trainer.fit(model or Classifier(), DataLoader(dataset(), batch_size=16))
    return cb


def plain_loop(path: Path, epochs: int = 2, accumulate: int = 1) -> None:
    """The same training without Lightning, recorded by dlcheck.Recorder as
    the recorder's own documentation says."""
    model = Classifier()
    config = model.configure_optimizers()
    opt, sched = config["optimizer"], config["lr_scheduler"]["scheduler"]
    rec = dlcheck.Recorder(model, opt, path=path)
    for _ in range(epochs):
        total = 0.0
        for i, batch in enumerate(DataLoader(dataset(), batch_size=16)):
            if i % accumulate == 0:
                opt.zero_grad()
            loss = model.loss(batch) / accumulate
            loss.backward()
            total += float(loss)
            if (i + 1) % accumulate:
                continue
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            rec.step(total, grad_norm=norm)
            sched.step()
            total = 0.0
    rec.save()
    rec.close()


def test_a_fit_recorded_twice_compares_equal(tmp_path: Path, run_c) -> None:
    fit(tmp_path / "a.h5")
    fit(tmp_path / "b.h5")
    r = run_c("compare", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert r.returncode == 0, r.stdout + r.stderr
    t = dlcheck.read_trace(tmp_path / "a.h5")
    assert len(t.series["loss"]) == 2 * STEPS_PER_EPOCH
    assert t.series["lr"][:4].tolist() == [0.1, 0.1, 0.1, 0.05]  # StepLR(3, 0.5), as used
    assert "param/net.0.weight" in t.digest_names and "buffer/net.1.running_mean" in t.digest_names


def test_another_learning_rate_is_a_difference(tmp_path: Path, run_c) -> None:
    fit(tmp_path / "a.h5")
    fit(tmp_path / "b.h5", Classifier(lr=0.2))
    r = run_c("compare", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "lr" in r.stdout


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_callbacks_trace_is_the_plain_recorders(tmp_path: Path, run_c,
                                                    accumulate: int) -> None:
    fit(tmp_path / "lightning.h5", accumulate_grad_batches=accumulate)
    plain_loop(tmp_path / "plain.h5", accumulate=accumulate)
    a, b = dlcheck.read_trace(tmp_path / "lightning.h5"), dlcheck.read_trace(tmp_path / "plain.h5")
    assert len(a.series["loss"]) == 2 * STEPS_PER_EPOCH // accumulate
    for name in ("loss", "grad_norm", "grad_norm_clipped", "lr"):
        assert a.series[name].tolist() == b.series[name].tolist(), name
    assert a.digest_names == b.digest_names
    assert (a.digests == b.digests).all()
    assert a.series["grad_norm"].max() > CLIP  # clipping acted: the norm is the one before it
    r = run_c("compare", str(tmp_path / "lightning.h5"), str(tmp_path / "plain.h5"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_layer_statistics_metrics_and_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PL_GLOBAL_SEED", "7")  # what seed_everything(7) sets
    cb = fit(tmp_path / "a.h5", epochs=1, stats_steps=[0, 3], metrics=["train_loss", "val_acc"])
    t = dlcheck.read_trace(tmp_path / "a.h5")
    assert t.seed == 7
    assert [s.step for s in t.stats] == [0, 3]
    assert "net.0" in t.stats[0].layers and "grad net.3" in t.stats[0].layers
    assert t.metrics["train_loss"] == pytest.approx(t.series["loss"][-1], rel=1e-6)
    assert t.notes["metrics_not_logged"] == "val_acc"
    assert cb.recorder is None and not cb.recorded._hooks  # the hooks are gone after the fit


def test_bfloat16_mixed_precision_records_without_a_scaler(tmp_path: Path) -> None:
    fit(tmp_path / "a.h5", epochs=1, precision="bf16-mixed")
    t = dlcheck.read_trace(tmp_path / "a.h5")
    assert t.series["loss_scale"].tolist() == [1.0] * STEPS_PER_EPOCH
    assert not t.series["skipped"].any()


def test_an_interrupted_fit_is_written_and_marked(tmp_path: Path, run_c) -> None:
    with pytest.raises(ArithmeticError, match="injected failure"):
        fit(tmp_path / "cut.h5", Classifier(fail_at=5))
    t = dlcheck.read_trace(tmp_path / "cut.h5")
    assert len(t.series["loss"]) == 5
    assert t.notes["interrupted"] == ("Trainer.fit stopped by ArithmeticError: injected failure "
                                      "after 5 optimizer steps")
    fit(tmp_path / "whole.h5")
    r = run_c("compare", str(tmp_path / "whole.h5"), str(tmp_path / "cut.h5"))
    assert r.returncode == 1, r.stdout + r.stderr


def test_a_fit_without_steps_says_so(tmp_path: Path) -> None:
    with pytest.raises(ArithmeticError):  # the first training_step fails: nothing to write
        fit(tmp_path / "none.h5", Classifier(fail_at=0))
    assert not (tmp_path / "none.h5").exists()
    with pytest.raises(RuntimeError, match="made no optimizer step"):
        fit(tmp_path / "none.h5", epochs=0)


def test_what_it_cannot_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RecorderCallback(tmp_path / "missing" / "a.h5")
    with pytest.raises(TypeError, match="list of names"):
        RecorderCallback(tmp_path / "a.h5", metrics="train_loss")

    class Manual(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.loss(batch))
            opt.step()

    with pytest.raises(RuntimeError, match="manual optimization"):
        fit(tmp_path / "a.h5", Manual(), gradient_clip_val=None)


def test_data_parallel_fit_is_written_by_rank_0(tmp_path: Path) -> None:
    """Two CPU processes (gloo): the ranks' digests are gathered, and one
    file is written. The parameters agree; BatchNorm's running statistics
    do not, rightly: each rank's last forward updated them from its own
    batch, and DDP broadcasts rank 0's only before the next forward."""
    fit(tmp_path / "ddp.h5", epochs=1, check_ranks=True, devices=2, strategy="ddp_spawn")
    t = dlcheck.read_trace(tmp_path / "ddp.h5")
    assert len(t.series["loss"]) == STEPS_PER_EPOCH // 2  # each rank takes half the batches
    assert t.metrics["rank_param_mismatch"] == 0 and t.metrics["rank_buffer_mismatch"] == 2
    assert t.notes["rank_mismatch"].startswith("buffer/net.1.running_mean, buffer/net.1.running_var")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp.h5"]
