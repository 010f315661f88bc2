"""Style: an MLP-Mixer-like model written by a team that prefers the
plainest optimizer: token-mixing and channel-mixing MLPs, each behind a
pre-LayerNorm and a residual, trained with SGD without momentum.

Inputs are 8 "patches" of 6 features; the label says which patch holds
the largest feature-0 value (4 classes from the patch's position mod 4).
Deliberately includes:

- nn.LayerNorm before every mixing MLP and a final LayerNorm: with plain
  SGD at lr 0.05, the LayerNorm gains (initialised to 1) move little in
  a few steps relative to their size, while they do train;
- residual connections, GELU, transposes for token mixing; the
  token-mixing output Linear has no bias (see MixerBlock: a per-token
  constant is removed by the LayerNorms after it, so that bias would
  never train);
- plain SGD (no momentum, no weight decay);
- no evaluate and no checkpoint (a team that audits only its step).
"""
import torch
from torch import nn
from torch.nn import functional as F

PATCHES, FEATURES, HIDDEN = 8, 6, 24


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_norm = nn.LayerNorm(HIDDEN)
        # no output bias: it would add one constant to all channels of a token, which every
        # LayerNorm downstream subtracts again, so it could never receive a gradient
        self.token_mlp = nn.Sequential(nn.Linear(PATCHES, 16), nn.GELU(),
                                       nn.Linear(16, PATCHES, bias=False))
        self.channel_norm = nn.LayerNorm(HIDDEN)
        self.channel_mlp = nn.Sequential(nn.Linear(HIDDEN, 48), nn.GELU(), nn.Linear(48, HIDDEN))

    def forward(self, x):                                     # (batch, patches, hidden)
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Mixer(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.stem = nn.Linear(FEATURES, HIDDEN)
        self.blocks = nn.ModuleList(MixerBlock() for _ in range(depth))
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, 4)

    def forward(self, patches):
        x = self.stem(patches)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


def make_model():
    return Mixer()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05)


def batches(seed, batch_size):
    g_data = torch.Generator().manual_seed(121)
    x = torch.randn(1024, PATCHES, FEATURES, generator=g_data)
    y = x[:, :, 0].argmax(dim=1) % 4
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(y), generator=g)
        for i in range(len(y) // batch_size):
            rows = order[i * batch_size:(i + 1) * batch_size]
            yield x[rows], y[rows]


def train_step(model, optimizer, micro_batches):
    share = 1.0 / len(micro_batches)  # each micro-batch's share of the step's mean loss
    optimizer.zero_grad()
    losses = []
    for x, y in micro_batches:
        losses.append(F.cross_entropy(model(x), y))
        (losses[-1] * share).backward()
    optimizer.step()
    return share * sum(loss.item() for loss in losses)


if __name__ == "__main__":
    torch.manual_seed(0)
    mixer = make_model()
    sgd = make_optimizer(mixer)
    stream = batches(0, 32)
    for step in range(300):
        loss = train_step(mixer, sgd, [next(stream)])
        if step % 100 == 0:
            print(step, round(loss, 4))
