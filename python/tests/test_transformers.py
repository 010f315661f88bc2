"""dlcheck.integrations.transformers.RecorderCallback against Hugging Face
transformers (the version ci/deps.sh pins, which runs on Debian's torch
1.13): a training recorded twice compares equal, another learning rate does
not, and the callback's trace is the plain Recorder's trace of the same
loop, bit for bit (same CPU, same order of operations: no tolerance)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch.utils.data import DataLoader, Dataset, SequentialSampler

import dlcheck
from dlcheck.integrations.transformers import RecorderCallback

STEPS = 8  # 2 epochs of 64 samples in batches of 16
CLIP = 0.5  # below most steps' gradient norms, so that clipping acts


class Pairs(Dataset):
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(3)
        self.x, self.y = torch.randn(64, 6, generator=gen), torch.randint(0, 3, (64,), generator=gen)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


class Classifier(torch.nn.Module):
    """An MLP with BatchNorm (a buffer), returning its loss as a
    transformers model does."""

    def __init__(self, with_loss: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16),
                                       torch.nn.ReLU(), torch.nn.Linear(16, 3))
        self.with_loss = with_loss

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        out = {"logits": logits}
        if self.with_loss:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def sgd(model: torch.nn.Module, lr: float) -> tuple[Any, Any]:
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


class InOrder(transformers.Trainer):
    """The batches in the dataset's order, as the plain loop takes them."""

    def _get_train_sampler(self) -> SequentialSampler:
        return SequentialSampler(self.train_dataset)


def train(path: Path, tmp_path: Path, lr: float = 0.1, accumulate: int = 1,
          model: Any = None, **options: Any) -> None:
    model = model or Classifier()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), num_train_epochs=2, per_device_train_batch_size=16 // accumulate,
        gradient_accumulation_steps=accumulate, max_grad_norm=CLIP, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    InOrder(model=model, args=args, train_dataset=Pairs(), optimizers=sgd(model, lr),
            callbacks=[RecorderCallback(path, **options)]).train()


def plain_loop(path: Path, accumulate: int = 1) -> None:
    model = Classifier()
    opt, sched = sgd(model, 0.1)
    rec = dlcheck.Recorder(model, opt, path=path, seed=42)  # TrainingArguments' default
    for _ in range(2):
        losses = []
        for i, batch in enumerate(DataLoader(Pairs(), batch_size=16 // accumulate)):
            loss = model(**batch)["loss"]
            losses.append(float(loss))
            (loss / accumulate).backward()
            if (i + 1) % accumulate:
                continue
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            rec.step(sum(losses) / len(losses), grad_norm=norm)
            sched.step()
            model.zero_grad()
            losses = []
    rec.save()
    rec.close()


def test_a_training_recorded_twice_compares_equal(tmp_path: Path, run_c) -> None:
    train(tmp_path / "a.h5", tmp_path)
    train(tmp_path / "b.h5", tmp_path)
    r = run_c("compare", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert r.returncode == 0, r.stdout + r.stderr
    t = dlcheck.read_trace(tmp_path / "a.h5")
    assert len(t.series["loss"]) == STEPS and t.seed == 42  # TrainingArguments' default seed
    assert t.series["lr"][:4].tolist() == [0.1, 0.1, 0.1, 0.05]  # StepLR(3, 0.5), as used


def test_another_learning_rate_is_a_difference(tmp_path: Path, run_c) -> None:
    train(tmp_path / "a.h5", tmp_path)
    train(tmp_path / "b.h5", tmp_path, lr=0.2)
    r = run_c("compare", str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    assert r.returncode == 1, r.stdout + r.stderr


@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_callbacks_trace_is_the_plain_recorders(tmp_path: Path, run_c,
                                                    accumulate: int) -> None:
    train(tmp_path / "hf.h5", tmp_path, accumulate=accumulate)
    plain_loop(tmp_path / "plain.h5", accumulate=accumulate)
    a, b = dlcheck.read_trace(tmp_path / "hf.h5"), dlcheck.read_trace(tmp_path / "plain.h5")
    assert len(a.series["loss"]) == STEPS
    for name in ("loss", "grad_norm", "grad_norm_clipped", "lr"):
        assert a.series[name].tolist() == b.series[name].tolist(), name
    assert (a.digests == b.digests).all()
    assert a.series["grad_norm"].max() > CLIP  # clipping acted: the norm is the one before it
    r = run_c("compare", str(tmp_path / "hf.h5"), str(tmp_path / "plain.h5"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_layer_statistics_and_the_seed_given(tmp_path: Path) -> None:
    train(tmp_path / "a.h5", tmp_path, stats_steps=[0, 3], seed=7)
    t = dlcheck.read_trace(tmp_path / "a.h5")
    assert t.seed == 7 and [s.step for s in t.stats] == [0, 3]
    assert "net.0" in t.stats[0].layers and "grad net.3" in t.stats[0].layers


def test_what_it_cannot_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RecorderCallback(tmp_path / "missing" / "a.h5")
    with pytest.raises(RuntimeError, match="holds no 'loss'"):
        train(tmp_path / "a.h5", tmp_path, model=Classifier(with_loss=False))
