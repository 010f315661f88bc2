"""Style: a team that keeps its loss in a criterion nn.Module of its own
(class weights for an imbalanced dataset, label smoothing), clips
gradients by value, and uses Adam with AMSGrad.

An MLP classifies 6-dimensional Gaussian blobs of 4 very unequal
classes. Deliberately includes:

- WeightedSmoothedCE(nn.Module): class weights in a buffer, label
  smoothing 0.05; it returns the weighted *sum* over the samples and the
  sum of their weights, because a class-weighted mean is a ratio: each
  micro-batch's own weighted mean would weigh micro-batches by their
  class mix. train_step divides every micro-batch's weighted sum by the
  total weight of all micro-batches of the step (the big batch's mean);
- nn.utils.clip_grad_value_(clip_value=0.5) before the step;
- Adam(amsgrad=True);
- evaluate with the criterion too (a balanced validation loss);
- a checkpoint with model and optimizer.
"""
import torch
import torch.nn.functional as F
from torch import nn

CLASS_SHARE = torch.tensor([0.55, 0.25, 0.15, 0.05])
DIM = 6


class WeightedSmoothedCE(nn.Module):
    """Inverse-frequency class weights and label smoothing."""

    def __init__(self, class_share=CLASS_SHARE, smoothing=0.05):
        super().__init__()
        self.register_buffer("weight", 1.0 / (len(class_share) * class_share))
        self.smoothing = smoothing

    def forward(self, logits, target):
        """(the weighted sum of the per-sample losses, the sum of the weights)"""
        log_p = F.log_softmax(logits, dim=-1)
        smooth = torch.full_like(log_p, self.smoothing / (logits.shape[-1] - 1))
        smooth.scatter_(1, target[:, None], 1.0 - self.smoothing)
        per_sample = -(smooth * log_p).sum(-1)
        w = self.weight[target]
        return (w * per_sample).sum(), w.sum()


def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.multinomial(CLASS_SHARE, n, replacement=True, generator=g)
    centres = torch.randn(len(CLASS_SHARE), DIM, generator=torch.Generator().manual_seed(0))
    return centres[labels] * 1.5 + torch.randn(n, DIM, generator=g), labels


def make_model():
    return nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, len(CLASS_SHARE)))


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)


def batches(seed, batch_size):
    x, y = blobs(2000, seed=61)
    g = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(y), generator=g)
        for b in range(len(y) // batch_size):
            rows = order[b * batch_size:(b + 1) * batch_size]
            yield x[rows], y[rows]


def train_step(model, optimizer, micro_batches):
    criterion = WeightedSmoothedCE()
    optimizer.zero_grad()
    with torch.no_grad():
        total_weight = sum(criterion.weight[y].sum() for _, y in micro_batches)
    step_loss = 0.0
    for x, y in micro_batches:
        weighted_sum, _ = criterion(model(x), y)
        loss = weighted_sum / total_weight
        loss.backward()
        step_loss += loss.item()
    nn.utils.clip_grad_value_(model.parameters(), clip_value=0.5)
    optimizer.step()
    return step_loss


def evaluate(model):
    x, y = blobs(500, seed=62)
    model.eval()
    with torch.no_grad():
        weighted_sum, weight = WeightedSmoothedCE()(model(x), y)
        accuracy = (model(x).argmax(1) == y).float().mean()
    model.train()
    return {"balanced_loss": weighted_sum / weight, "accuracy": accuracy}


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    saved = torch.load(path)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])


if __name__ == "__main__":
    torch.manual_seed(0)
    clf = make_model()
    adam = make_optimizer(clf)
    stream = batches(0, 64)
    for _ in range(300):
        x, y = next(stream)
        train_step(clf, adam, [(x[:32], y[:32]), (x[32:], y[32:])])
    print({k: float(v) for k, v in evaluate(clf).items()})
