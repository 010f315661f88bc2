"""g3_zero_grad_in_micro_loop.py with its pitfall fixed: the gradients are
zeroed once per optimizer step, before the micro-batch loop."""
import torch
import torch.nn.functional as F

from common import train
from g3_zero_grad_in_micro_loop import batches, evaluate, make_model, make_optimizer  # noqa: F401


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=4)
