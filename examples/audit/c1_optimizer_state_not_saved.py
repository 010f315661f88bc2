"""Digits MLP with Adam, checkpointed so that a preempted job can resume.
Pitfall C1: the checkpoint holds the weights and the RNG state but not the
optimizer's state, so Adam restarts its moment estimates after a resume
(the fixed twin: c1_optimizer_state_not_saved_fixed.py)."""
import torch

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(48)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
