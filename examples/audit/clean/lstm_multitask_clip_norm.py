"""Style: a multi-task model as an applied team builds it: one shared
encoder, two heads, a weighted sum of two losses, gradients clipped by
global norm, all in a hand-written loop with explicit variable names.

An LSTM encoder reads sensor sequences (5 channels, 12 steps); head A
classifies the activity (4 classes), head B regresses its intensity.
Deliberately includes:

- nn.LSTM (2 layers, no dropout) + LayerNorm on its last hidden state,
  two nn.Linear heads;
- loss = cross_entropy + 0.5 * smooth_l1, each a mean over the
  micro-batch, their sum divided by len(micro_batches);
- clip_grad_norm_(max_norm=5.0, error_if_nonfinite=True) once per step;
- SGD with momentum 0.9 and nesterov, weight decay 1e-4;
- batches as a dict; evaluate returns both metrics in a dict;
- a checkpoint that also stores the training configuration.
"""
import torch
import torch.nn.functional as F
from torch import nn

CHANNELS, STEPS, ACTIVITIES = 5, 12, 4
SETTINGS = {"hidden": 16, "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4,
            "intensity_weight": 0.5, "clip": 5.0}


def sensor_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    activity = torch.randint(ACTIVITIES, (n,), generator=g)
    intensity = torch.rand(n, generator=g)
    t = torch.linspace(0, 1, STEPS)
    base = torch.stack([torch.sin((a + 1) * 6.28 * t) for a in range(ACTIVITIES)])
    x = base[activity][:, :, None] * (0.5 + intensity)[:, None, None]
    x = x.expand(n, STEPS, CHANNELS) + 0.2 * torch.randn(n, STEPS, CHANNELS, generator=g)
    return {"signal": x.contiguous(), "activity": activity, "intensity": intensity}


class MultiTaskNet(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.encoder = nn.LSTM(CHANNELS, hidden, num_layers=2, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.activity_head = nn.Linear(hidden, ACTIVITIES)
        self.intensity_head = nn.Linear(hidden, 1)

    def forward(self, signal):
        _, (h, _) = self.encoder(signal)
        z = self.norm(h[-1])
        return self.activity_head(z), self.intensity_head(z).squeeze(-1)


def make_model():
    return MultiTaskNet(SETTINGS["hidden"])


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=SETTINGS["lr"], momentum=SETTINGS["momentum"],
                           nesterov=True, weight_decay=SETTINGS["weight_decay"])


def batches(seed, batch_size):
    data = sensor_data(960, seed=101)
    g = torch.Generator().manual_seed(seed)
    count = len(data["activity"])
    while True:
        shuffled = torch.randperm(count, generator=g)
        for first in range(0, count - batch_size + 1, batch_size):
            sel = shuffled[first:first + batch_size]
            yield {name: column[sel] for name, column in data.items()}


def multitask_loss(model, batch):
    activity_logits, intensity_pred = model(batch["signal"])
    activity_loss = F.cross_entropy(activity_logits, batch["activity"])
    intensity_loss = F.smooth_l1_loss(intensity_pred, batch["intensity"])
    return activity_loss + SETTINGS["intensity_weight"] * intensity_loss


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    num_micro = len(micro_batches)
    step_loss = torch.zeros(())
    for batch in micro_batches:
        loss = multitask_loss(model, batch) / num_micro
        loss.backward()
        step_loss += loss.detach()
    nn.utils.clip_grad_norm_(model.parameters(), SETTINGS["clip"], error_if_nonfinite=True)
    optimizer.step()
    return step_loss


def evaluate(model):
    data = sensor_data(240, seed=102)
    model.eval()
    with torch.no_grad():
        logits, intensity = model(data["signal"])
    model.train()
    return {"activity_accuracy": (logits.argmax(1) == data["activity"]).float().mean().item(),
            "intensity_mae": (intensity - data["intensity"]).abs().mean().item()}


def save_checkpoint(path, model, optimizer):
    torch.save({"settings": dict(SETTINGS), "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path)
    if checkpoint["settings"] != SETTINGS:
        raise ValueError(f"checkpoint trained with {checkpoint['settings']}, not {SETTINGS}")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = make_model()
    optimizer = make_optimizer(model)
    stream = batches(0, 32)
    for step in range(150):
        loss = train_step(model, optimizer, [next(stream)])
    print(f"loss {float(loss):.3f}", evaluate(model))
