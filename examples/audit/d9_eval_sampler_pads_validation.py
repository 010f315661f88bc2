"""Digits MLP trained with DistributedDataParallel; evaluation shards the
validation set (the test split less a 5-image calibration set: 355 images)
with a DistributedSampler, as the training data is, and all-reduces the
counts. Pitfall D9: the sampler pads the odd validation set to a multiple
of the world size with a copy of one image, so the accuracy the ranks agree
on counts that image twice (the fixed twin:
d9_eval_sampler_pads_validation_fixed.py)."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, Subset

from common import batches, digits, mlp, train, train_step, wrap_ddp  # noqa: F401

CALIBRATION = 5


def validation_split():
    data = digits("test")
    return Subset(data, range(CALIBRATION, len(data)))


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def shard(data, rank, world):
    """The validation loader of this rank."""
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    return DataLoader(data, batch_size=64, sampler=sampler)


@torch.no_grad()
def evaluate(model, shard=shard):
    distributed = dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    counts = torch.zeros(2, dtype=torch.float64)
    model.eval()
    for x, y in shard(validation_split(), rank, world):
        counts += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)])
    model.train()
    if distributed:
        dist.all_reduce(counts)
    return {"accuracy": float(counts[0] / counts[1])}


if __name__ == "__main__":
    train(globals())
