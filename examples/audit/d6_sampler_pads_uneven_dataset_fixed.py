"""d6_sampler_pads_uneven_dataset.py with its pitfall fixed: the
DistributedSampler drops the odd sample instead of padding with a copy
(each epoch a different one, since the order is reshuffled)."""
from common import train
from d6_sampler_pads_uneven_dataset import batches as padded_batches
from d6_sampler_pads_uneven_dataset import evaluate, make_model, make_optimizer  # noqa: F401
from d6_sampler_pads_uneven_dataset import train_step, wrap_ddp  # noqa: F401


def batches(seed, batch_size, rank=0, world_size=1):
    return padded_batches(seed, batch_size, rank, world_size, drop_last=True)


if __name__ == "__main__":
    train(globals())
