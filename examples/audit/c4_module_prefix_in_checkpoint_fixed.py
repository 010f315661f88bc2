"""c4_module_prefix_in_checkpoint.py with its pitfall fixed: the checkpoint
saves the wrapped module's state dict (no 'module.' prefix) and loads
into it."""
import torch

from c4_module_prefix_in_checkpoint import batches, evaluate, make_model, make_optimizer  # noqa: F401,E501
from common import train, train_step  # noqa: F401


def save_checkpoint(path, model, optimizer):
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state()}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.module.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["rng"])


if __name__ == "__main__":
    train(globals())
