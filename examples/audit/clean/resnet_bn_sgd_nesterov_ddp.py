"""Style: a vision team's training code, torchvision-like: a BasicBlock
class, a ResNet built from a layer list, Kaiming initialisation, a
DataLoader over a Dataset with a DistributedSampler, DDP.

A small ResNet (stem, two residual stages of BasicBlocks, the second
strided with a 1x1 projection shortcut) classifies 12x12 synthetic images
by which quadrant holds a bright blob. Deliberately includes:

- Conv2d without bias before BatchNorm2d, residual additions, and the
  last BatchNorm of every block initialised to zero (torchvision's
  zero_init_residual: each block starts as the identity);
- SGD with momentum 0.9, nesterov, weight decay on conv/linear weights
  only (BatchNorm parameters and biases in a group without decay);
- DistributedSampler(seed=seed, drop_last=True) with set_epoch per epoch,
  a DataLoader that takes num_workers and its own seeded generator;
- wrap_ddp: DistributedDataParallel with its default broadcast_buffers;
- evaluate sharded over ranks with the counts all-reduced;
- a checkpoint of the bare module's state dict (unwrapped from DDP).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class BlobImages(Dataset):
    """Images with a blob in one of four quadrants (the label), plus noise;
    generated once from a seeded generator."""

    def __init__(self, n, seed, size=12):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 4, (n,), generator=g)
        self.images = 0.3 * torch.randn(n, 1, size, size, generator=g)
        half = size // 2
        rows, cols = torch.arange(size)[:, None], torch.arange(size)[None, :]
        for q in range(4):
            r, c = (q // 2) * half, (q % 2) * half
            blob = ((rows >= r + 2) & (rows < r + half - 1) & (cols >= c + 2) &
                    (cols < c + half - 1)).float()
            self.images[self.labels == q, 0] += blob

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.shortcut is None else self.shortcut(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class TinyResNet(nn.Module):
    def __init__(self, widths=(8, 16), classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(BasicBlock(cin, w, stride=1 if i == 0 else 2))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, BasicBlock):
                nn.init.zeros_(m.bn2.weight)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model():
    return TinyResNet()


def make_optimizer(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    return torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                            {"params": no_decay, "weight_decay": 0.0}],
                           lr=0.05, momentum=0.9, nesterov=True)


def batches(seed, batch_size, rank=0, world_size=1, workers=0):
    data = BlobImages(1024, seed=5)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True,
                        num_workers=workers, generator=torch.Generator().manual_seed(seed))
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad(set_to_none=True)
    last = None
    for images, labels in micro_batches:
        last = F.cross_entropy(model(images), labels) / len(micro_batches)
        last.backward()
    optimizer.step()
    return last.detach() * len(micro_batches)


def wrap_ddp(model):
    return DistributedDataParallel(model)


def evaluate(model):
    data = BlobImages(256, seed=6)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    shard = range(rank, len(data), world)
    loader = DataLoader(torch.utils.data.Subset(data, shard), batch_size=64)
    correct = torch.zeros(2, dtype=torch.float64)
    training = model.training
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            correct[0] += (model(images).argmax(1) == labels).sum()
            correct[1] += len(labels)
    model.train(training)
    if world > 1:
        dist.all_reduce(correct)
    return float(correct[0] / correct[1])


def _bare(model):
    return model.module if isinstance(model, DistributedDataParallel) else model


def save_checkpoint(path, model, optimizer):
    torch.save({"model": _bare(model).state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    state = torch.load(path, map_location="cpu")
    _bare(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net = make_model()
    sgd = make_optimizer(net)
    for step, (xb, yb) in zip(range(200), batches(0, 32)):
        loss = train_step(net, sgd, [(xb, yb)])
        if step % 50 == 0:
            print(step, float(loss))
    print("accuracy", evaluate(net))
