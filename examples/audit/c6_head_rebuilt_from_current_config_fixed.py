"""c6_head_rebuilt_from_current_config.py with its pitfall fixed: the
resume path rebuilds the model with the config saved in the checkpoint and
loads strictly, so a shape that changed would raise instead of being
skipped."""
import torch

from c6_head_rebuilt_from_current_config import (batches, evaluate, make_model,  # noqa: F401
                                                 make_optimizer, rebuild_head, save_checkpoint,
                                                 train_step)
from common import train


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    rebuild_head(model, ckpt["config"])  # the architecture the checkpoint was trained with
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
