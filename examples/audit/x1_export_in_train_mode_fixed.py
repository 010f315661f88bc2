"""x1_export_in_train_mode.py with its pitfall fixed: model.eval() before
the trace, so the graph holds dropout off and BatchNorm's running
statistics."""
from common import export_traced, train
from x1_export_in_train_mode import batches, make_model, make_optimizer, train_step  # noqa: F401


def export(model, example_batch, path):
    x, _ = example_batch
    return export_traced(model, x, path)


if __name__ == "__main__":
    train(globals())
