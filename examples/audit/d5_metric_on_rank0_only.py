"""Digits MLP trained with DistributedDataParallel; each rank evaluates its
shard of the test set. Pitfall D5: the accuracy rank 0 logs is its own
shard's, never combined with the other ranks' (the fixed twin:
d5_metric_on_rank0_only_fixed.py)."""
import torch
import torch.distributed as dist

from common import batches, digits, mlp, train, train_step, wrap_ddp  # noqa: F401


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


@torch.no_grad()
def evaluate(model):
    x, y = digits("test").tensors
    if dist.is_initialized():
        x, y = x[dist.get_rank()::dist.get_world_size()], y[dist.get_rank()::dist.get_world_size()]
    model.eval()
    correct = (model(x).argmax(1) == y).sum()
    model.train()
    return {"accuracy": float(correct) / len(y)}


if __name__ == "__main__":
    train(globals())
