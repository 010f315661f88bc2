"""Digits MLP with Adam under a linear learning-rate warm-up, checkpointed
so that a preempted job can resume. Pitfall C7: the project's checkpoint
helper (common.py's, written before the schedule was added) holds the
weights, the optimizer and the RNG state but not the scheduler's, so after
a resume the fresh scheduler starts the warm-up again from its first step
(the fixed twin: c7_scheduler_state_not_saved_fixed.py)."""
import torch

from common import (batches, evaluate, load_checkpoint, mlp, save_checkpoint,  # noqa: F401
                    train, train_step)

#: steps over which the learning rate climbs linearly to its full value
WARMUP = 8


def make_model():
    return mlp(48)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def warmup(step):
    return min(1.0, (step + 1) / WARMUP)


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup)


if __name__ == "__main__":
    train(globals())
