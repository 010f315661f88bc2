"""d1_no_distributed_sampler.py with its pitfall fixed: a DistributedSampler
gives each rank its own shard."""
from common import train, train_step, wrap_ddp  # noqa: F401
from common import batches  # noqa: F401  (loader with DistributedSampler(num_replicas, rank))
from d1_no_distributed_sampler import evaluate, make_model, make_optimizer  # noqa: F401

if __name__ == "__main__":
    train(globals())
