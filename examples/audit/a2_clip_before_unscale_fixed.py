"""a2_clip_before_unscale.py with its pitfall fixed: scaler.unscale_() before
clipping, so the clip sees the true gradient norm."""
import torch
import torch.nn.functional as F

from a2_clip_before_unscale import (DEVICE, DTYPE, batches, evaluate, make_model,  # noqa: F401
                                    make_optimizer, make_scaler)
from common import train


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    for x, y in micro_batches:
        with torch.autocast(DEVICE, dtype=DTYPE):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
    return loss


if __name__ == "__main__":
    train(dict(globals(), train_step=lambda m, o, mb: train_step(m, o, mb, make_scaler())))
