"""Style: a team whose training loop is written for optimizers that need a
closure (it also drives L-BFGS elsewhere), so every optimizer, SGD
included, is stepped as optimizer.step(closure).

A two-layer MLP with SiLU units regresses a smooth function of 5 inputs
(mean squared error). Deliberately includes:

- the whole step inside a closure: zero_grad once, every micro-batch's
  loss divided by len(micro_batches) and backpropagated, the summed
  loss returned to the optimizer, which calls the closure exactly once
  (SGD does) and returns its loss;
- SGD with momentum 0.9 and dampening 0.1;
- batches as a single tensor [inputs | target] split by the model;
- evaluate returning a dict; no checkpoint.
"""
import torch
from torch import nn

INPUTS = 5


def table(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, INPUTS, generator=g) * 2 - 1
    y = torch.sin(3 * x[:, :1]) * x[:, 1:2] + x[:, 2:3] ** 2 - 0.5 * x[:, 3:4]
    return torch.cat([x, y], dim=1)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(INPUTS, 48), nn.SiLU(), nn.Linear(48, 48), nn.SiLU(),
                                 nn.Linear(48, 1))

    def forward(self, rows):
        return self.net(rows[:, :INPUTS])

    @staticmethod
    def target(rows):
        return rows[:, INPUTS:]


def make_model():
    return Regressor()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, dampening=0.1)


def batches(seed, batch_size):
    rows = table(1000, seed=55)
    g = torch.Generator().manual_seed(seed)
    while True:
        shuffled = rows[torch.randperm(len(rows), generator=g)]
        for start in range(0, len(rows) - batch_size + 1, batch_size):
            yield shuffled[start:start + batch_size]


def train_step(model, optimizer, micro_batches):
    def closure():
        optimizer.zero_grad()
        total = torch.zeros(())
        for rows in micro_batches:
            loss = nn.functional.mse_loss(model(rows), model.target(rows))
            (loss / len(micro_batches)).backward()
            total = total + loss.detach() / len(micro_batches)
        return total

    return optimizer.step(closure)


def evaluate(model):
    rows = table(400, seed=56)
    model.eval()
    with torch.no_grad():
        err = model(rows) - model.target(rows)
    model.train()
    return {"mse": err.pow(2).mean().item(), "max_abs": err.abs().max().item()}


if __name__ == "__main__":
    torch.manual_seed(0)
    reg = make_model()
    opt = make_optimizer(reg)
    for i, rows in zip(range(400), batches(0, 32)):
        train_step(reg, opt, list(rows.chunk(4)))
    print(evaluate(reg))
