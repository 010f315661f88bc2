"""Classifying digits from the pixels and each image column's log-energy (a
feature as audio and signal models use), an MLP under Adam. Pitfall N1,
its other form: torch.log of a column's energy, and almost every digit image has a
blank first column, so the first step takes log(0) = -inf and the loss is NaN.
Clipping gradients would not help; the fixed twin
(n1_log_of_zero_fixed.py) keeps the energy above a floor."""
import torch
import torch.nn as nn

from common import batches, train, train_step  # noqa: F401


def column_log_energy(x):
    return torch.log(x.pow(2).sum(-2)).flatten(1)


class ColumnEnergyNet(nn.Module):
    def __init__(self, features=column_log_energy):
        super().__init__()
        self.features = features
        self.body = nn.Sequential(nn.Linear(64 + 8, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.body(torch.cat([x.flatten(1), self.features(x)], 1))


def make_model():
    return ColumnEnergyNet()


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


if __name__ == "__main__":
    train(globals())
