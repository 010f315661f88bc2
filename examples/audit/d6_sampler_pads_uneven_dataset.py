"""Digits MLP trained with DistributedDataParallel on the training split
less a 30-sample hold-out (1407 samples). Pitfall D6: the DistributedSampler
keeps its default drop_last=False, so with 2 ranks it pads the odd dataset
with a copy of one sample: every epoch that sample reaches the ranks twice
and the averaged gradient counts it twice (the fixed twin:
d6_sampler_pads_uneven_dataset_fixed.py)."""
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from common import digits, evaluate, mlp, train, train_step, wrap_ddp  # noqa: F401

HOLD_OUT = 30


def train_split():
    data = digits("train")
    return Subset(data, range(len(data) - HOLD_OUT))


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batches(seed, batch_size, rank=0, world_size=1, drop_last=False):
    data = train_split()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=seed,
                                 drop_last=drop_last)
    loader = DataLoader(data, batch_size, sampler=sampler, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


if __name__ == "__main__":
    train(globals())
