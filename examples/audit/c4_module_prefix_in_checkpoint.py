"""Digits classifier trained through a DataParallel wrapper (the team's
multi-GPU setup; on the CPU it runs the module as it is). Pitfall C4: the
checkpoint saves the wrapper's state dict, whose keys all carry 'module.',
so loading it into the plain model for inference fails with unexpected
keys (the fixed twin: c4_module_prefix_in_checkpoint_fixed.py)."""
import torch
import torch.nn as nn

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return nn.DataParallel(mlp(48))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
