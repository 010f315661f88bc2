"""d5_metric_on_rank0_only.py with its pitfall fixed: the team's evaluate()
(common.py), which sums correct predictions and counts over the ranks
before dividing."""
from common import evaluate, train  # noqa: F401
from d5_metric_on_rank0_only import (batches, make_model, make_optimizer, train_step,  # noqa: F401
                                     wrap_ddp)

if __name__ == "__main__":
    train(globals())
