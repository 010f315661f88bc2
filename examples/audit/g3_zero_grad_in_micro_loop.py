"""Digits MLP, SGD, gradient accumulation with clipping. Pitfall G3: the
gradients are zeroed inside the micro-batch loop, so only the last
micro-batch contributes to the update (the fixed twin:
g3_zero_grad_in_micro_loop_fixed.py)."""
import torch
import torch.nn.functional as F

from common import evaluate, loader, mlp, train


def make_model():
    return mlp(48)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


def batches(seed, batch_size):
    return loader(seed, batch_size)


def train_step(model, optimizer, micro_batches):
    for x, y in micro_batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals(), accumulation=4)
