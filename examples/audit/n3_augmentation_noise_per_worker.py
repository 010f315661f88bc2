"""Digits MLP trained on noise-augmented images, the noise added in the
dataset's __getitem__ so that loader workers share the work. Pitfall N3:
the noise comes from torch's global RNG, which is a different stream in
every loader worker process: the same run with 0 and with 2 workers trains
on different noise (the fixed twin: n3_augmentation_noise_per_worker_fixed.py)."""
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from common import digits, evaluate, mlp, train, train_step  # noqa: F401

NOISE = 0.05


class NoisyDigits(Dataset):
    def __init__(self, seed):
        self.x, self.y = digits("train").tensors
        self.seed, self.epoch = seed, 0

    def __len__(self):
        return len(self.y)

    def noise(self, index):
        return NOISE * torch.randn(self.x[index].shape)

    def __getitem__(self, index):
        return self.x[index] + self.noise(index), self.y[index]


def make_model():
    return mlp(32)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batches(seed, batch_size, workers=0, dataset=NoisyDigits):
    data = dataset(seed)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, seed=seed, drop_last=True)
    loader = DataLoader(data, batch_size, sampler=sampler, drop_last=True, num_workers=workers)
    while True:
        sampler.set_epoch(data.epoch)
        yield from loader
        data.epoch += 1


if __name__ == "__main__":
    train(globals())
