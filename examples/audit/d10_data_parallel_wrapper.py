"""Digits MLP with Adam, trained data-parallel. Pitfall D10: the project's
wrapper is nn.DataParallel, one process scattering each batch over the
devices and gathering the outputs through one Python interpreter (GIL-bound,
the model replicated and its buffers copied from device 0 at every
forward); launched once per device by torchrun it averages nothing across
the processes and every rank trains alone (the fixed twin,
d10_data_parallel_wrapper_fixed.py, wraps in DistributedDataParallel)."""
import torch
import torch.nn as nn

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(48)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def wrap_ddp(model):
    return nn.DataParallel(model)


if __name__ == "__main__":
    train(globals())
