"""a6_optimizer_step_bypasses_scaler.py with its pitfall fixed: the
project's amp_step, whose scaler unscales the gradients (before clipping
them) in scaler.step(optimizer), skips a step with inf/NaN gradients, and
adapts its scale in scaler.update()."""
from common import amp_step, train
from a6_optimizer_step_bypasses_scaler import (batches, evaluate, make_model,  # noqa: F401
                                               make_optimizer, make_scaler)


def train_step(model, optimizer, micro_batches, scaler=None):
    return amp_step(model, optimizer, micro_batches, scaler)


if __name__ == "__main__":
    train(globals())
