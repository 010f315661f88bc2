"""f3_dead_relus_from_zero_init.py with its pitfall fixed: every Linear
layer's weight gets He (Kaiming) initialisation for ReLU (the biases keep
PyTorch's default), so the hidden ReLUs start alive."""
import torch.nn as nn

from common import mlp, train
from f3_dead_relus_from_zero_init import batches, evaluate, make_optimizer, train_step  # noqa: F401


def init_weights(model):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")


def make_model():
    model = mlp(32)
    init_weights(model)
    return model


if __name__ == "__main__":
    train(globals())
