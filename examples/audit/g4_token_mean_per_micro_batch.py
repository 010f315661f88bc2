"""A tiny per-token model (embedding, MLP, a prediction at every position)
on variable-length token sequences, padded, with a mask; gradient
accumulation over K micro-batches. Pitfall G4: each micro-batch's loss is
the mean over its own tokens (divided by K), so a token in a micro-batch
of short sequences counts more than one in a micro-batch of long ones; the
big batch's loss is the mean over all its tokens (the fixed twin:
g4_token_mean_per_micro_batch_fixed.py)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, MAX_LEN, CORPUS = 16, 12, 512
AUDIT = {"batch_size": 16, "accumulation": 4}


def corpus():
    """Sequences of 1..MAX_LEN tokens (padded with 0) whose targets are a
    fixed function of the tokens, and their masks."""
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(1, VOCAB, (CORPUS, MAX_LEN), generator=g)
    lengths = torch.randint(1, MAX_LEN + 1, (CORPUS,), generator=g)
    mask = torch.arange(MAX_LEN)[None, :] < lengths[:, None]
    tokens = tokens * mask
    return tokens, (tokens * 3 + 1) % VOCAB * mask, mask


def make_model():
    return nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, 32), nn.ReLU(),
                         nn.Linear(32, VOCAB))


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def batches(seed, batch_size):
    tokens, targets, mask = corpus()
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(CORPUS, generator=g)
        for i in range(0, CORPUS - batch_size + 1, batch_size):
            rows = order[i:i + batch_size]
            yield {"tokens": tokens[rows], "targets": targets[rows], "mask": mask[rows]}


def token_loss_sum(model, batch):
    """The summed cross-entropy over the batch's real (unpadded) tokens, and
    how many there are."""
    logits = model(batch["tokens"])
    losses = F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), reduction="none")
    mask = batch["mask"].flatten().float()
    return (losses * mask).sum(), mask.sum()


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    for batch in micro_batches:
        total, count = token_loss_sum(model, batch)
        loss = total / count / len(micro_batches)  # this micro-batch's token mean
        loss.backward()
    optimizer.step()
    return loss


def train(step, steps=60):
    """The script's own loop: micro-batches are every K-th sequence."""
    torch.manual_seed(0)
    model = make_model()
    optimizer = make_optimizer(model)
    data = batches(0, AUDIT["batch_size"])
    for i in range(steps):
        batch = next(data)
        loss = step(model, optimizer, [{k: v[j::4] for k, v in batch.items()} for j in range(4)])
        if i % 20 == 0:
            print(f"step {i}: loss {float(loss):.4f}")


if __name__ == "__main__":
    train(train_step)
