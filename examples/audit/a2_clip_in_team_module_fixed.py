"""a2_clip_in_team_module.py with its pitfall fixed: scaler.unscale_()
before the helper module's clipping, so the clip sees the true gradient
norm."""
from a2_clip_in_team_module import (batches, evaluate, make_model, make_optimizer,  # noqa: F401
                                    make_scaler)
from amp_utils import clip_gradients, scaled_backward, scaler_step
from common import train


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    loss = scaled_backward(model, micro_batches, scaler)
    scaler.unscale_(optimizer)
    clip_gradients(model, max_norm=1.0)
    scaler_step(optimizer, scaler)
    return loss


if __name__ == "__main__":
    train(globals())
