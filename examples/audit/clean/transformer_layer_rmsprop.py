"""Style: notebook code turned into a module: plain functions, a model
built inline as nn.Sequential-like pieces, no classes of the team's own
beyond one small nn.Module, sequence-first tensors inside the model.

One nn.TransformerEncoderLayer (dropout 0, sequence-first layout as
torch.nn's default, batch_first=False) regresses a sequence-level target:
the mean of feature 0 weighted by a soft attention on feature 1.
Deliberately includes:

- a single nn.TransformerEncoderLayer with its in_proj_weight /
  in_proj_bias, post-norm LayerNorms, no dropout anywhere;
- inputs transposed to (time, batch, feature) inside forward, so the
  samples are along dimension 0 only in the batches the adapter sees;
- RMSprop (alpha 0.9, eps 1e-8): an adaptive optimizer that divides by the
  root of the squared-gradient average, so it magnifies rounding noise in
  gradients whose true value is near zero (attention biases);
- mean squared error, divided by the number of micro-batches;
- evaluate returns a one-element tensor; no checkpoint functions.
"""
import torch
from torch import nn

T, F_IN, D = 8, 3, 16


def _regression_data(n, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, T, F_IN, generator=gen)
    w = torch.softmax(2.0 * x[..., 1], dim=1)
    return x, (w * x[..., 0]).sum(1, keepdim=True)


class SetRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(F_IN, D)
        self.block = nn.TransformerEncoderLayer(d_model=D, nhead=2, dim_feedforward=32,
                                                dropout=0.0)
        self.readout = nn.Linear(D, 1)

    def forward(self, x):                   # x: (batch, time, feature)
        h = self.block(self.embed(x).transpose(0, 1))   # (time, batch, D)
        return self.readout(h.mean(0))


def make_model():
    return SetRegressor()


def make_optimizer(model):
    return torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9)


def batches(seed, batch_size):
    x, y = _regression_data(768, 3)
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(x), generator=gen)
        for i in range(len(x) // batch_size):
            sel = perm[i * batch_size:(i + 1) * batch_size]
            yield x[sel], y[sel]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    mse = nn.functional.mse_loss
    total = torch.zeros(())
    for x, y in micro_batches:
        part = mse(model(x), y) / len(micro_batches)
        part.backward()
        total += part.detach()
    optimizer.step()
    return total


def evaluate(model):
    x, y = _regression_data(256, 4)
    model.eval()
    try:
        with torch.inference_mode():
            return nn.functional.mse_loss(model(x), y)
    finally:
        model.train()


if __name__ == "__main__":
    torch.manual_seed(0)
    m = make_model()
    o = make_optimizer(m)
    it = batches(0, 32)
    for _ in range(200):
        bx, by = next(it)
        train_step(m, o, [(bx, by)])
    print("val mse", evaluate(m).item())
