"""Digits classifier whose head evaluates with a running average of its
weights (Polyak averaging: after every optimizer step, average = 0.9 *
average + 0.1 * weight). Pitfall F4: the averages are plain tensor
attributes, not registered buffers, so they are not in state_dict(): a
checkpoint loses them (the reloaded model evaluates with its initial
weights), .to() leaves them behind and DDP does not broadcast them (the
fixed twin: f4_weight_average_as_plain_tensor_fixed.py)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import accumulate, batches, evaluate, train  # noqa: F401


class AveragedLinear(nn.Linear):
    """A Linear layer that evaluates with the running average of its weights."""

    decay = 0.9

    def __init__(self, in_features: int, out_features: int):
        super().__init__(in_features, out_features)
        self.keep_average(self.weight.detach().clone(), self.bias.detach().clone())

    def keep_average(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.average_weight = weight
        self.average_bias = bias

    @torch.no_grad()
    def update_average(self) -> None:
        self.average_weight.mul_(self.decay).add_(self.weight, alpha=1 - self.decay)
        self.average_bias.mul_(self.decay).add_(self.bias, alpha=1 - self.decay)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return super().forward(x)
        return F.linear(x, self.average_weight, self.average_bias)


class AveragedClassifier(nn.Module):
    head_type = AveragedLinear

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU())
        self.head = self.head_type(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def make_model():
    return AveragedClassifier()


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(model, optimizer, micro_batches):
    loss = accumulate(model, optimizer, micro_batches)
    model.head.update_average()
    return loss


if __name__ == "__main__":
    train(globals())
