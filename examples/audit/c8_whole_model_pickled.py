"""Digits classifier (backbone and head) with Adam. Pitfall C8: the
checkpoint stores the model object itself, torch.save({"model": model, ...}),
which pickles a reference to common.Classifier and its attributes rather
than the tensors: the resume below works today, but every old checkpoint
stops loading once Classifier is renamed, moved or changed (the fixed twin,
c8_whole_model_pickled_fixed.py, saves model.state_dict())."""
import torch

from common import Classifier, batches, evaluate, train, train_step  # noqa: F401


def make_model():
    return Classifier(48)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model, "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"].state_dict())
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
