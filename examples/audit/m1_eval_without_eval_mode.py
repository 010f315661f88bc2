"""Digits MLP with dropout, AdamW. Pitfall M1: the evaluation runs under
torch.no_grad() but without model.eval(), so dropout stays on and two
evaluations of the same model disagree (the fixed twin:
m1_eval_without_eval_mode_fixed.py)."""
import torch

from common import batches, digits, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64, dropout=0.3)


def make_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=2e-3)


def evaluate(model):
    x, y = digits("test").tensors
    with torch.no_grad():
        logits = model(x)
    return {"accuracy": float((logits.argmax(1) == y).float().mean())}


if __name__ == "__main__":
    train(globals())
