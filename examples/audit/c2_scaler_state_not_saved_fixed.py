"""c2_scaler_state_not_saved.py with its pitfall fixed: the checkpoint holds
scaler.state_dict() too, and the load restores it."""
import torch

from c2_scaler_state_not_saved import (batches, evaluate, make_model, make_optimizer,  # noqa: F401
                                       make_scaler, train_step)
from common import train


def save_checkpoint(path, model, optimizer, scaler=None):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(), "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer, scaler=None):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scaler.load_state_dict(ckpt["scaler"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
