#!/usr/bin/python3
"""What dlcheck's recorder costs a PyTorch training loop: the same training
without it, with it (series and digests of every parameter and buffer after
every step; the default layer statistics at step 0 are left out of the
timing), and with layer statistics at every step,
interleaved in one run so that the machine's other load hits all three
alike.

    /usr/bin/python3 bench/recorder_overhead.py [--model mlp|cnn|all]
                                                [--steps N] [--rounds R]

Models and data as bench/torch_train.py: the digits MLP (64-128-128-10)
and the Fashion-MNIST CNN, batch 64, SGD lr 0.05 momentum 0.9, one thread.
Each round trains a fresh model for --steps steps in each mode, in turn;
the table gives the median ms/step over the rounds and the overhead of each
mode over the plain loop. The trace is written to a temporary folder and
its save time reported apart (once per run, not per step)."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import dlcheck  # noqa: E402

MODES = ("plain", "recorder", "recorder+stats")


def load(name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    with h5py.File(os.path.join(ROOT, "fixtures", f"{name}.h5"), "r") as f:
        return torch.from_numpy(f["train/x"][:]), torch.from_numpy(f["train/y"][:]).long()


def mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1568, 10))


MODELS: Dict[str, Tuple[Callable[[], nn.Module], str]] = {
    "mlp": (mlp, "digits"), "cnn": (cnn, "fashion_mnist")}


def train(model_fn: Callable[[], nn.Module], data: Tuple[torch.Tensor, torch.Tensor],
          steps: int, mode: str, out: str) -> Tuple[float, float]:
    """ms per step of the loop, and ms to save the trace (0 without one)."""
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rec: Optional[dlcheck.Recorder] = None
    if mode != "plain":
        rec = dlcheck.Recorder(model, opt, stats_every=1 if mode == "recorder+stats" else 0)
    x, y = data
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=gen)
    start = 0.0
    for step in range(steps + 1):
        if step == 1:  # step 0 (statistics in every mode) is not timed
            start = time.perf_counter()
        at = step * 64 % (len(x) - 63)
        rows = perm[at:at + 64]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        if rec:
            rec.step(loss)
    loop = (time.perf_counter() - start) * 1e3 / steps
    if not rec:
        return loop, 0.0
    start = time.perf_counter()
    rec.save(os.path.join(out, f"{mode}.h5"))
    rec.close()
    return loop, (time.perf_counter() - start) * 1e3


def bench(name: str, steps: int, rounds: int, out: str) -> None:
    model_fn, dataset = MODELS[name]
    data = load(dataset)
    times: Dict[str, List[float]] = {m: [] for m in MODES}
    saves: Dict[str, List[float]] = {m: [] for m in MODES}
    train(model_fn, data, 5, "plain", out)  # warm-up: allocator, kernels
    for _ in range(rounds):
        for mode in MODES:
            loop, save = train(model_fn, data, steps, mode, out)
            times[mode].append(loop)
            saves[mode].append(save)
    plain = statistics.median(times["plain"])
    for mode in MODES:
        ms = statistics.median(times[mode])
        print(f"{name:>5}  {mode:<15} {ms:9.3f} {100 * (ms / plain - 1):+9.1f}% "
              f"{statistics.median(saves[mode]):10.1f}")


def main(argv: List[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, 1 thread, {args.steps} steps x {args.rounds} rounds, "
          "median")
    print("# model mode             ms/step  overhead  save ms")
    with tempfile.TemporaryDirectory() as out:
        for name in (["mlp", "cnn"] if args.model == "all" else [args.model]):
            bench(name, args.steps if name == "mlp" else max(args.steps // 10, 5), args.rounds,
                  out)


if __name__ == "__main__":
    main(sys.argv[1:])
