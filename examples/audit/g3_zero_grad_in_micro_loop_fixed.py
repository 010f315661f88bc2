"""g3_zero_grad_in_micro_loop.py with its pitfall fixed: the gradients are
zeroed once per optimizer step, before the micro-batch loop (common.accumulate)."""
from common import accumulate, train
from g3_zero_grad_in_micro_loop import batches, evaluate, make_model, make_optimizer  # noqa: F401


def train_step(model, optimizer, micro_batches):
    return accumulate(model, optimizer, micro_batches, max_norm=5.0)


if __name__ == "__main__":
    train(globals(), accumulation=4)
