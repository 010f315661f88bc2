"""g1_no_zero_grad.py with its pitfall fixed: the gradients are zeroed after
each optimizer step."""
import torch.nn.functional as F

from common import train
from g1_no_zero_grad import batches, evaluate, make_model, make_optimizer  # noqa: F401


def train_step(model, optimizer, micro_batches):
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=2)
