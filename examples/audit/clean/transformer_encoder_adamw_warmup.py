"""Style: a modern transformer training setup as an ML-platform team
writes it: token + learned positional embeddings, nn.TransformerEncoder,
AdamW with decoupled weight decay groups, warm-up then cosine decay,
gradient clipping.

Sequences of 10 tokens are classified by whether token 1 occurs before
token 2. Deliberately includes:

- nn.TransformerEncoder of two nn.TransformerEncoderLayer (pre-norm,
  batch_first, dropout 0.1 inside attention and the feed-forward block)
  with a final LayerNorm, embedding dropout, and masked mean pooling
  over a key padding mask (token 0 is padding);
- AdamW: weight decay on matrices only (no decay for biases, LayerNorm
  gains, embeddings and the positional table);
- a linear warm-up + cosine LambdaLR from the adapter's make_scheduler,
  stepped after every train_step; the checkpoint saves and restores it
  (save_checkpoint/load_checkpoint take it as their scheduler keyword);
- clip_grad_norm_(max_norm=1.0) after all micro-batches' backward;
- the checkpoint holds torch's RNG state, because dropout draws from it.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, LENGTH, WIDTH, HEADS = 12, 10, 16, 2
WARMUP, TOTAL = 3, 200


class OrderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH, padding_idx=0)
        self.positions = nn.Parameter(0.02 * torch.randn(1, LENGTH, WIDTH))
        self.dropout = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=2 * WIDTH, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(WIDTH),
                                             enable_nested_tensor=False)
        self.classify = nn.Linear(WIDTH, 2)

    def forward(self, tokens):
        pad = tokens == 0
        h = self.dropout(self.tokens(tokens) + self.positions)
        h = self.encoder(h, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.classify(pooled)


def sample(n, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (n, LENGTH), generator=g)
    lengths = torch.randint(LENGTH // 2, LENGTH + 1, (n,), generator=g)
    tokens[torch.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    first = lambda t: torch.where(tokens == t, torch.arange(LENGTH), LENGTH).min(1).values  # noqa: E731
    return tokens, (first(1) < first(2)).long()


def make_model():
    return OrderClassifier()


def warmup_cosine(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, TOTAL - WARMUP)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "tokens" not in n
             and n != "positions"]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                              {"params": rest, "weight_decay": 0.0}], lr=2e-3, betas=(0.9, 0.98))


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)


def batches(seed, batch_size):
    tokens, labels = sample(1024, seed=99)
    g = torch.Generator().manual_seed(seed)
    while True:
        for idx in torch.randperm(len(labels), generator=g).split(batch_size):
            if len(idx) == batch_size:
                yield tokens[idx], labels[idx]


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad(set_to_none=True)
    k = len(micro_batches)
    losses = []
    for tokens, labels in micro_batches:
        loss = F.cross_entropy(model(tokens), labels) / k
        loss.backward()
        losses.append(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    return torch.stack(losses).sum()


@torch.no_grad()
def evaluate(model):
    tokens, labels = sample(256, seed=100)
    before = model.training
    model.eval()
    logits = model(tokens)
    model.train(before)
    return {"accuracy": (logits.argmax(-1) == labels).float().mean().item(),
            "nll": F.cross_entropy(logits, labels).item()}


def save_checkpoint(path, model, optimizer, *, scheduler):
    torch.save({"model": model.state_dict(),
                "optim": optimizer.state_dict(),
                "lr_schedule": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer, *, scheduler):
    blob = torch.load(path)
    model.load_state_dict(blob["model"])
    optimizer.load_state_dict(blob["optim"])
    scheduler.load_state_dict(blob["lr_schedule"])
    torch.set_rng_state(blob["torch_rng"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = make_model()
    optimizer = make_optimizer(model)
    schedule = make_scheduler(optimizer)
    stream = batches(seed=0, batch_size=32)
    for it in range(150):
        tokens, labels = next(stream)
        loss = train_step(model, optimizer, [(tokens, labels)])
        schedule.step()
        if it % 50 == 0:
            print(it, f"{float(loss):.3f}", f"lr={optimizer.param_groups[0]['lr']:.2e}")
    print(evaluate(model))
