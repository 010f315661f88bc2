"""Digits classifier, SGD. Pitfall R1: the model keeps its hidden
features for a plot of how they evolve in training, appending them to a
list attribute at every training forward: each entry holds its forward's
autograd graph, and the list grows with every step (the fixed twin:
r1_forward_appends_to_list_fixed.py)."""
import torch
import torch.nn as nn

from common import batches, evaluate, train, train_step  # noqa: F401


class FeatureKeeper(nn.Module):
    """An MLP that remembers what its hidden layer computed in training."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 10)
        self.features = []

    def keep(self, h: torch.Tensor) -> None:
        self.features.append(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        if self.training:
            self.keep(h)
        return self.head(h)


def make_model(cls=FeatureKeeper):
    return cls()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


if __name__ == "__main__":
    train(globals())
