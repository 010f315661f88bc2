"""Style: a tabular-data team's pipeline: a Dataset yielding dicts of
named features, a residual MLP with LayerNorm and dropout in every block,
AdamW under OneCycleLR, data-parallel training with DDP.

Ten numeric features and one categorical feature (embedded) predict one
of three classes. Deliberately includes:

- dict batches ({"numeric", "category", "target"}), collated by the
  DataLoader's default collate;
- nn.Embedding for the categorical column, Linear -> LayerNorm -> GELU ->
  Dropout(0.2) blocks with residual connections, dropout on the input too;
- AdamW with a OneCycleLR (cosine annealing, 300 total steps). The adapter
  has no place for a scheduler: make_optimizer keeps it on the optimizer
  (optimizer.one_cycle), train_step steps it once per optimizer step after
  optimizer.step(), and the checkpoint saves and restores it;
- DistributedSampler(seed=seed) + set_epoch, a seeded DataLoader generator;
  wrap_ddp: DistributedDataParallel; evaluate shards and all-reduces;
- a checkpoint with the unwrapped model, optimizer, scheduler and the RNG
  state (dropout).
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

N_NUMERIC, N_CATEGORIES, N_CLASSES = 10, 7, 3


class TabularRows(Dataset):
    def __init__(self, rows, seed):
        g = torch.Generator().manual_seed(seed)
        self.numeric = torch.randn(rows, N_NUMERIC, generator=g)
        self.category = torch.randint(0, N_CATEGORIES, (rows,), generator=g)
        score = self.numeric[:, :3] + 0.5 * (self.category[:, None] % 3 == torch.arange(3))
        self.target = score.argmax(1)

    def __len__(self):
        return len(self.target)

    def __getitem__(self, i):
        return {"numeric": self.numeric[i], "category": self.category[i],
                "target": self.target[i]}


class ResidualBlock(nn.Module):
    def __init__(self, width, p):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU(),
                                  nn.Dropout(p))

    def forward(self, x):
        return x + self.body(x)


class TabularNet(nn.Module):
    def __init__(self, width=32, depth=2, p=0.2):
        super().__init__()
        self.category = nn.Embedding(N_CATEGORIES, 4)
        self.input = nn.Sequential(nn.Dropout(0.1), nn.Linear(N_NUMERIC + 4, width),
                                   nn.LayerNorm(width), nn.GELU())
        self.blocks = nn.Sequential(*[ResidualBlock(width, p) for _ in range(depth)])
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, numeric, category):
        x = torch.cat([numeric, self.category(category)], dim=1)
        return self.head(self.blocks(self.input(x)))


def make_model():
    return TabularNet()


def make_optimizer(model):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    opt.one_cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=300)
    return opt


def batches(seed, batch_size, rank=0, world_size=1):
    rows = TabularRows(2048, seed=17)
    sampler = DistributedSampler(rows, num_replicas=world_size, rank=rank, seed=seed,
                                 drop_last=True)
    loader = DataLoader(rows, batch_size=batch_size, sampler=sampler, drop_last=True,
                        generator=torch.Generator().manual_seed(seed))
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad(set_to_none=True)
    reported = 0.0
    for mb in micro_batches:
        logits = model(mb["numeric"], mb["category"])
        loss = F.cross_entropy(logits, mb["target"]) / len(micro_batches)
        loss.backward()
        reported += loss.item()
    optimizer.step()
    optimizer.one_cycle.step()
    return reported


def wrap_ddp(model):
    return DDP(model)


def evaluate(model):
    rows = TabularRows(300, seed=18)
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    mine = torch.arange(rank, len(rows), world)
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(rows.numeric[mine], rows.category[mine])
        sums = torch.tensor([F.cross_entropy(logits, rows.target[mine], reduction="sum").item(),
                             float(len(mine))], dtype=torch.float64)
    model.train(was)
    if world > 1:
        dist.all_reduce(sums)
    return {"val_loss": (sums[0] / sums[1]).item()}


def _module(model):
    return model.module if isinstance(model, DDP) else model


def save_checkpoint(path, model, optimizer):
    torch.save({"model": _module(model).state_dict(), "optimizer": optimizer.state_dict(),
                "one_cycle": optimizer.one_cycle.state_dict(), "rng": torch.get_rng_state()},
               path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path, map_location="cpu")
    _module(model).load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    optimizer.one_cycle.load_state_dict(ckpt["one_cycle"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net = make_model()
    opt = make_optimizer(net)
    for i, b in zip(range(100), batches(0, 64)):
        loss = train_step(net, opt, [b])
    print("last loss", loss, evaluate(net))
