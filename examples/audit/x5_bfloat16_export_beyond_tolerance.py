"""Digits as sensor readings: every pixel offset by 273.15 (a temperature in
kelvin, say), standardised inside the model with the training set's mean and
standard deviation so that serving takes raw readings; Adam; deployed as
TorchScript in bfloat16 to halve its size. The task's stated tolerance on
the served logits is 5% relative distance from the trained float32 model
(AUDIT["half_tolerance"]). Pitfall X5: bfloat16 keeps 8 bits of mantissa, so
a reading near 273 is rounded to a multiple of 2 before the model subtracts
the mean: the pixels' own values (0-1) are lost and the logits drift
far beyond 5% (the fixed twin:
x5_bfloat16_export_beyond_tolerance_fixed.py)."""
import torch
import torch.nn as nn

from common import batches as digit_batches
from common import digits, train, train_step  # noqa: F401

AUDIT = {"half_tolerance": 0.05}
OFFSET = 273.15


def batches(seed, batch_size, rank=0, world_size=1, workers=0):
    for x, y in digit_batches(seed, batch_size, rank, world_size, workers):
        yield x + OFFSET, y


class Standardize(nn.Module):
    """(x - mean) / std with the training set's statistics, kept in the model."""

    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean))
        self.register_buffer("std", torch.tensor(std))

    def forward(self, x):
        return (x - self.mean) / self.std


def make_model():
    x = digits("train").tensors[0] + OFFSET
    return nn.Sequential(Standardize(float(x.mean()), float(x.std())), nn.Flatten(),
                         nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def export(model, example_batch, path):
    x, _ = example_batch
    model.eval().to(torch.bfloat16)
    with torch.no_grad():
        torch.jit.trace(model, x.to(torch.bfloat16)).save(path)
    return path


if __name__ == "__main__":
    train(globals())
