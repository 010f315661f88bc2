"""Style: a compact research script, module-level functions only, written
the way a first project with torch.nn usually is.

A one-layer GRU reads a sequence of 4 features and classifies it (which of
the first three features has the largest sum over time) from its last
hidden state. Deliberately includes:

- nn.GRU (batch_first) and a Linear head on h_n;
- plain SGD without momentum (no optimizer state besides the step);
- a StepLR scheduler (lr times 0.8 every 4 steps) from the adapter's
  make_scheduler, stepped once per optimizer step after train_step (by
  the audit, and by the script's own loop below); the checkpoint saves
  and restores its state;
- a checkpoint with the model, optimizer and scheduler state but no RNG
  state: nothing in this model or its step draws random numbers.
"""
import torch
import torch.nn.functional as F
from torch import nn

SEQ_LEN, FEATURES, HIDDEN, CLASSES = 12, 4, 24, 3
TRAIN_SIZE, VAL_SIZE = 512, 256


def make_sequences(n, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, SEQ_LEN, FEATURES, generator=gen)
    y = x.sum(dim=1)[:, :CLASSES].argmax(dim=1)
    return x, y


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(FEATURES, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        _, h_n = self.rnn(x)
        return self.fc(h_n[-1])


def make_model():
    return GRUClassifier()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.5)


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.8)


def batches(seed, batch_size):
    x, y = make_sequences(TRAIN_SIZE, seed=11)
    gen = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(TRAIN_SIZE, generator=gen)
        for start in range(0, TRAIN_SIZE - batch_size + 1, batch_size):
            idx = perm[start:start + batch_size]
            yield x[idx], y[idx]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for x, y in micro_batches:
        loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def evaluate(model):
    x, y = make_sequences(VAL_SIZE, seed=12)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train(was_training)
    return acc


def save_checkpoint(path, model, optimizer, scheduler):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict()}, path)


def load_checkpoint(path, model, optimizer, scheduler):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net = make_model()
    opt = make_optimizer(net)
    sched = make_scheduler(opt)
    data = batches(0, 32)
    for i in range(80):
        xb, yb = next(data)
        chunks = list(zip(xb.chunk(4), yb.chunk(4)))
        loss = train_step(net, opt, chunks)
        sched.step()
        if i % 10 == 0:
            print(i, round(loss, 4), opt.param_groups[0]["lr"])
    print("val acc", evaluate(net))
