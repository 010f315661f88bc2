"""Style: an NLP team's sequence tagger, a config dataclass and a model
class, batches as dicts of padded tensors.

A bidirectional LSTM tags every token of variable-length sentences (3 to
20 tokens, padded with 0). The tag of a token depends on the token and the
one before it, so the recurrence matters. Deliberately includes:

- nn.Embedding with padding_idx=0, plus a second, *frozen* embedding of
  "pretrained" token features, declared in AUDIT["frozen"] and left out
  of the optimizer;
- pack_padded_sequence(enforce_sorted=False) / pad_packed_sequence with
  total_length, so every micro-batch has the big batch's time length;
- a token-weighted loss: the summed cross-entropy over the real tokens
  of every micro-batch, divided by the real-token count of the whole
  accumulated batch (micro-batches with longer sentences weigh more, as
  in the big batch);
- Adam.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


@dataclass(frozen=True)
class TaggerConfig:
    vocab: int = 40
    tags: int = 6
    max_len: int = 20
    word_dim: int = 16
    feature_dim: int = 4
    hidden: int = 16
    lr: float = 3e-3


CFG = TaggerConfig()
AUDIT = {"batch_size": 16, "accumulation": 4, "frozen": ["features."]}


def corpus(size, seed, cfg=CFG):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, cfg.max_len + 1, (size,), generator=g)
    tokens = torch.randint(1, cfg.vocab, (size, cfg.max_len), generator=g)
    real = torch.arange(cfg.max_len)[None, :] < lengths[:, None]
    tokens = tokens * real
    previous = torch.cat([torch.zeros(size, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    tags = torch.where(real, (tokens + 2 * previous) % cfg.tags, torch.full_like(tokens, -100))
    return {"tokens": tokens, "lengths": lengths, "tags": tags}


class BiLSTMTagger(nn.Module):
    def __init__(self, cfg=CFG):
        super().__init__()
        self.cfg = cfg
        self.words = nn.Embedding(cfg.vocab, cfg.word_dim, padding_idx=0)
        self.features = nn.Embedding(cfg.vocab, cfg.feature_dim, padding_idx=0)
        self.features.weight.requires_grad_(False)  # pretrained elsewhere, kept as is
        self.lstm = nn.LSTM(cfg.word_dim + cfg.feature_dim, cfg.hidden, batch_first=True,
                            bidirectional=True)
        self.out = nn.Linear(2 * cfg.hidden, cfg.tags)

    def forward(self, tokens, lengths):
        emb = torch.cat([self.words(tokens), self.features(tokens)], dim=-1)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        hidden, _ = self.lstm(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True,
                                        total_length=tokens.shape[1])
        return self.out(hidden)


def make_model():
    return BiLSTMTagger()


def make_optimizer(model):
    return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=CFG.lr)


def batches(seed, batch_size):
    data = corpus(640, seed=2024)
    g = torch.Generator().manual_seed(seed)
    n = len(data["tokens"])
    while True:
        order = torch.randperm(n, generator=g)
        for i in range(0, n - batch_size + 1, batch_size):
            rows = order[i:i + batch_size]
            yield {key: value[rows] for key, value in data.items()}


def summed_token_loss(model, batch):
    logits = model(batch["tokens"], batch["lengths"])
    return F.cross_entropy(logits.flatten(0, 1), batch["tags"].flatten(), ignore_index=-100,
                           reduction="sum")


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    n_tokens = sum(int(b["lengths"].sum()) for b in micro_batches)
    step_loss = 0.0
    for batch in micro_batches:
        loss = summed_token_loss(model, batch) / n_tokens
        loss.backward()
        step_loss += float(loss)
    optimizer.step()
    return step_loss


def evaluate(model):
    data = corpus(200, seed=7)
    mode = model.training
    model.eval()
    with torch.no_grad():
        pred = model(data["tokens"], data["lengths"]).argmax(-1)
    model.train(mode)
    real = data["tags"] != -100
    return {"token_accuracy": float((pred[real] == data["tags"][real]).float().mean())}


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "config": CFG.__dict__}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    tagger = make_model()
    opt = make_optimizer(tagger)
    stream = batches(0, 16)
    for step in range(100):
        batch = next(stream)
        micro = [{k: v[j::2] for k, v in batch.items()} for j in range(2)]
        loss = train_step(tagger, opt, micro)
    print(f"loss {loss:.3f}", evaluate(tagger))
