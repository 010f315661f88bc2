"""Digits MLP, SGD with momentum, gradient accumulation over K micro-batches.
Pitfall G2: each micro-batch's loss is not divided by K, so every update is
K times too large (the fixed twin: g2_loss_not_divided_fixed.py)."""
import torch
import torch.nn.functional as F

from common import evaluate, loader, mlp, train


def make_model():
    return mlp()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batches(seed, batch_size):
    return loader(seed, batch_size)


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y)  # the mean over this micro-batch only
        loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=4)
