#!/usr/bin/python3
"""PyTorch's side of bench_train: the same two models, data, batch and
optimizer, timed the same way, so that bench/run.sh can put the engine's
steps/s next to PyTorch's.

  mlp  digits [N,1,8,8]: Flatten, Linear 64->128, ReLU, Linear 128->128,
       ReLU, Linear 128->10
  cnn  Fashion-MNIST [N,1,28,28]: Conv2d 1->16 3x3 pad 1, ReLU, MaxPool2d 2,
       Conv2d 16->32 3x3 pad 1, ReLU, MaxPool2d 2, Flatten, Linear 1568->10

Batch 64 from shuffled epochs (last short batch dropped), CrossEntropyLoss,
SGD lr 0.05 momentum 0.9, zero_grad(set_to_none=True) every step. For each
thread count (torch.set_num_threads, and OpenBLAS's): a fresh model, 20 warm-up steps, then
timed steps: about 2.5 s for the first thread count, the same number of
steps for the others (or --steps N).

  /usr/bin/python3 bench/torch_train.py [--model mlp|cnn|all] [--steps N]
                                        [--threads 1,2] [--fixtures DIR]

Prints one line per config: model threads steps seconds steps/s cpu_ms/step
(CPU time of the process, all threads, per step) loss.
"""
import argparse
import ctypes
import os
import sys
import time

import h5py
import torch
from torch import nn

BATCH = 64
LR = 0.05
WARMUP_STEPS = 20
TARGET_SECONDS = 2.5
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def mlp(h=128):
    """The mlp; bench/scaling_torch.py grows its width h."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, h), nn.ReLU(),
                         nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))


def cnn(c1=16, c2=32):
    """The cnn; bench/scaling_torch.py grows its channels c1, c2."""
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(c2 * 7 * 7, 10))


MODELS = {"mlp": (mlp, "digits.h5"), "cnn": (cnn, "fashion_mnist.h5")}


def set_threads(n):
    """torch.set_num_threads(n), and OpenBLAS's count as well: a torch built
    with BLAS_INFO=generic (Debian's, whose libblas is OpenBLAS) does not
    pass it on, so its "1 thread" GEMMs ran on every core."""
    torch.set_num_threads(n)
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "libopenblas" in line}
    for lib in sorted(libs):
        fn = getattr(ctypes.CDLL(lib), "openblas_set_num_threads", None)
        if fn is not None:
            fn(n)


def load_train(path):
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(f["train/x"][...])
        y = torch.from_numpy(f["train/y"][...]).long()
    return x, y


class Trainer:
    """PyTorch's usual loop over shuffled, batch-sized index slices."""

    def __init__(self, make_model, x, y):
        torch.manual_seed(0)
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        self.x, self.y = x, y
        self.order = None
        self.pos = len(x)
        self.loss = float("nan")

    def step(self):
        if self.pos + BATCH > len(self.x):
            self.order = torch.randperm(len(self.x))
            self.pos = 0
        idx = self.order[self.pos:self.pos + BATCH]
        self.pos += BATCH
        xb, yb = self.x[idx], self.y[idx]
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss


def run_config(make_model, x, y, threads, steps):
    """Warm-up, then `steps` timed steps (0: for TARGET_SECONDS)."""
    set_threads(threads)
    t = Trainer(make_model, x, y)
    for _ in range(WARMUP_STEPS):
        t.step()
    done, elapsed, t0, cpu0 = 0, 0.0, time.perf_counter(), time.process_time()
    loss = None
    while (done < steps) if steps > 0 else (elapsed < TARGET_SECONDS):
        loss = t.step()
        done += 1
        elapsed = time.perf_counter() - t0
    return done, elapsed, time.process_time() - cpu0, float(loss)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--fixtures", default=FIXTURES)
    a = p.parse_args(argv)
    try:
        a.threads = [int(t) for t in a.threads.split(",")]
    except ValueError:
        p.error("--threads takes a list like 1,2")
    if any(t < 1 for t in a.threads) or a.steps < 0:
        p.error("--threads and --steps take positive integers")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_interop_threads(1)
    print(f"# torch_train: PyTorch {torch.__version__} training throughput, batch {BATCH},"
          f" SGD momentum 0.9, lr {LR}, {WARMUP_STEPS} warm-up steps")
    print(f"{'model':5} {'threads':>7} {'steps':>7} {'seconds':>9} {'steps/s':>10}"
          f" {'cpu_ms/step':>12} {'loss':>9}")
    names = ["mlp", "cnn"] if a.model == "all" else [a.model]
    for name in names:
        make_model, fixture = MODELS[name]
        x, y = load_train(os.path.join(a.fixtures, fixture))
        steps = a.steps
        for threads in a.threads:
            done, secs, cpu, loss = run_config(make_model, x, y, threads, steps)
            steps = done
            print(f"{name:5} {threads:7d} {done:7d} {secs:9.3f} {done / secs:10.1f}"
                  f" {1e3 * cpu / done:12.3f} {loss:9.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
