"""x4_inference_skips_normalisation.py with its pitfall fixed: the
inference transform calls the training code's own preprocess."""
import torch

from common import train
from x4_inference_skips_normalisation import (batches, make_model, make_optimizer,  # noqa: F401
                                              preprocess, train_step)


def preprocess_for_inference(raw):
    return preprocess(raw.to(torch.float32))


if __name__ == "__main__":
    train(globals())
