"""Digits MLP trained with DistributedDataParallel. Pitfall D1: the data
loader has no DistributedSampler, so every rank trains on the same
batches and the extra ranks add nothing (the fixed twin:
d1_no_distributed_sampler_fixed.py)."""
import torch

from common import evaluate, loader, mlp, train, train_step, wrap_ddp  # noqa: F401


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batches(seed, batch_size, rank=0, world_size=1):
    return loader(seed, batch_size, sampler=False)


if __name__ == "__main__":
    train(globals())
