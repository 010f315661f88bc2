"""Digits MLP with Adam and gradient accumulation. Pitfall G1: the gradients
are never zeroed, so every step's update carries all earlier steps'
gradients (the fixed twin: g1_no_zero_grad_fixed.py)."""
import torch
import torch.nn.functional as F

from common import evaluate, loader, mlp, train


def make_model():
    return mlp()


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def batches(seed, batch_size):
    return loader(seed, batch_size)


def train_step(model, optimizer, micro_batches):
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=2)
