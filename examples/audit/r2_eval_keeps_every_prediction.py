"""Digits MLP, Adam. Pitfall R2: evaluate() (in eval mode, under
torch.no_grad(): nothing wrong with the evaluation itself) collects the
predictions for a confusion matrix in a list that outlives it, so every
evaluation adds the whole test split's logits to what stays in memory
(the fixed twin: r2_eval_keeps_every_prediction_fixed.py)."""
import torch
import torch.nn.functional as F

from common import batches, digits, mlp, train, train_step  # noqa: F401

#: the logits of the test split, batch by batch, for the confusion matrix
PREDICTIONS = []


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def evaluate(model, predictions=PREDICTIONS):
    x, y = digits("test").tensors
    model.eval()
    with torch.no_grad():
        for xb in x.split(64):
            predictions.append(model(xb))
        logits = torch.cat(predictions[-len(x.split(64)):])
    model.train()
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "loss": float(F.cross_entropy(logits, y))}


if __name__ == "__main__":
    train(globals())
