"""Style: a performance-minded team's mixed-precision loop: autocast
around the forward pass only, the loss in float32, a loss scaler with
unscale_ before clipping, the scaler's state checkpointed.

A small CNN (conv, BatchNorm, max-pool) classifies 8x8 synthetic
"stripe orientation" images. Deliberately includes:

- torch.autocast("cpu", dtype=torch.bfloat16) on the CPU (float16 on a
  GPU), the logits cast to float32 before the loss (no LayerNorm: CPU
  bfloat16 autocast of layer_norm raises in torch 1.13);
- dlcheck.audit.CpuGradScaler on the CPU (torch.cuda.amp.GradScaler on
  a GPU), scale(loss).backward() per micro-batch, scaler.unscale_()
  once, then clip_grad_norm_(max_norm=2.0), scaler.step, scaler.update;
- Adam (eps 1e-6) with gradient accumulation;
- a checkpoint with model, optimizer and scaler state.
"""
import torch
import torch.nn.functional as F
from torch import nn

from dlcheck.audit import CpuGradScaler

ON_GPU = torch.cuda.is_available()
AMP_DEVICE, AMP_DTYPE = ("cuda", torch.float16) if ON_GPU else ("cpu", torch.bfloat16)
SIDE = 8


def stripes(n, seed):
    g = torch.Generator().manual_seed(seed)
    orientation = torch.randint(0, 3, (n,), generator=g)  # horizontal, vertical, diagonal
    i, j = torch.meshgrid(torch.arange(SIDE), torch.arange(SIDE), indexing="ij")
    patterns = torch.stack([torch.sin(1.7 * i), torch.sin(1.7 * j),
                            torch.sin(1.2 * (i + j))]).float()
    images = patterns[orientation] + 0.5 * torch.randn(n, SIDE, SIDE, generator=g)
    return images.unsqueeze(1), orientation


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(16, 3))


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=2e-3, eps=1e-6)


def make_scaler():
    return torch.cuda.amp.GradScaler() if ON_GPU else CpuGradScaler(init_scale=2.0 ** 10)


def batches(seed, batch_size):
    images, labels = stripes(800, seed=41)
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(labels), generator=g)
        for k in range(len(labels) // batch_size):
            take = perm[k * batch_size:(k + 1) * batch_size]
            yield images[take], labels[take]


def train_step(model, optimizer, micro_batches, scaler):
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for images, labels in micro_batches:
        with torch.autocast(AMP_DEVICE, dtype=AMP_DTYPE):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), labels) / len(micro_batches)
        scaler.scale(loss).backward()
        losses.append(loss.detach())
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
    scaler.step(optimizer)
    scaler.update()
    return sum(losses)


def evaluate(model):
    images, labels = stripes(300, seed=42)
    model.eval()
    with torch.no_grad():
        hits = (model(images).argmax(dim=1) == labels).sum().item()
    model.train()
    return hits / len(labels)


def save_checkpoint(path, model, optimizer, scaler):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict()}, path)


def load_checkpoint(path, model, optimizer, scaler):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net, amp_scaler = make_model(), make_scaler()
    adam = make_optimizer(net)
    feed = batches(0, 32)
    for n in range(60):
        x, y = next(feed)
        loss = train_step(net, adam, [(x[:16], y[:16]), (x[16:], y[16:])], amp_scaler)
    print(f"loss {float(loss):.3f}, scale {amp_scaler.get_scale()}, acc {evaluate(net):.3f}")
