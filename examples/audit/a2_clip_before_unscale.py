"""Digits MLP with mixed precision: bfloat16 autocast on the CPU (float16
on a GPU) and a GradScaler, gradients clipped to norm 1. Pitfall A2: the
gradients are clipped before scaler.unscale_(), so the clip sees them
multiplied by the loss scale and cuts every update down to almost nothing
(the fixed twin: a2_clip_before_unscale_fixed.py)."""
import torch
import torch.nn.functional as F

from common import DEVICE, DTYPE, batches, evaluate, mlp, train  # noqa: F401
from dlcheck.audit import CpuGradScaler


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def make_scaler():
    return torch.cuda.amp.GradScaler() if DEVICE == "cuda" else CpuGradScaler(init_scale=2.0 ** 12)


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(DEVICE, dtype=DTYPE):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss


if __name__ == "__main__":
    train(globals())
