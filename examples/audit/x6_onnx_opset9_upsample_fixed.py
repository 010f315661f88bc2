"""x6_onnx_opset9_upsample.py with its pitfall fixed: exported at opset 14,
whose Resize operator matches F.interpolate's bilinear mode."""
from common import train
from x6_onnx_opset9_upsample import batches, make_model, make_optimizer, train_step  # noqa: F401
from x6_onnx_opset9_upsample import export as export_opset


def export(model, example_batch, path):
    return export_opset(model, example_batch, path, opset=14)


if __name__ == "__main__":
    train(globals())
