"""x3_onnx_fixed_batch_axis.py with its pitfall fixed: the batch axis of the
input and the output declared dynamic."""
import torch

from common import train
from x3_onnx_fixed_batch_axis import batches, make_model, make_optimizer, train_step  # noqa: F401


def export(model, example_batch, path):
    x, _ = example_batch
    model.eval()
    torch.onnx.export(model, x, path, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


if __name__ == "__main__":
    train(globals())
