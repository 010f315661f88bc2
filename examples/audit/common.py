"""The team's shared project code the example scripts import, as a real
project's data.py / models.py / train_utils.py would be: the digits
fixture (fixtures/digits.h5, 8x8 images, 10 classes), small models, a
sharded data stream, evaluation and checkpointing, all written correctly.
Each example script takes these pieces and gets exactly one of them wrong
(its *_fixed twin gets it right)."""
from __future__ import annotations

import functools
import os
from typing import Iterator, Optional

import h5py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

#: mixed precision as the team runs it: float16 autocast on a GPU, bfloat16 on the CPU
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.float16 if DEVICE == "cuda" else torch.bfloat16
DIGITS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures",
                      "digits.h5")


@functools.lru_cache(maxsize=2)
def digits(split: str) -> TensorDataset:
    """The digits fixture's split as (x float32 [n,1,8,8], y int64 [n])."""
    with h5py.File(DIGITS, "r") as f:
        x = torch.from_numpy(f[f"{split}/x"][:])
        y = torch.from_numpy(f[f"{split}/y"][:]).long()
    return TensorDataset(x, y)


def mlp(hidden: int = 32, *, dropout: float = 0.0, batchnorm: bool = False) -> nn.Module:
    layers = [nn.Flatten(), nn.Linear(64, hidden)]
    if batchnorm:
        layers.append(nn.BatchNorm1d(hidden))
    layers.append(nn.ReLU())
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, 10))
    return nn.Sequential(*layers)


class Classifier(nn.Module):
    """A backbone (pretrained, in a real project) and a head."""

    def __init__(self, hidden: int = 32, *, batchnorm: bool = True, dropout: float = 0.0):
        super().__init__()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden),
                                      *([nn.BatchNorm1d(hidden)] if batchnorm else []), nn.ReLU())
        self.head = nn.Sequential(*([nn.Dropout(dropout)] if dropout else []),
                                  nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def loader(seed: int, batch_size: int, *, rank: int = 0, world_size: int = 1, workers: int = 0,
           sampler: bool = True, set_epoch: bool = True) -> Iterator:
    """Batches of the training split, epoch after epoch: each rank its
    shard (DistributedSampler, reshuffled every epoch with set_epoch)."""
    data = digits("train")
    if sampler:
        s = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=seed,
                               drop_last=True)
        dl = DataLoader(data, batch_size=batch_size, sampler=s, drop_last=True,
                        num_workers=workers)
    else:
        s = None
        dl = DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True,
                        num_workers=workers, generator=torch.Generator().manual_seed(seed))
    epoch = 0
    while True:
        if s is not None and set_epoch:
            s.set_epoch(epoch)
        yield from dl
        epoch += 1


def accumulate(model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches: list,
               *, max_norm: Optional[float] = None) -> torch.Tensor:
    """One optimizer step over K micro-batches, written correctly: zero
    once, each micro-batch's loss divided by K, clip, step."""
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return torch.tensor(total)


def amp_step(model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches: list,
             scaler, *, max_norm: float = 1.0) -> torch.Tensor:
    """One mixed-precision optimizer step, written correctly: autocast
    forward, scaled backward, scaler.unscale_() before clipping, then the
    scaler's step and update."""
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(DEVICE, dtype=DTYPE):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss


def batches(seed: int, batch_size: int, rank: int = 0, world_size: int = 1,
            workers: int = 0) -> Iterator:
    """The adapter's batch source: loader() as the project uses it."""
    return loader(seed, batch_size, rank=rank, world_size=world_size, workers=workers)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches: list
               ) -> torch.Tensor:
    """The adapter's training step: accumulate() without clipping."""
    return accumulate(model, optimizer, micro_batches)


def wrap_ddp(model: nn.Module) -> nn.Module:
    """The adapter's data-parallel wrapper (gloo on the CPU: no device ids)."""
    return nn.parallel.DistributedDataParallel(model)


def evaluate(model: nn.Module) -> dict:
    """Accuracy and loss on the test split, in eval mode and without
    gradients; with a process group each rank takes its shard and the
    counts are summed over ranks."""
    data = digits("test")
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    rows = torch.arange(rank, len(data), world)
    model.eval()
    with torch.no_grad():
        x, y = data.tensors[0][rows], data.tensors[1][rows]
        logits = model(x)
        stats = torch.stack([(logits.argmax(1) == y).sum().double(),
                             F.cross_entropy(logits, y, reduction="sum").double(),
                             torch.tensor(float(len(rows)), dtype=torch.float64)])
    model.train()
    if world > 1:
        dist.all_reduce(stats)
    return {"accuracy": float(stats[0] / stats[2]), "loss": float(stats[1] / stats[2])}


def save_state(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, **parts) -> None:
    """The project's checkpoint: the model, the optimizer, the RNG state and
    the state_dict() of every other part named (scheduler=..., ...)."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                **{name: part.state_dict() for name, part in parts.items()}}, path)


def load_state(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, **parts) -> None:
    """Restores what save_state wrote into the model, the optimizer, the
    RNG and the parts named."""
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    for name, part in parts.items():
        part.load_state_dict(ckpt[name])
    torch.set_rng_state(ckpt["rng"])


def save_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    save_state(path, model, optimizer)


def load_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    load_state(path, model, optimizer)


def export_traced(model: nn.Module, x: torch.Tensor, path: str) -> str:
    """The project's TorchScript export, written correctly: eval mode, then
    torch.jit.trace at x, saved at path (returned)."""
    model.eval()
    with torch.no_grad():
        torch.jit.trace(model, x).save(path)
    return path


def train(adapter: dict, steps: int = 60, batch_size: int = 32, accumulation: int = 1) -> None:
    """The script's own training loop (what `python SCRIPT.py` runs): the
    adapter functions of the script, as the team trains with them."""
    torch.manual_seed(0)
    model = adapter["make_model"]()
    optimizer = adapter["make_optimizer"](model)
    scheduler = adapter["make_scheduler"](optimizer) if "make_scheduler" in adapter else None
    amp = {"scaler": adapter["make_scaler"]()} if "make_scaler" in adapter else {}
    data = adapter["batches"](0, batch_size)
    for step in range(steps):
        batch = next(data)
        micro = [tuple(t.chunk(accumulation)[i] for t in batch) for i in range(accumulation)]
        loss = adapter["train_step"](model, optimizer, micro, **amp)
        if scheduler is not None:
            scheduler.step()
        if step % 20 == 0 or step == steps - 1:
            print(f"step {step}: loss {float(loss):.4f}")
    if "evaluate" in adapter:
        print(f"evaluation: {adapter['evaluate'](model)}")
