"""Style: a team that does its own data parallelism instead of DDP: the
model is not wrapped, the parameters are broadcast from rank 0 once, and
the step all-reduces one flat buffer of gradients and divides it by the
world size.

An MLP with tanh units classifies points of three interleaved spirals.
Deliberately includes:

- wrap_ddp that returns the model itself (after a broadcast of every
  parameter from rank 0, so replicas start equal whatever their seeds);
- a manual gradient average in train_step: the gradients flattened into
  one buffer, dist.all_reduce(SUM), divided by dist.get_world_size(),
  copied back; skipped outside a process group;
- SGD with momentum 0.9 (no nesterov), no weight decay;
- a DistributedSampler(seed=seed) with set_epoch, without a DataLoader
  (index lists sliced by hand);
- evaluate computed on this rank's shard and all-reduced (sum of
  correct and count).
"""
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler


def spirals(n, seed, arms=3):
    g = torch.Generator().manual_seed(seed)
    label = torch.randint(arms, (n,), generator=g)
    r = torch.rand(n, generator=g)
    angle = 3.0 * r + 2 * math.pi * label / arms + 0.2 * torch.randn(n, generator=g)
    points = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
    return points, label


def make_model():
    return nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 3))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)


def batches(seed, batch_size, rank=0, world_size=1):
    points, labels = spirals(1200, seed=21)
    sampler = DistributedSampler(range(len(labels)), num_replicas=world_size, rank=rank,
                                 seed=seed, drop_last=True)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        indices = torch.tensor(list(sampler))
        for i in range(0, len(indices) - batch_size + 1, batch_size):
            idx = indices[i:i + batch_size]
            yield points[idx], labels[idx]
        epoch += 1


def wrap_ddp(model):
    if dist.is_initialized():
        with torch.no_grad():
            for p in model.parameters():
                dist.broadcast(p, src=0)
    return model


def average_gradients(model):
    world = dist.get_world_size()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    criterion = nn.CrossEntropyLoss()
    total = 0.0
    for x, y in micro_batches:
        loss = criterion(model(x), y) / len(micro_batches)
        loss.backward()
        total += float(loss)
    if dist.is_initialized():
        average_gradients(model)
    optimizer.step()
    return total


def evaluate(model):
    points, labels = spirals(300, seed=22)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    model.eval()
    with torch.no_grad():
        x, y = points[rank::world], labels[rank::world]
        counts = torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)],
                              dtype=torch.float64)
    model.train()
    if world > 1:
        dist.all_reduce(counts)
    return counts[0].item() / counts[1].item()


if __name__ == "__main__":
    torch.manual_seed(0)
    mlp = wrap_ddp(make_model())
    sgd = make_optimizer(mlp)
    data = batches(0, 64)
    for step in range(300):
        train_step(mlp, sgd, [next(data)])
    print("accuracy", evaluate(mlp))
