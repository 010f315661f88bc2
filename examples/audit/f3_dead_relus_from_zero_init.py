"""Digits MLP with a project-wide init_weights() that zero-initialises every
Linear layer so that training starts from a uniform prediction. Pitfall F3:
zeros in the hidden layer too make every ReLU dead from the first step (its
input is 0, and ReLU's gradient at 0 is 0): the hidden layers never get a
non-zero gradient and only the output bias learns (the fixed twin:
f3_dead_relus_from_zero_init_fixed.py)."""
import torch
import torch.nn as nn

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)


def make_model():
    model = mlp(32)
    init_weights(model)
    return model


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


if __name__ == "__main__":
    train(globals())
