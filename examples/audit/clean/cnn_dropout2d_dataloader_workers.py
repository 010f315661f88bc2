"""Style: a classic image-classification script with a map-style Dataset
that renders and augments each sample in __getitem__, a DataLoader with
worker processes, and a learning rate the loop computes itself.

Samples are 16x16 images of a filled square or an outline ("filled",
"hollow") at a random place, randomly flipped as augmentation.
Deliberately includes:

- augmentation keyed by (seed, epoch, index): every sample's flip and
  noise come from its own torch.Generator, so 0 or 2 loader workers give
  the same batches; the DataLoader gets a seeded generator of its own;
- a DistributedSampler(num_replicas=1) just for its seeded, per-epoch
  shuffling (set_epoch), num_workers from the adapter;
- nn.Dropout2d after the first conv block, nn.Dropout before the head,
  GroupNorm instead of BatchNorm;
- SGD with momentum 0.9 and weight decay 1e-4; a cosine learning rate
  computed in train_step from a step counter kept in the param group
  ("step_count"), so it is saved and restored with the optimizer's
  state_dict (no scheduler object);
- a checkpoint with model, optimizer and torch's RNG state (dropout).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

SIZE, BASE_LR, TOTAL_STEPS = 16, 0.05, 500


class Squares(Dataset):
    def __init__(self, n, seed, augment):
        self.n, self.seed, self.augment, self.epoch = n, seed, augment, 0

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(2, (1,), generator=g))
        side = int(torch.randint(4, 9, (1,), generator=g))
        top, left = (int(v) for v in torch.randint(0, SIZE - side, (2,), generator=g))
        img = torch.zeros(1, SIZE, SIZE)
        img[0, top:top + side, left:left + side] = 1.0
        if label == 1:
            img[0, top + 1:top + side - 1, left + 1:left + side - 1] = 0.0
        if self.augment:
            a = torch.Generator().manual_seed((self.seed * 7919 + self.epoch) * 1_000_003 + index)
            if bool(torch.rand(1, generator=a) < 0.5):
                img = img.flip(-1)
            img = img + 0.1 * torch.randn(img.shape, generator=a)
        return img, label


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(),
                                    nn.MaxPool2d(2), nn.Dropout2d(0.1))
        self.block2 = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.GroupNorm(4, 16),
                                    nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(64, 2))

    def forward(self, x):
        return self.classifier(self.block2(self.block1(x)))


def make_model():
    return SmallCNN()


def make_optimizer(model):
    opt = torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9, weight_decay=1e-4)
    for group in opt.param_groups:
        group["step_count"] = 0
    return opt


def batches(seed, batch_size, workers=0):
    data = Squares(640, seed=seed, augment=True)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=seed)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, num_workers=workers,
                        drop_last=True, generator=torch.Generator().manual_seed(seed))
    while True:
        sampler.set_epoch(data.epoch)
        yield from loader
        data.epoch += 1


def train_step(model, optimizer, micro_batches):
    for group in optimizer.param_groups:
        group["lr"] = BASE_LR * 0.5 * (1 + math.cos(math.pi * group["step_count"] / TOTAL_STEPS))
    optimizer.zero_grad()
    out = 0.0
    for images, labels in micro_batches:
        loss = F.cross_entropy(model(images), labels) / len(micro_batches)
        loss.backward()
        out += loss.item()
    optimizer.step()
    for group in optimizer.param_groups:
        group["step_count"] += 1
    return out


def evaluate(model):
    loader = DataLoader(Squares(256, seed=999, augment=False), batch_size=128,
                        generator=torch.Generator().manual_seed(0))
    model.eval()
    right = seen = 0
    with torch.no_grad():
        for images, labels in loader:
            right += (model(images).argmax(1) == labels).sum().item()
            seen += len(labels)
    model.train()
    return right / seen


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "cpu_rng_state": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["cpu_rng_state"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net = make_model()
    sgd = make_optimizer(net)
    stream = batches(0, 32, workers=2)
    for step in range(100):
        loss = train_step(net, sgd, [next(stream)])
    print(f"loss {loss:.3f} lr {sgd.param_groups[0]['lr']:.4f} accuracy {evaluate(net):.3f}")
