"""Style: a signal-processing team's code: a backbone/head split (the
backbone is meant to be reused across tasks), per-part learning rates,
and checkpoints stored per part.

A Conv1d network classifies 64-sample noisy signals by their dominant
frequency band. Deliberately includes:

- nn.Conv1d + nn.BatchNorm1d + ReLU stacks, a strided conv, global
  average pooling, a separate Linear head (model.backbone, model.head);
  the convolutions keep their biases in front of BatchNorm, as much code
  does: harmless, though their true gradient is zero (BatchNorm subtracts
  any per-channel constant), so they move on rounding noise only;
- Adam with two param groups: the backbone at lr 1e-3, the head at 3e-3;
- a checkpoint stored as a nested dict of sub-state-dicts,
  {"backbone": ..., "head": ..., "optimizer": ...}, loaded part by part
  with strict load_state_dict calls (every key of the model is saved);
- evaluate in eval mode (BatchNorm uses its running statistics).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

SIGNAL, BANDS = 64, 4


def make_signals(n, seed):
    g = torch.Generator().manual_seed(seed)
    band = torch.randint(BANDS, (n,), generator=g)
    freq = 2.0 + 5.0 * band.float() + torch.rand(n, generator=g)
    phase = 2 * math.pi * torch.rand(n, 1, generator=g)
    t = torch.arange(SIGNAL).float() / SIGNAL
    x = torch.sin(2 * math.pi * freq[:, None] * t + phase) + 0.3 * torch.randn(n, SIGNAL,
                                                                              generator=g)
    return x.unsqueeze(1), band


class SignalNet(nn.Module):
    def __init__(self, channels=16):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv1d(1, channels, kernel_size=7, padding=3), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.Conv1d(channels, channels, kernel_size=5, stride=2, padding=2),
            nn.BatchNorm1d(channels), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.head = nn.Linear(channels, BANDS)

    def forward(self, x):
        return self.head(self.backbone(x))


def make_model():
    return SignalNet()


def make_optimizer(model):
    return torch.optim.Adam([{"params": model.backbone.parameters(), "lr": 1e-3},
                             {"params": model.head.parameters(), "lr": 3e-3}])


def batches(seed, batch_size):
    signals, bands = make_signals(1024, seed=8)
    g = torch.Generator().manual_seed(seed)
    while True:
        for chunk in torch.randperm(len(bands), generator=g).split(batch_size):
            if len(chunk) == batch_size:
                yield signals[chunk], bands[chunk]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    loss_sum = 0.0
    for signal, band in micro_batches:
        loss = F.cross_entropy(model(signal), band)
        (loss / len(micro_batches)).backward()
        loss_sum += loss.item()
    optimizer.step()
    return loss_sum / len(micro_batches)


def evaluate(model):
    signals, bands = make_signals(256, seed=9)
    model.eval()
    with torch.no_grad():
        accuracy = (model(signals).argmax(1) == bands).float().mean()
    model.train()
    return accuracy


def save_checkpoint(path, model, optimizer):
    torch.save({"backbone": model.backbone.state_dict(), "head": model.head.state_dict(),
                "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    parts = torch.load(path)
    model.backbone.load_state_dict(parts["backbone"])
    model.head.load_state_dict(parts["head"])
    optimizer.load_state_dict(parts["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net, stream = make_model(), batches(0, 32)
    adam = make_optimizer(net)
    for _ in range(80):
        x, y = next(stream)
        train_step(net, adam, [(x[:16], y[:16]), (x[16:], y[16:])])
    print("accuracy", float(evaluate(net)))
