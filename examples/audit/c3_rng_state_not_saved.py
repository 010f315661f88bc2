"""Digits MLP with dropout, SGD with momentum, checkpointed for resuming.
Pitfall C3: the checkpoint holds model and optimizer but not torch's RNG
state, so after a resume dropout draws other masks than the run that was
never interrupted (the fixed twin: c3_rng_state_not_saved_fixed.py)."""
import torch

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64, dropout=0.2)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])


if __name__ == "__main__":
    train(globals())
