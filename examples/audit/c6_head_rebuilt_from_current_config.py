"""Digits classifier whose head is built from the experiment's config.
Pitfall C6: the resume path rebuilds the head from the config as it reads
at load time (configs/default.yaml, which since gained two labels: 12
classes) instead of the config the checkpoint was trained with (10), and
loads with a "load what fits" helper that skips every tensor whose shape
changed with a log line. The resumed model has a different architecture
than the one saved, and its head silently restarts from random weights
(the fixed twin: c6_head_rebuilt_from_current_config_fixed.py)."""
import logging

import torch
import torch.nn as nn

from common import Classifier, batches, evaluate, train, train_step  # noqa: F401

#: this experiment's config (saved with each checkpoint)
RUN_CONFIG = {"hidden": 32, "num_classes": 10}
#: configs/default.yaml as it reads today
DEFAULT_CONFIG = {"hidden": 32, "num_classes": 12}


def make_model():
    return Classifier(RUN_CONFIG["hidden"], batchnorm=False)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def rebuild_head(model, config):
    """The fine-tuning path's head resize: a new classifier layer when the
    class count changed."""
    if model.head[-1].out_features != config["num_classes"]:
        model.head[-1] = nn.Linear(config["hidden"], config["num_classes"])


def load_matching(model, state):
    """Loads what fits (as mmcv's and timm's lenient loaders do): a tensor
    whose shape changed is skipped with a log line."""
    own = model.state_dict()
    fits = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    for k in sorted(state.keys() - fits.keys()):
        logging.getLogger(__name__).info("skipping %s: its shape changed", k)
    model.load_state_dict(fits, strict=False)


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(), "config": dict(RUN_CONFIG)}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    rebuild_head(model, dict(DEFAULT_CONFIG))  # the config read now, not the checkpoint's
    load_matching(model, ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
