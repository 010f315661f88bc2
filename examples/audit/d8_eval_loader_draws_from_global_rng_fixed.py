"""d8_eval_loader_draws_from_global_rng.py with its pitfall fixed: the
evaluation's DataLoader has its own torch.Generator, so it leaves the
global RNG (and training's dropout masks) alone."""
import torch
from torch.utils.data import DataLoader

from common import digits, train
from d8_eval_loader_draws_from_global_rng import (accuracy, batches, make_model,  # noqa: F401
                                                  make_optimizer, train_step)


def evaluate(model):
    return accuracy(model, DataLoader(digits("test"), batch_size=256,
                                      generator=torch.Generator().manual_seed(0)))


if __name__ == "__main__":
    train(globals())
