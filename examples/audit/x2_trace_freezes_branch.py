"""Digits MLP whose forward boosts faint images (little ink: a pixel sum
under the training set's lower quartile) before classifying them, one
image at a time; AdamW; deployed as TorchScript. Pitfall X2:
torch.jit.trace records the branch each image of the example batch took
(and its 32-image loop): a held-out image gets the example image's
branch at its position, not its own, and a batch of another size fails
(the fixed twin: x2_trace_freezes_branch_fixed.py)."""
import torch
import torch.nn as nn

from common import batches, digits, export_traced, mlp, train, train_step  # noqa: F401


class FaintBoost(nn.Module):
    """Doubles the ink of images whose pixel sum is below `faint`."""

    def __init__(self, faint: float):
        super().__init__()
        self.faint = faint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = []
        for i in range(x.shape[0]):
            xi = x[i]
            if xi.sum() < self.faint:
                xi = xi * 2.0
            out.append(xi)
        return torch.stack(out)


def make_model():
    ink = digits("train").tensors[0].flatten(1).sum(1)
    return nn.Sequential(FaintBoost(float(ink.quantile(0.25))), mlp(64))


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=2e-3)


def export(model, example_batch, path):
    x, _ = example_batch
    return export_traced(model, x, path)


if __name__ == "__main__":
    train(globals())
