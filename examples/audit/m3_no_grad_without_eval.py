"""Digits MLP with BatchNorm, AdamW, and m1's evaluation: under
torch.no_grad() but without model.eval(). Pitfall M3: BatchNorm keeps
updating its running statistics from the test set, silently (each
evaluation normalises with the batch's own statistics, so two evaluations
still agree and nothing looks wrong) (the fixed twin:
m3_no_grad_without_eval_fixed.py)."""
import torch

from common import batches, mlp, train, train_step  # noqa: F401
from m1_eval_without_eval_mode import evaluate  # noqa: F401  (no model.eval())


def make_model():
    return mlp(32, batchnorm=True)


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=2e-3)


if __name__ == "__main__":
    train(globals())
