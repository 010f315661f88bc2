#!/usr/bin/python3
"""PyTorch's side of the scaling benchmark: the commands of
bench/bench_scaling.c with the same models, data, batches and optimizers,
answered the same way (bench/scaling.py runs both, interleaved).

  scaling_torch.py [--fixtures DIR] --serve      (one command a line on stdin)
  scaling_torch.py [--fixtures DIR] COMMAND...

  train mlp H | cnn C1,C2 | gpt E,L,HEADS,T,V,B  THREADS WARMUP STEPS [MAX_SECONDS]
      -> train FAMILY PARAMS THREADS STEPS SECONDS CPU_SECONDS LOSS -
     (MAX_SECONDS: warm-up and timed steps each stop after that long; STEPS
     in the answer is the number done. The engine has no such limit: its
     digests must come from the same steps.)
  gemm M N K THREADS SECONDS     -> gemm M N K THREADS GFLOPS (best repetition)
  conv N C O H W THREADS SECONDS -> conv N C O H W THREADS MS (best fwd + bwd)
  info                           -> info VERSION BLAS ...

Models: mlp and cnn are bench/torch_train.py's at H = 128 and C = 16,32;
gpt is fixtures/pytorch/make_reference.py's tiny_gpt, imported from there:
the module tests/test_conformance.c checks the engine against (Embedding,
learned positions, L pre-LayerNorm blocks of nn.MultiheadAttention
(batch_first=True, causal mask, need_weights=False) and Linear(E, 4E),
GELU, Linear(4E, E); LayerNorm, Linear(E, V)). SGD lr 0.05 momentum 0.9 for mlp and cnn, AdamW
lr 1e-3 for gpt; zero_grad(set_to_none=True) every step; batches gathered
by index from shuffled epochs (torch.randperm), the last short one dropped.
"""
import os
import re
import sys
import time

import h5py
import torch
from torch import nn

IMG_BATCH = 64
GPT_SEQS = 1024
GPT_PERIOD = 8
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
sys.path.insert(0, os.path.join(FIXTURES, "pytorch"))
from make_reference import tiny_gpt  # noqa: E402 -- the GPT test_conformance.c checks
from torch_train import cnn, mlp, set_threads  # noqa: E402 -- bench_train's models
M64 = (1 << 64) - 1


def gpt_data(t, v):
    """bench_scaling.c's gpt_dataset: per sequence i a pattern of 8 tokens
    from a 64-bit LCG seeded by i, repeated; targets shifted by one."""
    x = torch.empty(GPT_SEQS, t, dtype=torch.long)
    y = torch.empty(GPT_SEQS, t, dtype=torch.long)
    for i in range(GPT_SEQS):
        st = (i * 2654435761 + 12345) & M64
        pat = []
        for _ in range(GPT_PERIOD):
            st = (st * 6364136223846793005 + 1442695040888963407) & M64
            pat.append((st >> 33) % v)
        x[i] = torch.tensor([pat[j % GPT_PERIOD] for j in range(t)])
        y[i] = torch.tensor([pat[(j + 1) % GPT_PERIOD] for j in range(t)])
    return x, y


_data = {}


def dataset(family, p, fixtures):
    key = (family, tuple(p[3:5]) if family == "gpt" else ())
    if key not in _data:
        if family == "gpt":
            _data[key] = gpt_data(p[3], p[4])
        else:
            name = "digits.h5" if family == "mlp" else "fashion_mnist.h5"
            with h5py.File(os.path.join(fixtures, name), "r") as f:
                _data[key] = (torch.from_numpy(f["train/x"][...]),
                              torch.from_numpy(f["train/y"][...]).long())
    return _data[key]


class Trainer:
    def __init__(self, family, p, x, y):
        torch.manual_seed(0)
        if family == "mlp":
            self.model = mlp(*p)
        elif family == "cnn":
            self.model = cnn(*p)
        else:
            self.model = tiny_gpt(p[4], p[0], p[2], p[3], p[1])
        if family == "gpt":
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01)
            self.batch = p[5]
        else:
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
            self.batch = IMG_BATCH
        self.loss_fn = nn.CrossEntropyLoss()
        self.x, self.y = x, y
        self.pos = len(x)
        self.order = None

    def step(self):
        if self.pos + self.batch > len(self.x):
            self.order = torch.randperm(len(self.x))
            self.pos = 0
        idx = self.order[self.pos:self.pos + self.batch]
        self.pos += self.batch
        xb, yb = self.x[idx], self.y[idx]
        self.opt.zero_grad(set_to_none=True)
        out = self.model(xb)
        loss = self.loss_fn(out.reshape(-1, out.shape[-1]), yb.reshape(-1))
        loss.backward()
        self.opt.step()
        return loss


def cmd_train(family, ptext, threads, warmup, steps, fixtures, max_seconds=None):
    """`warmup` steps, then `steps` timed ones; with max_seconds, each of the
    two stops early after that long (at least 3 timed steps), and the line
    gives the steps done."""
    p = [int(v) for v in ptext.split(",")]
    set_threads(threads)
    x, y = dataset(family, p, fixtures)
    t = Trainer(family, p, x, y)
    limit = float("inf") if max_seconds is None else max_seconds
    t0 = time.perf_counter()
    for _ in range(warmup):
        t.step()
        if time.perf_counter() - t0 > limit:
            break
    t0, c0 = time.perf_counter(), time.process_time()
    loss, done = None, 0
    while done < steps:
        loss = t.step()
        done += 1
        if done >= 3 and time.perf_counter() - t0 > limit:
            break
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return (f"train {family} {ptext} {threads} {done} {secs:.6f} {cpu:.6f} "
            f"{loss.item() if loss is not None else float('nan'):.6f} -")


def best_time(fn, seconds):
    fn()
    best, start, reps = float("inf"), time.perf_counter(), 0
    while reps < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        reps += 1
    return best


def rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) - 0.5


def cmd_gemm(m, n, k, threads, seconds):
    set_threads(threads)
    a, b, c = rand(m, k, seed=1), rand(k, n, seed=2), torch.empty(m, n)
    with torch.no_grad():
        best = best_time(lambda: torch.matmul(a, b, out=c), seconds)
    return f"gemm {m} {n} {k} {threads} {2.0 * m * n * k / best * 1e-9:.3f}"


def cmd_conv(n, c, o, h, w, threads, seconds):
    set_threads(threads)
    torch.manual_seed(0)
    conv = nn.Conv2d(c, o, 3, padding=1)
    x = rand(n, c, h, w, seed=4).requires_grad_(True)
    dy = rand(n, o, h, w, seed=5)

    def once():
        x.grad = None
        conv.zero_grad(set_to_none=True)
        conv(x).backward(dy)

    best = best_time(once, seconds)
    return f"conv {n} {c} {o} {h} {w} {threads} {best * 1e3:.4f}"


def info():
    cfg = torch.__config__.show()
    blas = re.findall(r"BLAS_INFO=(\w+)", cfg)
    cap = re.findall(r"CPU capability usage: (\w+)", cfg)
    return (f"info torch={torch.__version__} blas={blas[0] if blas else '?'} "
            f"mkldnn={int(torch.backends.mkldnn.is_available())} isa={cap[0] if cap else '?'}")


def run(words, fixtures):
    cmd = words[0] if words else ""
    if cmd == "train" and len(words) in (6, 7):
        return cmd_train(words[1], words[2], int(words[3]), int(words[4]), int(words[5]), fixtures,
                         float(words[6]) if len(words) == 7 else None)
    if cmd == "gemm" and len(words) == 6:
        return cmd_gemm(*[int(v) for v in words[1:5]], float(words[5]))
    if cmd == "conv" and len(words) == 8:
        return cmd_conv(*[int(v) for v in words[1:7]], float(words[7]))
    if cmd == "info" and len(words) == 1:
        return info()
    raise ValueError(f"unknown command {' '.join(words)!r}")


def main(argv):
    fixtures = FIXTURES
    if len(argv) >= 2 and argv[0] == "--fixtures":
        fixtures, argv = argv[1], argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    torch.set_num_interop_threads(1)
    if argv[0] != "--serve":
        print(run(argv, fixtures), flush=True)
        return 0
    worst = 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            print(run(words, fixtures), flush=True)
        except Exception as e:  # noqa: BLE001 -- reported, the serve loop goes on
            print(f"scaling_torch.py: {e}", file=sys.stderr)
            print("error 3", flush=True)
            worst = 3
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
