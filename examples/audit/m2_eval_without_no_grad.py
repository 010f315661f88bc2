"""Digits MLP, SGD. Pitfall M2: the evaluation switches to eval mode but
not to torch.no_grad(), so autograd keeps every activation of the test
set for a backward that never comes (the fixed twin:
m2_eval_without_no_grad_fixed.py)."""
import torch
import torch.nn.functional as F

from common import batches, digits, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def evaluate(model):
    x, y = digits("test").tensors
    model.eval()
    logits = model(x)
    model.train()
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "loss": float(F.cross_entropy(logits, y))}


if __name__ == "__main__":
    train(globals())
