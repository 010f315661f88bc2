"""c5_strict_false_hides_missing_keys.py with its pitfall fixed: the whole
state dict (buffers included) is saved and loaded strictly."""
from c5_strict_false_hides_missing_keys import (batches, evaluate, make_model,  # noqa: F401
                                                make_optimizer)
from common import load_checkpoint, save_checkpoint, train, train_step  # noqa: F401

if __name__ == "__main__":
    train(globals())
