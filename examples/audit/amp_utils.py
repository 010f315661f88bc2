"""The team's mixed-precision helpers, a module of their own that the
training scripts import by name (as a real project's train_utils.py):
gradient clipping with `clip_grad_norm_` imported from torch.nn.utils, so
that a call to it is not written `torch.nn.utils.clip_grad_norm_` anywhere
in the script. Used by a2_clip_in_team_module.py and its fixed twin."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

from common import DEVICE, DTYPE


def scaled_backward(model: nn.Module, micro_batches: list, scaler) -> torch.Tensor:
    """Autocast forward and scaled backward of every micro-batch, each loss
    divided by the micro-batch count; returns the last loss."""
    for x, y in micro_batches:
        with torch.autocast(DEVICE, dtype=DTYPE):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
    return loss


def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Clips the model's gradients to max_norm; returns their norm before."""
    return clip_grad_norm_(model.parameters(), max_norm)


def scaler_step(optimizer: torch.optim.Optimizer, scaler) -> None:
    """The optimizer step through the scaler (skipped on inf/NaN), then the
    scale's update."""
    scaler.step(optimizer)
    scaler.update()
