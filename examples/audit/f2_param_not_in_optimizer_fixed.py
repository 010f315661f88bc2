"""f2_param_not_in_optimizer.py with its pitfall fixed: the optimizer takes
every parameter of the model."""
import torch

from common import train
from f2_param_not_in_optimizer import batches, evaluate, make_model, train_step  # noqa: F401


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


if __name__ == "__main__":
    train(globals())
