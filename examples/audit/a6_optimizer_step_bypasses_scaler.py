"""Digits MLP with mixed precision: bfloat16 autocast on the CPU (float16
on a GPU) and a GradScaler, under SGD. Pitfall A6: the step scales the
loss but then calls optimizer.step() itself, bypassing scaler.step() and
scaler.update(): every update is the loss scale (4096) times too large
and the scale never adapts (the fixed twin:
a6_optimizer_step_bypasses_scaler_fixed.py)."""
import torch
import torch.nn.functional as F

from a2_clip_before_unscale import make_model, make_scaler  # noqa: F401
from common import DEVICE, DTYPE, batches, evaluate, train  # noqa: F401


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(DEVICE, dtype=DTYPE):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals())
