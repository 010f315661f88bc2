"""Style: a CPU-inference-minded team that trains in bfloat16 with the
older torch.cpu.amp.autocast context manager and, since bfloat16 keeps
float32's exponent range, without any loss scaler.

A wide MLP (64 -> 64 -> 64 -> 8) classifies random projections of 8
prototype vectors. Deliberately includes:

- torch.cpu.amp.autocast(dtype=torch.bfloat16) around forward and loss
  (cross_entropy autocasts to float32 itself), backward outside it;
- no make_scaler: the audit's mixed-precision family finds the autocast
  in the step itself;
- Adam with gradient accumulation (bfloat16 rounding of each
  micro-batch's matmuls differs from the big batch's);
- 64x64 weight matrices (4096 elements each), biases, and a checkpoint of
  model and optimizer.
"""
import torch
import torch.nn.functional as F
from torch import nn

WIDTH, CLASSES = 64, 8


def prototypes(n, seed):
    gen = torch.Generator().manual_seed(seed)
    protos = torch.randn(CLASSES, WIDTH, generator=torch.Generator().manual_seed(123))
    y = torch.randint(CLASSES, (n,), generator=gen)
    return protos[y] + 0.8 * torch.randn(n, WIDTH, generator=gen), y


def make_model():
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                         nn.Linear(WIDTH, CLASSES))


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def batches(seed, batch_size):
    x, y = prototypes(1536, seed=111)
    gen = torch.Generator().manual_seed(seed)
    while True:
        p = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y) - batch_size + 1, batch_size):
            yield x[p[s:s + batch_size]], y[p[s:s + batch_size]]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    seen = 0.0
    for x, y in micro_batches:
        with torch.cpu.amp.autocast(dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y) / len(micro_batches)
        loss.backward()
        seen += loss.item()
    optimizer.step()
    return seen


def evaluate(model):
    x, y = prototypes(512, seed=112)
    model.eval()
    with torch.no_grad(), torch.cpu.amp.autocast(dtype=torch.bfloat16):
        acc = (model(x).argmax(-1) == y).float().mean().item()
    model.train()
    return acc


def save_checkpoint(path, model, optimizer):
    torch.save({"weights": model.state_dict(), "adam": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    d = torch.load(path)
    model.load_state_dict(d["weights"])
    optimizer.load_state_dict(d["adam"])


if __name__ == "__main__":
    torch.manual_seed(0)
    net = make_model()
    adam = make_optimizer(net)
    it = batches(0, 64)
    for _ in range(100):
        x, y = next(it)
        train_step(net, adam, [(x[:32], y[:32]), (x[32:], y[32:])])
    print("accuracy", evaluate(net))
