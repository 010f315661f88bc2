"""Digits MLP with mixed precision (bfloat16 autocast on the CPU, float16 on
a GPU) and a GradScaler, checkpointed so that a preempted job can resume.
Pitfall C2: the checkpoint holds the weights, the optimizer and the RNG
state but not the scaler's: a resumed run restarts from the initial loss
scale and growth count (the fixed twin: c2_scaler_state_not_saved_fixed.py)."""
import torch

from common import DEVICE, amp_step, batches, evaluate, mlp, train  # noqa: F401
from dlcheck.audit import CpuGradScaler


def make_model():
    return mlp(48)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def make_scaler():
    if DEVICE == "cuda":
        return torch.cuda.amp.GradScaler(growth_interval=4)
    return CpuGradScaler(init_scale=2.0 ** 12, growth_interval=4)


def train_step(model, optimizer, micro_batches, scaler=None):
    return amp_step(model, optimizer, micro_batches, scaler)


def save_checkpoint(path, model, optimizer, scaler=None):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer, scaler=None):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
