"""Digits MLP, Adam. Pitfall R1: train_step keeps every step's loss for
the training curve as the tensor backward ran on, so each one holds its
step's autograd graph alive: memory grows with every step (the fixed
twin: r1_loss_kept_with_graph_fixed.py)."""
import torch
import torch.nn.functional as F

from common import batches, evaluate, mlp, train  # noqa: F401

#: the training curve, plotted at the end of the run
LOSSES = []


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
        LOSSES.append(loss)
    optimizer.step()
    return sum(LOSSES[-len(micro_batches):])


if __name__ == "__main__":
    train(globals())
