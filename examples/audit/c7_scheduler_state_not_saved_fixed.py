"""c7_scheduler_state_not_saved.py with its pitfall fixed: the checkpoint
holds the scheduler's state_dict() too, saved and loaded with the
optimizer's (common.py's save_state/load_state, given the scheduler)."""
from c7_scheduler_state_not_saved import (batches, evaluate, make_model,  # noqa: F401
                                          make_optimizer, make_scheduler)
from common import load_state, save_state, train, train_step  # noqa: F401


def save_checkpoint(path, model, optimizer, scheduler):
    save_state(path, model, optimizer, scheduler=scheduler)


def load_checkpoint(path, model, optimizer, scheduler):
    load_state(path, model, optimizer, scheduler=scheduler)


if __name__ == "__main__":
    train(globals())
