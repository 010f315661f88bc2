#!/usr/bin/python3
"""Ways of counting what a training step (or an evaluation) leaves alive,
compared on torch's CPU build: the measurement behind the audit's memory
family (python/dlcheck/audit/families/memory.py).

    /usr/bin/python3 bench/memory_census.py [--steps N]

An MLP 64-64-10 with Adam on batches of 32 (a random tensor dataset), in
six cases: a correct step; the loss kept in a list as the tensor backward
ran on (its graph alive); the loss kept detached; a forward that appends
its hidden activation, graph and all, to a list attribute; a correct
evaluation (no_grad); an evaluation with autograd on whose outputs are
kept. Each method measures after every call; the table gives the call's
time and the measurement's (ms, mean over the calls) and the differences
of the measured value between consecutive calls.

  gc_bytes  storage bytes of the tensors gc.get_objects() finds (gc.collect() first)
  nodes     autograd nodes reachable from those tensors' grad_fn
  saved     bytes of saved-for-backward tensors still alive (saved_tensors_hooks
            whose pack keeps a weakref to each tensor)
  profiler  bytes the CPU memory profiler saw allocated and not freed in the call
            (the sum of its events' self_cpu_memory_usage)"""
from __future__ import annotations

import argparse
import gc
import time
import weakref
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

KEPT: list = []


class Net(nn.Module):
    def __init__(self, keep: bool):
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 10)
        self.keep, self.seen = keep, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.a(x))
        if self.keep:
            self.seen.append(h)
        return self.b(h)


def train_call(case: str, model: Net, opt: torch.optim.Optimizer, x, y) -> Callable[[int], None]:
    def step(i: int) -> None:
        xb, yb = x[i % 8 * 32:][:32], y[i % 8 * 32:][:32]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if case == "loss_kept":
            KEPT.append(loss)
        elif case == "loss_detached":
            KEPT.append(loss.detach())
    return step


def eval_call(case: str, model: Net, x) -> Callable[[int], None]:
    def evaluate(i: int) -> None:
        if case == "eval_kept":
            KEPT.append(model(x))
        else:
            with torch.no_grad():
                model(x)
    return evaluate


def tensors() -> list:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]


def gc_bytes() -> int:
    return sum({t.storage().data_ptr(): t.storage().nbytes() for t in tensors()}.values())


def nodes() -> int:
    stack, seen = [t.grad_fn for t in tensors() if t.grad_fn is not None], {}
    while stack:
        n = stack.pop()
        if n is not None and id(n) not in seen:
            seen[id(n)] = n
            stack.extend(f for f, _ in n.next_functions)
    return len(seen)


class Saved:
    def __init__(self):
        self.refs: list = []

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.refs.append((weakref.ref(t), t.numel() * t.element_size()))
        return t

    def alive(self) -> int:
        gc.collect()
        self.refs = [(r, b) for r, b in self.refs if r() is not None]
        return sum(b for _, b in self.refs)


def run(case: str, method: str, steps: int) -> tuple:
    KEPT.clear()
    torch.manual_seed(0)
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    model = Net(keep=case == "forward_kept")
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    call = eval_call(case, model, x) if case.startswith("eval") else \
        train_call(case, model, opt, x, y)
    saved, values, t_call, t_measure, total = Saved(), [], 0.0, 0.0, 0
    for i in range(steps):
        t0 = time.perf_counter()
        if method == "saved":
            with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda t: t):
                call(i)
        elif method == "profiler":
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                        profile_memory=True) as p:
                call(i)
        else:
            call(i)
        t1 = time.perf_counter()
        if method == "profiler":
            total += sum(e.self_cpu_memory_usage for e in p.events())
            values.append(total)
        else:
            values.append({"gc_bytes": gc_bytes, "nodes": nodes, "saved": saved.alive}[method]())
        t_call, t_measure = t_call + t1 - t0, t_measure + time.perf_counter() - t1
    return (t_call / steps * 1e3, t_measure / steps * 1e3,
            [b - a for a, b in zip(values, values[1:])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'case':14s} {'method':9s} {'call ms':>8s} {'measure ms':>10s}  differences")
    for case in ("clean", "loss_kept", "loss_detached", "forward_kept", "eval_ok", "eval_kept"):
        for method in ("gc_bytes", "nodes", "saved", "profiler"):
            call_ms, measure_ms, diffs = run(case, method, args.steps)
            print(f"{case:14s} {method:9s} {call_ms:8.2f} {measure_ms:10.2f}  {diffs}")


if __name__ == "__main__":
    main()
