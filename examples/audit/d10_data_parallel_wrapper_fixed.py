"""d10_data_parallel_wrapper.py with its pitfall fixed: one process per
device, each wrapping its model in DistributedDataParallel (common.py's
wrap_ddp; gloo on the CPU, device_ids=[local_rank] on GPUs)."""
from common import batches, evaluate, train, train_step, wrap_ddp  # noqa: F401
from d10_data_parallel_wrapper import make_model, make_optimizer  # noqa: F401

if __name__ == "__main__":
    train(globals())
