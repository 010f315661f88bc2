"""Digits MLP with dropout, evaluated every few steps through a DataLoader
over the test split (in eval mode, without gradients, not shuffled).
Pitfall D8: every DataLoader iterator draws its base seed from torch's
global RNG, the stream dropout uses in training, so turning evaluation on
changes every later dropout mask (the fixed twin:
d8_eval_loader_draws_from_global_rng_fixed.py)."""
import torch
from torch.utils.data import DataLoader

from common import batches, digits, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64, dropout=0.2)


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=2e-3)


def accuracy(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += int((model(x).argmax(1) == y).sum())
            total += len(y)
    model.train()
    return {"accuracy": correct / total}


def evaluate(model):
    return accuracy(model, DataLoader(digits("test"), batch_size=256))


if __name__ == "__main__":
    train(globals())
