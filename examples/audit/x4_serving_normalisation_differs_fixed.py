"""x4_serving_normalisation_differs.py with its pitfall fixed: serving
imports the training code's own preprocess instead of copying constants."""
import torch

from common import train
from x4_serving_normalisation_differs import (batches, export, make_model,  # noqa: F401
                                              make_optimizer, preprocess, train_step)


def serve(path):
    model = torch.jit.load(path)

    def predict(raw):
        with torch.no_grad():
            return model(preprocess(raw))
    return predict


if __name__ == "__main__":
    train(globals())
