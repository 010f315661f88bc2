#!/usr/bin/python3
"""A plain PyTorch training script: a small MLP on the digits fixture
(fixtures/digits.h5, 8x8 images, 10 classes), SGD with momentum, a few
epochs. The five lines marked `# dlcheck` record the run into a trace that
`dlcheck compare` reads; without them this is an ordinary training loop.

    pip install ./python       # or: export PYTHONPATH=$PWD/python
    /usr/bin/python3 examples/torch/train_digits.py --out run.h5
    /usr/bin/python3 examples/torch/train_digits.py --out other.h5 --amp bf16
    build/release/cli/dlcheck compare other.h5 run.h5

The options change what a team changes between two runs: the thread
count, TF32 and deterministic-algorithm flags, CPU autocast (bfloat16), the
learning rate."""
import argparse
import os
import sys

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dlcheck  # dlcheck


def parse_args(argv: list) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="run.h5", help="trace file to write (default run.h5)")
    p.add_argument("--data", default=os.path.join(ROOT, "fixtures", "digits.h5"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--tf32", action="store_true", help="allow TF32 matmuls and convolutions")
    p.add_argument("--nondeterministic", action="store_true",
                   help="leave torch.use_deterministic_algorithms off")
    p.add_argument("--amp", choices=["off", "bf16"], default="off",
                   help="CPU autocast to bfloat16 in the forward pass")
    return p.parse_args(argv)


def load(path: str) -> tuple:
    with h5py.File(path, "r") as f:
        return torch.from_numpy(f["train/x"][:]), torch.from_numpy(f["train/y"][:]).long()


def main(argv: list) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(not args.nondeterministic)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32

    x, y = load(args.data)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    order = torch.Generator().manual_seed(args.seed)
    rec = dlcheck.Recorder(model, optimizer, run="digits", stats_every=10)  # dlcheck

    for epoch in range(args.epochs):
        perm = torch.randperm(len(x), generator=order)
        for start in range(0, len(x) - args.batch + 1, args.batch):
            rows = perm[start:start + args.batch]
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
                loss = F.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            optimizer.step()
            rec.step(loss)  # dlcheck
        print(f"epoch {epoch}: loss {loss.item():.4f}")

    rec.note("command", " ".join(["train_digits.py"] + argv))  # dlcheck
    print(f"wrote {rec.save(args.out)}")  # dlcheck


if __name__ == "__main__":
    main(sys.argv[1:])
