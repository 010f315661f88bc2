"""Digits classifier with a learned temperature on the logits. Pitfall F2:
the optimizer is built from the sub-modules' parameters, and the
temperature, a parameter of the top module, is left out: it gets
gradients but never changes (the fixed twin: f2_param_not_in_optimizer_fixed.py)."""
import torch
import torch.nn as nn

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


class TemperedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp()
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return self.net(x) / self.log_temperature.exp()


def make_model():
    return TemperedMLP()


def make_optimizer(model):
    return torch.optim.Adam(model.net.parameters(), lr=1e-3)


if __name__ == "__main__":
    train(globals())
