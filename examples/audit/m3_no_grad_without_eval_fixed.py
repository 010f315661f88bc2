"""m3_no_grad_without_eval.py with its pitfall fixed: model.eval() as well
as torch.no_grad() during the evaluation, model.train() after it (the
evaluation of m1_eval_without_eval_mode_fixed.py)."""
from common import train
from m1_eval_without_eval_mode_fixed import evaluate  # noqa: F401
from m3_no_grad_without_eval import batches, make_model, make_optimizer, train_step  # noqa: F401

if __name__ == "__main__":
    train(globals())
