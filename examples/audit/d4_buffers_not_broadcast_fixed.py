"""d4_buffers_not_broadcast.py with its pitfall fixed: DDP's default
broadcast_buffers=True sends rank 0's buffers (BatchNorm running
statistics) to every rank at the start of each forward. Each rank still
normalises its own half of the global batch, so the weights differ a
little from one process's on the whole batch: the audit reports that as an
expected divergence, with its size."""
from common import train, train_step, wrap_ddp  # noqa: F401  (DDP, broadcast_buffers=True)
from d4_buffers_not_broadcast import batches, evaluate, make_model, make_optimizer  # noqa: F401

if __name__ == "__main__":
    train(globals())
