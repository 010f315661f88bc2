"""c8_whole_model_pickled.py with its pitfall fixed: the checkpoint holds
model.state_dict() beside the optimizer's (common.py's save_state), so it
loads into any model the code builds with the same parameter names."""
from c8_whole_model_pickled import (batches, evaluate, make_model,  # noqa: F401
                                    make_optimizer)
from common import load_checkpoint, save_checkpoint, train, train_step  # noqa: F401

if __name__ == "__main__":
    train(globals())
