"""n1_log_of_zero.py with its pitfall fixed: the column energy is kept above
a floor (1e-6) before its log, so a blank column gives a large negative
feature instead of -inf."""
import torch

from common import train
from n1_log_of_zero import ColumnEnergyNet, batches, make_optimizer, train_step  # noqa: F401


def column_log_energy(x):
    return torch.log(x.pow(2).sum(-2).clamp_min(1e-6)).flatten(1)


def make_model():
    return ColumnEnergyNet(column_log_energy)


if __name__ == "__main__":
    train(globals())
