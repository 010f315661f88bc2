"""Fine-tuning a classifier on the digits: the backbone is meant to train
with a smaller learning rate than the head. Pitfall F1: a leftover freeze
(requires_grad=False) from a linear-probe experiment keeps the backbone
frozen, so only the head trains (the fixed twin: f1_backbone_frozen_fixed.py)."""
import torch

from common import Classifier, batches, evaluate, train, train_step  # noqa: F401


def make_model():
    model = Classifier(batchnorm=False)
    for p in model.backbone.parameters():  # linear probe: train the head only
        p.requires_grad = False
    return model


def make_optimizer(model):
    return torch.optim.SGD([{"params": model.backbone.parameters(), "lr": 0.01},
                            {"params": model.head.parameters()}], lr=0.1, momentum=0.9)


if __name__ == "__main__":
    train(globals())
