"""Regressing the digit's value from raw 0..16 pixel intensities (sklearn's
scale) with an MLP, MSE and SGD with momentum. Pitfall N1: no gradient
clipping, so the first large gradients explode and the loss becomes
inf/NaN within a few steps (the fixed twin: n1_exploding_gradients_fixed.py)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import batches, train  # noqa: F401

AUDIT = {"steps": 8}


def make_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 1))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def regression_loss(model, x, y):
    return F.mse_loss(model(x * 16).squeeze(1), y.float())


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = regression_loss(model, x, y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals())
