"""Digits MLP with mixed precision: bfloat16 autocast on the CPU (float16
on a GPU) and a GradScaler, under SGD. Pitfall A6: the step scales the
loss but then calls optimizer.step() itself, bypassing scaler.step() and
scaler.update(): every update is the loss scale (4096) times too large
and the scale never adapts (the fixed twin:
a6_optimizer_step_bypasses_scaler_fixed.py)."""
import torch
import torch.nn.functional as F

from common import DEVICE, DTYPE, batches, evaluate, mlp, train  # noqa: F401
from dlcheck.audit import CpuGradScaler


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


def make_scaler():
    return torch.cuda.amp.GradScaler() if DEVICE == "cuda" else CpuGradScaler(init_scale=2.0 ** 12)


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
