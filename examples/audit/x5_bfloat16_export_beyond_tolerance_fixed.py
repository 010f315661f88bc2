"""x5_bfloat16_export_beyond_tolerance.py with its pitfall fixed: exported in
float32, which the stated 5% tolerance needs for inputs with a large
offset."""
from common import export_traced, train
from x5_bfloat16_export_beyond_tolerance import (AUDIT, batches, make_model,  # noqa: F401
                                                 make_optimizer, train_step)


def export(model, example_batch, path):
    x, _ = example_batch
    return export_traced(model, x, path)


if __name__ == "__main__":
    train(globals())
