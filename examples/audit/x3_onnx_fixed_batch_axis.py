"""Digits MLP, Adam, deployed as ONNX in onnxruntime. Pitfall X3:
torch.onnx.export without dynamic_axes, so the graph's batch axis is fixed
at the example's 32 rows and onnxruntime refuses any other batch size (the
fixed twin: x3_onnx_fixed_batch_axis_fixed.py)."""
import torch

from common import batches, mlp, train, train_step  # noqa: F401


def make_model():
    return mlp(64)


def make_optimizer(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def export(model, example_batch, path):
    x, _ = example_batch
    model.eval()
    torch.onnx.export(model, x, path, input_names=["x"], output_names=["logits"])
    return path


if __name__ == "__main__":
    train(globals())
