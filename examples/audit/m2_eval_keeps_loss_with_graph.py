"""Digits MLP, SGD. Pitfall M2, kept: evaluate() runs with autograd on and
keeps each evaluation's loss tensor for early stopping, so every
evaluation's graph, with its activations of the whole test split, stays
alive: memory grows with every evaluation (the fixed twin:
m2_eval_keeps_loss_with_graph_fixed.py)."""
import torch
import torch.nn.functional as F

from common import batches, digits, mlp, train, train_step  # noqa: F401

#: every evaluation's loss, for early stopping
HISTORY = []


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def evaluate(model):
    x, y = digits("test").tensors
    model.eval()
    logits = model(x)
    HISTORY.append(F.cross_entropy(logits, y))
    model.train()
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "loss": float(HISTORY[-1]), "best": float(min(HISTORY))}


if __name__ == "__main__":
    train(globals())
