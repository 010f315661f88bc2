"""m2_eval_keeps_loss_with_graph.py with its pitfall fixed: evaluate()
runs under torch.no_grad() and keeps each loss as a number."""
import torch
import torch.nn.functional as F

from common import digits, train
from m2_eval_keeps_loss_with_graph import (batches, make_model, make_optimizer,  # noqa: F401
                                           train_step)

HISTORY = []


def evaluate(model):
    x, y = digits("test").tensors
    model.eval()
    with torch.no_grad():
        logits = model(x)
        HISTORY.append(F.cross_entropy(logits, y).item())
    model.train()
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "loss": HISTORY[-1], "best": min(HISTORY)}


if __name__ == "__main__":
    train(globals())
