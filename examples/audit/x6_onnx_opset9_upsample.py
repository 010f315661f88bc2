"""Digits CNN that upsamples the 8x8 images bilinearly before its
convolution, SGD, deployed as ONNX. Pitfall X6: exported at ONNX opset 9,
whose Upsample operator has other semantics than PyTorch's
F.interpolate(mode="bilinear", align_corners=False): onnxruntime's outputs
differ from eager's far beyond float rounding (the fixed twin:
x6_onnx_opset9_upsample_fixed.py)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from common import batches, train, train_step  # noqa: F401


class UpsampleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return self.fc(F.relu(self.conv(x)).flatten(1))


def make_model():
    return UpsampleCNN()


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def export(model, example_batch, path, opset=9):
    x, _ = example_batch
    model.eval()
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["x"],
                      output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


if __name__ == "__main__":
    train(globals())
