"""Your own model on your own data, on every device of this machine: the devicebench Python API in one script.

A small network learns a generated four-class problem, first with the usual step (forward, loss, backward,
optimizer step), then with a step of its own that clips the gradients. devicebench times both the same way,
on the CPU and on every GPU here, and prints the comparison tables that `devicebench run` prints. The runs are
stored where `devicebench compare` and `devicebench report` find them ($DEVICEBENCH_DB, or the default database).

    python examples/own_model.py --devices cpu      # how long it takes, measured: the README, beside the tests
    python examples/own_model.py --devices cpu --epochs 5
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import devicebench as db

FEATURES = 32  # inputs per sample
CLASSES = 4
TRAIN_SAMPLES, TEST_SAMPLES = 2048, 512
MAX_GRADIENT_NORM = 1.0  # of the clipped step


def make_data(seed: int = 0) -> db.TensorData:
    """Gaussian inputs whose class is the largest of CLASSES fixed random projections: learnable, not trivial."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(TRAIN_SAMPLES + TEST_SAMPLES, FEATURES, generator=generator)
    projections = torch.randn(FEATURES, CLASSES, generator=generator)
    labels = (inputs @ projections).argmax(dim=1)
    return db.TensorData(
        inputs[:TRAIN_SAMPLES],
        labels[:TRAIN_SAMPLES],
        inputs[TRAIN_SAMPLES:],
        labels[TRAIN_SAMPLES:],
        name="four projections",
    )


class MyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, CLASSES)
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layers(inputs)


def clipped_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], optimizer: torch.optim.Optimizer):
    """A training step of our own: gradients clipped to a norm of MAX_GRADIENT_NORM before the update. It returns
    the loss and the outputs (for the training accuracy) without reading them: devicebench reads once an epoch."""
    inputs, labels = batch
    outputs = model(inputs)
    loss = nn.functional.cross_entropy(outputs, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), MAX_GRADIENT_NORM)
    optimizer.step()
    return loss, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="auto", help="auto (the CPU and every GPU), cpu, cuda, or cpu,cuda")
    parser.add_argument("--epochs", type=int, default=3, help="the first is warm-up")
    arguments = parser.parse_args()

    data = make_data()
    settings = dict(data=data, batch_size=64, epochs=arguments.epochs, devices=arguments.devices)
    plain = db.run(model=MyNet, optimizer=lambda parameters: torch.optim.AdamW(parameters, lr=1e-3), **settings)
    plain.show()  # fitted to the terminal, as `devicebench run` prints it (table() is 200 columns of text)
    clipped = db.run(
        model=MyNet,
        train_step=clipped_step,
        name="MyNet-clipped",
        optimizer=lambda parameters: torch.optim.AdamW(parameters, lr=1e-3),
        **settings,
    )
    clipped.show()
    plain.save()
    stored = clipped.save()
    print(f"Stored in {stored}: `devicebench compare --workload 'MyNet*'` shows both again")


if __name__ == "__main__":
    main()
