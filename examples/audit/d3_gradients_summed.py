"""Digits MLP with hand-written data parallelism: each rank computes its
gradients and all-reduces them before the step. Pitfall D3: all_reduce
sums, and the sum is never divided by the world size, so the update is W
times too large (the fixed twin: d3_gradients_summed_fixed.py)."""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from common import batches, evaluate, mlp, train  # noqa: F401


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05)


def wrap_ddp(model):
    return model  # no DDP wrapper: train_step reduces the gradients itself


def reduce_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    if dist.is_initialized():
        reduce_gradients(model)
    optimizer.step()
    return loss


if __name__ == "__main__":
    train(globals())
