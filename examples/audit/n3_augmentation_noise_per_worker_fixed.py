"""n3_augmentation_noise_per_worker.py with its pitfall fixed: each sample's
noise comes from its own generator, seeded with the run's seed, the epoch
and the sample's index, so no worker count changes it."""
import torch

from common import train
from n3_augmentation_noise_per_worker import NOISE, NoisyDigits, evaluate, make_model  # noqa: F401
from n3_augmentation_noise_per_worker import batches as noisy_batches
from n3_augmentation_noise_per_worker import make_optimizer, train_step  # noqa: F401


class SeededNoisyDigits(NoisyDigits):
    def noise(self, index):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch) * 100_003 + index)
        return NOISE * torch.randn(self.x[index].shape, generator=g)


def batches(seed, batch_size, workers=0):
    return noisy_batches(seed, batch_size, workers, dataset=SeededNoisyDigits)


if __name__ == "__main__":
    train(globals())
