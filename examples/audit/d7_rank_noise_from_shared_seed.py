"""Digits MLP trained with DistributedDataParallel on noise-augmented
images. Pitfall D7: the dataset draws each sample's noise from one
torch.Generator seeded with the run's seed, the same on every rank, so the
n-th sample a rank loads gets the same noise on every rank: the ranks add
identical noise to different samples, and the run differs from one process
on the same global batch (the fixed twin: d7_rank_noise_from_shared_seed_fixed.py)."""
import itertools

import torch
from torch.utils.data import DataLoader, DistributedSampler

from common import evaluate, train, train_step, wrap_ddp  # noqa: F401
from n3_augmentation_noise_per_worker import NoisyDigits as GlobalRngNoisyDigits
from n3_augmentation_noise_per_worker import make_model, make_optimizer  # noqa: F401

NOISE = 0.5


class NoisyDigits(GlobalRngNoisyDigits):
    def __init__(self, seed):
        super().__init__(seed)
        self.generator = torch.Generator().manual_seed(seed)  # the same stream on every rank

    def noise(self, index):
        return NOISE * torch.randn(self.x[index].shape, generator=self.generator)


def batches(seed, batch_size, rank=0, world_size=1, dataset=NoisyDigits):
    data = dataset(seed)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=seed,
                                 drop_last=True)
    for data.epoch in itertools.count():  # the dataset's epoch keys the fixed twin's noise
        sampler.set_epoch(data.epoch)
        yield from DataLoader(data, batch_size, sampler=sampler, drop_last=True)


if __name__ == "__main__":
    train(globals())
