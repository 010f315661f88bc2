"""m4_frozen_batchnorm_in_train_mode.py with its pitfall fixed: the frozen
backbone stays in eval mode while the head trains."""
from common import accumulate, train
from m4_frozen_batchnorm_in_train_mode import (AUDIT, batches, evaluate, make_model,  # noqa: F401
                                               make_optimizer)


def train_step(model, optimizer, micro_batches):
    model.train()
    model.backbone.eval()
    return accumulate(model, optimizer, micro_batches)


if __name__ == "__main__":
    train(globals())
