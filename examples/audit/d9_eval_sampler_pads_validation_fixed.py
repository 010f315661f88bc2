"""d9_eval_sampler_pads_validation.py with its pitfall fixed: each rank
evaluates every world-th image of the validation set, without padding, so
the all-reduced counts hold each image once."""
from torch.utils.data import DataLoader, Subset

from common import train
from d9_eval_sampler_pads_validation import evaluate as padded_evaluate
from d9_eval_sampler_pads_validation import (batches, make_model, make_optimizer,  # noqa: F401
                                             train_step, wrap_ddp)


def shard(data, rank, world):
    return DataLoader(Subset(data, range(rank, len(data), world)), batch_size=64)


def evaluate(model):
    return padded_evaluate(model, shard)


if __name__ == "__main__":
    train(globals())
