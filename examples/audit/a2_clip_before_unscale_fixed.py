"""a2_clip_before_unscale.py with its pitfall fixed: scaler.unscale_() before
clipping, so the clip sees the true gradient norm (common.amp_step)."""
from a2_clip_before_unscale import (batches, evaluate, make_model, make_optimizer,  # noqa: F401
                                    make_scaler)
from common import amp_step, train


def train_step(model, optimizer, micro_batches, scaler=None):
    return amp_step(model, optimizer, micro_batches, scaler, max_norm=1.0)


if __name__ == "__main__":
    train(globals())
