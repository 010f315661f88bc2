"""d7_rank_noise_from_shared_seed.py with its pitfall fixed: each sample's
noise comes from its own generator, seeded with the run's seed, the epoch
and the sample's global index, so the ranks draw different noise for
different samples, and the same noise one process would draw for them."""
import torch

from common import train
from d7_rank_noise_from_shared_seed import NOISE, NoisyDigits, evaluate, make_model  # noqa: F401
from d7_rank_noise_from_shared_seed import batches as noisy_batches
from d7_rank_noise_from_shared_seed import make_optimizer, train_step, wrap_ddp  # noqa: F401


class SampleKeyedNoisyDigits(NoisyDigits):
    def noise(self, index):
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.epoch) * 100_003 + index)
        return NOISE * torch.randn(self.x[index].shape, generator=g)


def batches(seed, batch_size, rank=0, world_size=1):
    return noisy_batches(seed, batch_size, rank, world_size, dataset=SampleKeyedNoisyDigits)


if __name__ == "__main__":
    train(globals())
