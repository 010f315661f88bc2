"""m2_eval_without_no_grad.py with its pitfall fixed: evaluation under
torch.no_grad()."""
import torch
import torch.nn.functional as F

from common import digits, train
from m2_eval_without_no_grad import batches, make_model, make_optimizer, train_step  # noqa: F401


@torch.no_grad()
def evaluate(model):
    x, y = digits("test").tensors
    model.eval()
    logits = model(x)
    model.train()
    return {"accuracy": float((logits.argmax(1) == y).float().mean()),
            "loss": float(F.cross_entropy(logits, y))}


if __name__ == "__main__":
    train(globals())
