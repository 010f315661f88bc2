"""Digits MLP with BatchNorm trained with DistributedDataParallel. Pitfall
D4: the wrapper is built with broadcast_buffers=False (to save a broadcast
per forward), so each rank's BatchNorm running statistics follow its own
shard and the replicas drift apart: the model rank 0 saves and evaluates is
not the one the other ranks hold (the fixed twin:
d4_buffers_not_broadcast_fixed.py, a correct DDP+BatchNorm pipeline)."""
import torch
import torch.nn as nn

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(48, batchnorm=True)


def make_optimizer(model):
    # Adam: plain SGD leaves the Linear bias before BatchNorm (true gradient 0) where it is
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def wrap_ddp(model):
    return nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)


if __name__ == "__main__":
    train(globals())
