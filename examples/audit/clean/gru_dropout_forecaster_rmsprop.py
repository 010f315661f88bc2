"""Style: a forecasting team's object-oriented code: a Forecaster class
that owns its network and knows how to fit one step and predict; the
adapter functions are thin wrappers around its methods.

A two-layer GRU with dropout between its layers (and before the output)
predicts the next value of noisy sums of sines from the previous 16.
Deliberately includes:

- nn.GRU(num_layers=2, dropout=0.25) and nn.Dropout(0.25) on the last
  hidden state: the model draws random numbers in every training step;
- mean squared error;
- RMSprop with centered=True and momentum 0.5 (its state: square_avg,
  grad_avg, momentum_buffer);
- the checkpoint saves torch's global RNG state next to the model and
  optimizer, since dropout draws from it, and restores it on load;
- evaluate in eval mode (dropout off) under torch.no_grad().
"""
import math

import torch
from torch import nn

WINDOW = 16


class Forecaster(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.gru = nn.GRU(1, hidden, num_layers=2, dropout=0.25, batch_first=True)
        self.drop = nn.Dropout(0.25)
        self.out = nn.Linear(hidden, 1)

    def forward(self, window):
        states, _ = self.gru(window.unsqueeze(-1))
        return self.out(self.drop(states[:, -1])).squeeze(-1)

    def fit_step(self, optimizer, micro_batches):
        optimizer.zero_grad()
        mean_loss = 0.0
        for window, nxt in micro_batches:
            loss = nn.functional.mse_loss(self(window), nxt) / len(micro_batches)
            loss.backward()
            mean_loss += loss.item()
        optimizer.step()
        return mean_loss

    @torch.no_grad()
    def validation_mse(self, windows, targets):
        mode = self.training
        self.eval()
        try:
            return nn.functional.mse_loss(self(windows), targets).item()
        finally:
            self.train(mode)


def series_windows(count, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(WINDOW + 1).float()
    freq = 0.2 + 0.6 * torch.rand(count, 2, generator=g)
    phase = 2 * math.pi * torch.rand(count, 2, generator=g)
    waves = torch.sin(freq[:, :1] * t + phase[:, :1]) + 0.5 * torch.sin(freq[:, 1:] * t +
                                                                           phase[:, 1:])
    waves = waves + 0.05 * torch.randn(count, WINDOW + 1, generator=g)
    return waves[:, :WINDOW], waves[:, WINDOW]


def make_model():
    return Forecaster()


def make_optimizer(model):
    return torch.optim.RMSprop(model.parameters(), lr=2e-3, centered=True, momentum=0.5)


def batches(seed, batch_size):
    windows, targets = series_windows(960, seed=71)
    g = torch.Generator().manual_seed(seed)
    while True:
        idx = torch.randperm(len(targets), generator=g)
        for i in range(0, len(idx) - batch_size + 1, batch_size):
            pick = idx[i:i + batch_size]
            yield windows[pick], targets[pick]


def train_step(model, optimizer, micro_batches):
    return model.fit_step(optimizer, micro_batches)


def evaluate(model):
    return model.validation_mse(*series_windows(256, seed=72))


def save_checkpoint(path, model, optimizer):
    torch.save({"net": model.state_dict(), "opt": optimizer.state_dict(),
                "rng": torch.random.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ck = torch.load(path)
    model.load_state_dict(ck["net"])
    optimizer.load_state_dict(ck["opt"])
    torch.random.set_rng_state(ck["rng"])


if __name__ == "__main__":
    torch.manual_seed(0)
    f = make_model()
    opt = make_optimizer(f)
    it = batches(0, 32)
    for _ in range(200):
        f.fit_step(opt, [next(it)])
    print("validation mse", evaluate(f))
