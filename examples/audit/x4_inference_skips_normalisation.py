"""Digits MLP, Adam, trained on inputs standardised with the training set's
mean and standard deviation (preprocess, as in
x4_serving_normalisation_differs.py), with no export: the team's
inference code prepares a request with a transform of its own
(preprocess_for_inference). Pitfall X4: that transform only casts to
float32 and forgets the standardisation, so the model predicts on inputs
on another scale than it was trained on (the fixed twin:
x4_inference_skips_normalisation_fixed.py)."""
import torch

from common import train
from x4_serving_normalisation_differs import (batches, make_model, make_optimizer,  # noqa: F401
                                              preprocess, train_step)


def preprocess_for_inference(raw):
    return raw.to(torch.float32)


if __name__ == "__main__":
    train(globals())
