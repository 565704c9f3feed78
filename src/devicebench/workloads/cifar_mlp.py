"""S2 and S4: the CIFAR multilayer perceptrons of "CPU and GPU Performance" and "Exploring CPU vs GPU Speed".

Both posts trained Keras `Sequential` models with Keras defaults, so both models here start as Keras starts
them: Glorot-uniform weights and zero biases.

S2 (`cifar10-mlp`) ends in a *sigmoid* layer trained with categorical cross-entropy. Keras' cross-entropy on
probabilities first divides the outputs by their sum and clips them to [1e-7, 1 - 1e-7], so ten independent
sigmoids are read as a distribution; `KerasNormalizedCrossEntropy` does exactly that. Plain SGD at Keras'
default learning rate 0.01, no momentum, batch 32 (1563 steps an epoch), 10 epochs.

S4 (`cifar100-mlp`) ends in softmax with categorical cross-entropy; PyTorch's `CrossEntropyLoss` on logits is
the same function, computed stably. Adam with Keras' defaults (learning rate 1e-3, epsilon 1e-7), batch 32,
100 epochs.

    devicebench run cifar10-mlp --devices cpu --data synthetic --epochs 2 --max-steps 100
"""

from __future__ import annotations

import torch
from torch import nn

from devicebench.workloads import Hyperparameters, Published, workload
from devicebench.workloads.optimizers import adam, sgd

IMAGE_SHAPE = (3, 32, 32)  # channels, height, width
INPUT_FEATURES = 3 * 32 * 32  # a flattened CIFAR image
KERAS_EPSILON = 1e-7  # Keras' backend epsilon: the clip of probabilities and Adam's epsilon


def keras_dense_stack(widths: list[int]) -> list[nn.Module]:
    """Dense layers of the given widths with ReLU between them, initialised as Keras initialises `Dense`."""
    layers: list[nn.Module] = [nn.Flatten()]
    for index, (width_in, width_out) in enumerate(zip(widths, widths[1:])):
        linear = nn.Linear(width_in, width_out)
        nn.init.xavier_uniform_(linear.weight)  # Keras' glorot_uniform
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return layers


class KerasNormalizedCrossEntropy(nn.Module):
    """Keras' `categorical_crossentropy` on probabilities: normalise to sum 1, clip, then -log p[label]."""

    def forward(self, probabilities: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        normalized = probabilities / probabilities.sum(dim=1, keepdim=True)
        clipped = normalized.clamp(KERAS_EPSILON, 1 - KERAS_EPSILON)
        return -clipped.log().gather(1, labels.unsqueeze(1)).mean()


@workload(
    name="cifar10-mlp",
    seed="S2",
    dataset="cifar10",
    summary="Flatten → Dense 3000 ReLU → Dense 1000 ReLU → Dense 10 sigmoid; SGD 0.01",
    image_shape=IMAGE_SHAPE,
    output="probabilities",  # ten sigmoids, read as a distribution by the loss
    loss=KerasNormalizedCrossEntropy,
    optimizer=sgd,
    defaults={
        "batch_size": 32,  # Keras' default: 1563 steps an epoch
        "epochs": 10,
        "learning_rate": 0.01,  # Keras SGD default
        "momentum": 0.0,
    },
    published=Published(
        speedup=6.6,
        basis="steady epoch time, 59 s CPU / 9 s GPU (end to end 593 s / 146 s = 4.1x)",
        hardware="the post's GPU and CPU (models not named), Keras",
        accuracy=0.56,
        accuracy_kind="train",
        epoch_time_s={"cpu": 59.0, "gpu": 9.0},
        end_to_end_s={"cpu": 593.0, "gpu": 146.0},
        samples_per_s={"cpu": 50_000 / 59.0, "gpu": 50_000 / 9.0},  # 50,000 images per steady epoch
    ),
)
def cifar10_mlp(hyperparameters: Hyperparameters) -> nn.Module:
    return nn.Sequential(*keras_dense_stack([INPUT_FEATURES, 3000, 1000, 10]), nn.Sigmoid())


@workload(
    name="cifar100-mlp",
    seed="S4",
    dataset="cifar100",
    image_shape=IMAGE_SHAPE,
    summary="Flatten → Dense 512 ReLU → Dense 256 ReLU → Dense 100 softmax; Adam 1e-3",
    loss=nn.CrossEntropyLoss,
    optimizer=adam,
    defaults={
        "batch_size": 32,  # Keras' default
        "epochs": 100,
        "learning_rate": 1e-3,  # Keras Adam default
        "adam_epsilon": KERAS_EPSILON,
    },
    published=Published(
        speedup=3.1,
        basis="model creation + 100 epochs, 17 min 55 s CPU / 5 min 43 s GPU",
        hardware="Tesla T4 vs the CPU of an Azure NC4as T4 v3 VM, TensorFlow",
        end_to_end_s={"cpu": 1075.0, "gpu": 343.0},
        samples_per_s={"cpu": 100 * 50_000 / 1075.0, "gpu": 100 * 50_000 / 343.0},  # 100 epochs of 50,000
    ),
)
def cifar100_mlp(hyperparameters: Hyperparameters) -> nn.Module:
    return nn.Sequential(*keras_dense_stack([INPUT_FEATURES, 512, 256, 100]))  # logits: softmax in the loss
