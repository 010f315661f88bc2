"""An MLP with LayerNorm under plain SGD at a small learning rate: its
gains move about 0.3% in a few steps, which a relative-change threshold of
1% called "not training". VARIANT (set by the test) selects "correct" or
the F1-F3 mistakes."""
import torch
from torch import nn

AUDIT = {"batch_size": 16, "accumulation": 2, "steps": 4}
VARIANT = "correct"


def make_model():
    model = nn.Sequential(nn.Linear(8, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 2))
    if VARIANT == "f1_frozen":
        model[1].weight.requires_grad_(False)
    if VARIANT == "f3_dead":
        nn.init.constant_(model[0].weight, 0.0)  # LayerNorm of a constant: its gain gets 0
        nn.init.constant_(model[0].bias, 0.0)
    return model


def make_optimizer(model):
    params = list(model.parameters())
    if VARIANT == "f2_not_in_optimizer":
        params = [p for p in params if p is not model[1].weight]
    return torch.optim.SGD([p for p in params if p.requires_grad], lr=0.01)


def batches(seed, batch_size):
    g = torch.Generator().manual_seed(seed)
    while True:
        x = torch.randn(batch_size, 8, generator=g)
        yield x, (x[:, 0] > 0).long()


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss = nn.functional.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
    optimizer.step()
    return float(loss) * len(micro_batches)
