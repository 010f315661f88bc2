"""Style: a recommender team's implicit-feedback model: user and item
embedding tables with biases, a dot product, binary cross-entropy with
sampled negatives, and the simplest optimizer there is.

Interactions come from a hidden low-rank preference; every batch holds
observed (user, item) pairs labelled 1 and random pairs labelled 0.
Deliberately includes:

- nn.Embedding tables (users, items) with per-user / per-item bias
  embeddings and a global bias Parameter; only the rows of the batch's
  users and items get gradients in a step (dense gradients);
- F.binary_cross_entropy_with_logits with mean reduction;
- plain SGD: no momentum, no weight decay, so the optimizer has no state
  and the checkpoint needs only the model and the optimizer's
  param_groups;
- batches as a tuple (users, items, labels) of 1-D tensors.
"""
import torch
import torch.nn.functional as F
from torch import nn

USERS, ITEMS, RANK = 120, 150, 16


class MF(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(USERS, RANK)
        self.item = nn.Embedding(ITEMS, RANK)
        self.user_bias = nn.Embedding(USERS, 1)
        self.item_bias = nn.Embedding(ITEMS, 1)
        self.global_bias = nn.Parameter(torch.zeros(1))
        for table in (self.user, self.item):
            nn.init.normal_(table.weight, std=0.3)
        for table in (self.user_bias, self.item_bias):
            nn.init.zeros_(table.weight)

    def forward(self, users, items):
        dot = (self.user(users) * self.item(items)).sum(-1)
        return (dot + self.user_bias(users).squeeze(-1) + self.item_bias(items).squeeze(-1) +
                self.global_bias)


def interactions(n, seed):
    g = torch.Generator().manual_seed(seed)
    taste = torch.randn(USERS, 3, generator=torch.Generator().manual_seed(1))
    style = torch.randn(ITEMS, 3, generator=torch.Generator().manual_seed(2))
    users = torch.randint(USERS, (n,), generator=g)
    items = torch.randint(ITEMS, (n,), generator=g)
    p = torch.sigmoid(2.0 * (taste[users] * style[items]).sum(-1))
    return users, items, (torch.rand(n, generator=g) < p).float()


def make_model():
    return MF()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=5.0)


def batches(seed, batch_size):
    users, items, labels = interactions(4096, seed=81)
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(labels), generator=g)
        for i in range(0, len(perm) - batch_size + 1, batch_size):
            j = perm[i:i + batch_size]
            yield users[j], items[j], labels[j]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    running = 0.0
    for users, items, labels in micro_batches:
        logits = model(users, items)
        loss = F.binary_cross_entropy_with_logits(logits, labels) / len(micro_batches)
        loss.backward()
        running += float(loss)
    optimizer.step()
    return running


def evaluate(model):
    users, items, labels = interactions(1000, seed=82)
    model.eval()
    with torch.no_grad():
        logits = model(users, items)
    model.train()
    return {"bce": F.binary_cross_entropy_with_logits(logits, labels).item(),
            "accuracy": ((logits > 0).float() == labels).float().mean().item()}


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    mf = make_model()
    sgd = make_optimizer(mf)
    pairs = batches(0, 256)
    for step in range(300):
        train_step(mf, sgd, [next(pairs)])
    print(evaluate(mf))
