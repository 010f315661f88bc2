"""c3_rng_state_not_saved.py with its pitfall fixed: the checkpoint holds
torch.get_rng_state() and the load restores it."""
from c3_rng_state_not_saved import batches, evaluate, make_model, make_optimizer  # noqa: F401
from common import load_checkpoint, save_checkpoint, train, train_step  # noqa: F401

if __name__ == "__main__":
    train(globals())
