"""Fine-tuning the head of a classifier whose backbone (with BatchNorm) is
frozen on purpose. Pitfall M4: model.train() at each step also puts the
frozen backbone's BatchNorm in training mode, so its running statistics
drift during fine-tuning (the fixed twin:
m4_frozen_batchnorm_in_train_mode_fixed.py)."""
import torch

from common import Classifier, accumulate, batches, evaluate, train  # noqa: F401

AUDIT = {"frozen": ["backbone."]}  # frozen on purpose: not an F1


def make_model():
    model = Classifier(batchnorm=True)
    model.backbone.requires_grad_(False)
    return model


def make_optimizer(model):
    return torch.optim.Adam(model.head.parameters(), lr=3e-3)


def train_step(model, optimizer, micro_batches):
    model.train()
    return accumulate(model, optimizer, micro_batches)


if __name__ == "__main__":
    train(globals())
