"""Style: a team used to PyTorch Lightning: the model is a "task" module
with training_step / validation_step / configure_optimizers methods, and
the checkpoint follows Lightning's layout ({"state_dict",
"optimizer_states": [...], "global_step"}). The adapter only calls the
task's hooks.

A convolutional autoencoder reconstructs 12x12 images of random
Gaussian bumps. Deliberately includes:

- Conv2d encoder (strided), ConvTranspose2d decoder, a sigmoid output,
  LeakyReLU, no normalisation layers;
- unsupervised batches: a single tensor of images, no labels;
- training_step returns the per-micro-batch mean loss; the adapter's
  loop divides it by len(micro_batches) (what Lightning's
  accumulate_grad_batches does);
- configure_optimizers returns Adam with a weight decay;
- global_step kept as a buffer-free attribute of the task, saved and
  restored with the checkpoint; optimizer states as a list.
"""
import torch
import torch.nn.functional as F
from torch import nn

SIDE = 12


def bumps(n, seed):
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(n, 2, 2, generator=g) * SIDE
    widths = 1.0 + 2.0 * torch.rand(n, 2, 1, 1, generator=g)
    ys, xs = torch.meshgrid(torch.arange(SIDE).float(), torch.arange(SIDE).float(), indexing="ij")
    d2 = (ys - centres[..., 0, None, None]) ** 2 + (xs - centres[..., 1, None, None]) ** 2
    return torch.exp(-d2 / (2 * widths ** 2)).amax(dim=1, keepdim=True).clamp(0, 1)


class AutoencoderTask(nn.Module):
    def __init__(self, code=8, lr=2e-3):
        super().__init__()
        self.lr = lr
        self.global_step = 0
        self.encoder = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.1),
                                     nn.Conv2d(8, code, 3, stride=2, padding=1),
                                     nn.LeakyReLU(0.1))
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(code, 8, 3, stride=2, padding=1, output_padding=1),
            nn.LeakyReLU(0.1),
            nn.ConvTranspose2d(8, 1, 3, stride=2, padding=1, output_padding=1), nn.Sigmoid())

    def forward(self, images):
        return self.decoder(self.encoder(images))

    def training_step(self, batch):
        return F.mse_loss(self(batch), batch)

    def validation_step(self, batch):
        return F.mse_loss(self(batch), batch, reduction="sum"), batch.numel()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=1e-5)


def make_model():
    return AutoencoderTask()


def make_optimizer(model):
    return model.configure_optimizers()


def batches(seed, batch_size):
    images = bumps(768, seed=91)
    g = torch.Generator().manual_seed(seed)
    while True:
        yield from (images[ix] for ix in torch.randperm(len(images), generator=g).split(batch_size)
                    if len(ix) == batch_size)


def train_step(model, optimizer, micro_batches):
    optimizer.zero_grad()
    logged = []
    for batch in micro_batches:
        loss = model.training_step(batch)
        (loss / len(micro_batches)).backward()
        logged.append(loss.detach())
    optimizer.step()
    model.global_step += 1
    return torch.stack(logged).mean()


def evaluate(model):
    val = bumps(128, seed=92)
    model.eval()
    with torch.no_grad():
        total, count = 0.0, 0
        for batch in val.split(64):
            s, n = model.validation_step(batch)
            total, count = total + s.item(), count + n
    model.train()
    return {"val_mse": total / count}


def save_checkpoint(path, model, optimizer):
    torch.save({"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()],
                "global_step": model.global_step, "hyper_parameters": {"lr": model.lr}}, path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["state_dict"])
    optimizer.load_state_dict(ckpt["optimizer_states"][0])
    model.global_step = ckpt["global_step"]


if __name__ == "__main__":
    torch.manual_seed(0)
    task = make_model()
    optim = make_optimizer(task)
    data = batches(0, 32)
    while task.global_step < 200:
        train_step(task, optim, list(next(data).chunk(2)))
    print(task.global_step, evaluate(task))
