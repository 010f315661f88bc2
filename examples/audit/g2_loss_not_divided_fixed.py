"""g2_loss_not_divided.py with its pitfall fixed: each micro-batch's loss is
divided by the number of micro-batches."""
import torch.nn.functional as F

from common import train
from g2_loss_not_divided import batches, evaluate, make_model, make_optimizer  # noqa: F401


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=4)
