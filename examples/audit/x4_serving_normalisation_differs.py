"""Digits MLP, Adam, trained on inputs standardised with the training set's
mean and standard deviation (preprocess), deployed as TorchScript behind a
serving function. Pitfall X4: the serving code normalises with constants
copied from another project, (raw - 0.5) / 0.5: the served model sees
inputs on another scale than it was trained on (the fixed twin:
x4_serving_normalisation_differs_fixed.py)."""
import torch

from common import accumulate, batches, digits, mlp, train  # noqa: F401

_x = digits("train").tensors[0]
MEAN, STD = float(_x.mean()), float(_x.std())


def preprocess(raw):
    return (raw - MEAN) / STD


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(model, optimizer, micro_batches):
    return accumulate(model, optimizer, [(preprocess(x), y) for x, y in micro_batches])


def export(model, example_batch, path):
    x, _ = example_batch
    model.eval()
    with torch.no_grad():
        torch.jit.trace(model, preprocess(x)).save(path)
    return path


def serve(path):
    model = torch.jit.load(path)

    def predict(raw):
        with torch.no_grad():
            return model((raw - 0.5) / 0.5)
    return predict


if __name__ == "__main__":
    train(globals())
