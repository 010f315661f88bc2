"""Digits MLP trained with DistributedDataParallel and a DistributedSampler.
Pitfall D2: sampler.set_epoch() is never called, so every epoch visits the
shard in the same order (the fixed twin: d2_no_set_epoch_fixed.py)."""
import torch

from common import evaluate, loader, mlp, train, train_step, wrap_ddp  # noqa: F401


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=2e-3)


def batches(seed, batch_size, rank=0, world_size=1):
    return loader(seed, batch_size, rank=rank, world_size=world_size, set_epoch=False)


if __name__ == "__main__":
    train(globals())
