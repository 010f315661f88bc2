"""Data parallel: 2 gloo processes on the CPU, DistributedDataParallel.
Rank 0 writes the one file; check_ranks reports diverged parameters."""
from __future__ import annotations

import datetime
import faulthandler
import json
import os
import socket
import time

import pytest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dlcheck import Recorder, read_trace

WORLD = 2
TIMEOUT = datetime.timedelta(seconds=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_and_save(rank: int, out: str) -> None:
    torch.manual_seed(0)  # the same initial weights; DDP broadcasts rank 0's anyway
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    rec = Recorder(ddp, opt, run="ddp", check_ranks=True)
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    for _ in range(2):
        x, y = torch.randn(8, 8, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        rec.step(loss)
    # every rank calls save(); only rank 0 writes (rank 1's own path stays absent)
    same = rec.save(os.path.join(out, f"same{rank}.h5"))
    if rank == 1:
        with torch.no_grad():
            model[2].bias.add_(1.0)  # a deliberately diverged rank
    diverged = rec.save(os.path.join(out, f"diverged{rank}.h5"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"same": same, "diverged": diverged}, f)


def worker(rank: int, port: int, out: str, diag: str) -> None:
    # A hang dumps this rank's stack into diag and exits, so the test fails with it.
    stack = open(os.path.join(diag, f"stack{rank}.txt"), "w")
    faulthandler.dump_traceback_later(TIMEOUT.total_seconds() + 15, exit=True, file=stack)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # a lost peer fails the collectives after TIMEOUT instead of hanging the suite
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=TIMEOUT)
    try:
        train_and_save(rank, out)  # DDP's reducer is gone before the group is
        dist.barrier()
    finally:
        dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()


def test_ddp_rank0_writes_and_diverged_ranks_are_reported(tmp_path, run_c):
    out, diag = tmp_path / "out", tmp_path / "diag"
    out.mkdir()
    diag.mkdir()
    ctx = mp.spawn(worker, args=(free_port(), str(out), str(diag)), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 2 * TIMEOUT.total_seconds() + 30
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:  # pragma: no cover - only when something hangs
            for p in ctx.processes:
                p.kill()
            stacks = "\n".join(f.read_text() for f in sorted(diag.iterdir()))
            pytest.fail(f"the 2 DDP processes did not finish in time:\n{stacks}")
    assert sorted(os.listdir(out)) == ["diverged0.h5", "rank0.json", "rank1.json", "same0.h5"]
    r1 = json.loads((out / "rank1.json").read_text())
    assert r1["same"].endswith("same1.h5")  # returned, not written
    same = read_trace(out / "same0.h5")
    assert same.digest_names[0] == "param/0.weight"  # inner keys, no "module."
    assert same.metrics["rank_param_mismatch"] == 0 and same.steps == 2
    diverged = read_trace(out / "diverged0.h5")
    assert diverged.metrics["rank_param_mismatch"] == 1
    assert diverged.notes["rank_mismatch"].startswith("param/2.bias differ across 2 ranks")
    path = str(out / "same0.h5")
    assert run_c("compare", path, path).returncode == 0
