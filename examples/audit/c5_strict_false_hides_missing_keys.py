"""Digits MLP with BatchNorm and Adam. Pitfall C5: to keep checkpoints small
they hold only the parameters, and the load uses strict=False to get past
the complaint, so the BatchNorm running statistics silently restart from
their initial values after a resume (the fixed twin:
c5_strict_false_hides_missing_keys_fixed.py)."""
import torch

from common import batches, evaluate, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(48, batchnorm=True)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=3e-3)


def save_checkpoint(path, model, optimizer):
    weights = {name: p.detach() for name, p in model.named_parameters()}
    torch.save({"model": weights, "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"], strict=False)
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
