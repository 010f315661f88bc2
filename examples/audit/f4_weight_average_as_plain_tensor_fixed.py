"""f4_weight_average_as_plain_tensor.py with its pitfall fixed: the
averaged weights are registered buffers, so state_dict() holds them,
.to() moves them and DDP broadcasts them."""
import torch

import f4_weight_average_as_plain_tensor as broken
from common import train
from f4_weight_average_as_plain_tensor import (batches, evaluate, make_optimizer,  # noqa: F401
                                                train_step)


class AveragedLinear(broken.AveragedLinear):
    def keep_average(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.register_buffer("average_weight", weight)
        self.register_buffer("average_bias", bias)


class AveragedClassifier(broken.AveragedClassifier):
    head_type = AveragedLinear


def make_model():
    return AveragedClassifier()


if __name__ == "__main__":
    train(globals())
