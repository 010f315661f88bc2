"""Style: the PyTorch text-classification tutorial's pattern: variable-length
token lists concatenated into one flat tensor with offsets, an
EmbeddingBag, a collate function, Adagrad.

Each "document" is a bag of 3 to 15 token ids; its topic (one of 4) is
the topic most of its topic-specific tokens belong to. Deliberately
includes:

- batches that are *not* splittable along dimension 0: (flat token ids,
  offsets, labels), so the adapter defines split_batch, which regroups
  whole documents and rebases the offsets;
- nn.EmbeddingBag(mode="mean") with per_sample_weights=None and a
  uniform init as the tutorial does;
- Adagrad (its state: the sum of squared gradients and the step);
- a loss that is a mean over documents, so every document weighs the
  same and dividing by len(micro_batches) is exact;
- a checkpoint with model and optimizer state.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, TOPICS, EMBED = 200, 4, 24


def documents(count, seed):
    """A list of (token tensor, label) pairs."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for _ in range(count):
        topic = int(torch.randint(TOPICS, (1,), generator=g))
        n = int(torch.randint(3, 16, (1,), generator=g))
        on_topic = torch.randint(0, 40, (n,), generator=g) + 40 * topic + 40
        noise = torch.randint(1, VOCAB, (n,), generator=g)
        pick = torch.rand(n, generator=g) < 0.6
        docs.append((torch.where(pick, on_topic, noise) % VOCAB, topic))
    return docs


def collate(docs):
    tokens = torch.cat([t for t, _ in docs])
    offsets = torch.tensor([0] + [len(t) for t, _ in docs[:-1]]).cumsum(0)
    labels = torch.tensor([label for _, label in docs])
    return tokens, offsets, labels


def split_batch(batch, k):
    tokens, offsets, labels = batch
    ends = torch.cat([offsets[1:], torch.tensor([len(tokens)])])
    per = len(labels) // k
    parts = []
    for j in range(k):
        lo, hi = j * per, (j + 1) * per
        start, stop = int(offsets[lo]), int(ends[hi - 1])
        parts.append((tokens[start:stop], offsets[lo:hi] - start, labels[lo:hi]))
    return parts


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCAB, EMBED, mode="mean")
        self.fc = nn.Linear(EMBED, TOPICS)
        self.init_weights()

    def init_weights(self):
        r = 0.5
        self.embedding.weight.data.uniform_(-r, r)
        self.fc.weight.data.uniform_(-r, r)
        self.fc.bias.data.zero_()

    def forward(self, tokens, offsets):
        return self.fc(self.embedding(tokens, offsets))


def make_model():
    return BagOfWords()


def make_optimizer(model):
    return torch.optim.Adagrad(model.parameters(), lr=0.2)


def batches(seed, batch_size):
    docs = documents(600, seed=31)
    order_rng = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(docs), generator=order_rng).tolist()
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield collate([docs[j] for j in order[i:i + batch_size]])


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    accumulated = 0.0
    for tokens, offsets, labels in micro_batches:
        loss = F.cross_entropy(model(tokens, offsets), labels)
        (loss / len(micro_batches)).backward()
        accumulated += loss.item() / len(micro_batches)
    optimizer.step()
    return accumulated


def evaluate(model):
    tokens, offsets, labels = collate(documents(200, seed=32))
    model.eval()
    with torch.no_grad():
        predicted = model(tokens, offsets).argmax(1)
    model.train()
    return (predicted == labels).double().mean()


def save_checkpoint(path, model, optimizer):
    torch.save({"model_state_dict": model.state_dict(),
                "optimizer_state_dict": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = make_model()
    optimizer = make_optimizer(model)
    source = batches(0, 32)
    for epoch_step in range(100):
        loss = train_step(model, optimizer, split_batch(next(source), 2))
    print(f"loss {loss:.3f} accuracy {float(evaluate(model)):.3f}")
