"""Digits MLP with BatchNorm and dropout, AdamW, deployed as TorchScript.
Pitfall X1: export() traces the model as training leaves it, in training
mode: dropout stays on in the graph and BatchNorm normalises each served
batch with its own statistics (the fixed twin:
x1_export_in_train_mode_fixed.py)."""
import torch

from common import batches, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64, dropout=0.2, batchnorm=True)


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=2e-3)


def export(model, example_batch, path):
    x, _ = example_batch
    with torch.no_grad():
        torch.jit.trace(model, x, check_trace=False).save(path)
    return path


if __name__ == "__main__":
    train(globals())
