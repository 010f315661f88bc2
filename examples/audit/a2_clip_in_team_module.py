"""a2_clip_before_unscale.py's mixed-precision digits MLP, with its step
built from the team's own helper module (amp_utils.py), which imported
`clip_grad_norm_` by name. Pitfall A2: the step clips before
scaler.unscale_(), so the clip sees gradients multiplied by the loss scale
and cuts every update down to almost nothing (the fixed twin:
a2_clip_in_team_module_fixed.py)."""
from a2_clip_before_unscale import make_model, make_optimizer, make_scaler  # noqa: F401
from amp_utils import clip_gradients, scaled_backward, scaler_step
from common import batches, evaluate, train  # noqa: F401


def train_step(model, optimizer, micro_batches, scaler=None):
    optimizer.zero_grad()
    loss = scaled_backward(model, micro_batches, scaler)
    clip_gradients(model, max_norm=1.0)
    scaler_step(optimizer, scaler)
    return loss


if __name__ == "__main__":
    train(globals())
