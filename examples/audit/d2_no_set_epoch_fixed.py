"""d2_no_set_epoch.py with its pitfall fixed: sampler.set_epoch(epoch) at the
start of every epoch."""
from common import batches, train, train_step, wrap_ddp  # noqa: F401
from d2_no_set_epoch import evaluate, make_model, make_optimizer  # noqa: F401

if __name__ == "__main__":
    train(globals())
