"""S3: the cats-vs-dogs networks of "GPU vs CPU Deep Learning: Training Performance of Convolutional Networks".

The post grew a widely copied Keras "hello world" CNN step by step and timed each step on a GPU and CPUs:
- `catdog-original`: 64x64 input, Conv 32 → MaxPool → Conv 32 → MaxPool → Dense 128 → Dense 1 (about 80%).
- `catdog-improved`: one more Conv 64 + MaxPool pair and Dropout 0.5 before the last layer (about 90%).
- `catdog-hires`: 128x128 input, one more Conv + MaxPool pair, 64 filters everywhere (about 94%; GPU 425 → 333
  images/s).
- `catdog-deep`: an "unnecessarily deep" network of 30+ convolutions that kept the GPU 100% busy at about the
  improved net's speed while the CPU managed about 3 images/s.

Every network trains as the tutorial did: Adam with Keras' defaults (learning rate 1e-3, epsilon 1e-7), binary
cross-entropy, batches of 32, 25 epochs, on 8,000 training and 2,000 test images, augmented on the CPU by
Keras' `ImageDataGenerator(rescale=1/255, shear_range=0.2, zoom_range=0.2, horizontal_flip=True)` (see
`KerasAugmentation`; `--set augment=false` turns it off, as the post did to go from 425 to 533 images/s).
Convolutions are 3x3 'valid' with ReLU, pooling 2x2, weights Keras' Glorot-uniform with zero biases. The last
layer is one logit: the sigmoid lives in the loss (and in `predict`), which is the same function, stabler.

Our reading of `catdog-deep`, which the post does not spell out: `depth` 3x3 'same' convolutions, each followed
by batch normalisation and ReLU, in four blocks of equal size ending in a 2x2 max-pool, with 32, 64, 128 and
256 filters (so every convolution costs about the same), then the same Dense 128 → Dropout → Dense 1 head.
Batch normalisation is what lets a plain 32-layer stack learn at all.

    devicebench run catdog-original --devices cpu --data synthetic --epochs 2 --max-steps 20
"""

from __future__ import annotations

from functools import partial

from torch import nn

from devicebench.data.augmentation import KerasAugmentation, Rescale
from devicebench.workloads import Hyperparameters, Published, QuickSettings, workload
from devicebench.workloads.optimizers import adam
from devicebench.workloads.outputs import BinaryCrossEntropy

KERNEL_SIZE = 3
DENSE_UNITS = 128
DROPOUT = 0.5  # probability of dropping a unit
DEEP_BLOCK_FILTERS = (32, 64, 128, 256)
# The deepest `catdog-deep` devicebench builds: 8 times the post's 30-odd convolutions (about 50 M parameters,
# a minute a step on a CPU). `depth` is the one hyperparameter that multiplies modules; a larger value, from
# `--set` or a checkpoint, is refused before anything is built.
MAX_DEEP_DEPTH = 256

TRAINING = {
    "batch_size": 32,
    "epochs": 25,
    "learning_rate": 1e-3,  # Keras Adam defaults
    "adam_epsilon": 1e-7,
    "augment": True,  # Keras ImageDataGenerator shear, zoom and flip, on the CPU in the loader workers
    "shear": 0.2,  # radians, the largest shear either way (see KerasAugmentation)
    "zoom": 0.2,  # zoom factors drawn from [0.8, 1.2]
}

catdog_workload = partial(  # what every network shares: the seed, the data, the loss, the optimizer, the augmentation
    workload,
    seed="S3",
    dataset="cats-vs-dogs",
    loss=BinaryCrossEntropy,
    optimizer=adam,
    output="binary_logit",
    preprocessing=lambda hyperparameters: (
        KerasAugmentation(shear=hyperparameters["shear"], zoom=hyperparameters["zoom"])
        if hyperparameters["augment"]
        else Rescale()
    ),
)
HARDWARE = "Tesla V100 vs dual Xeon Silver 4110 (16 cores) and a VirtualBox VM, Keras on TensorFlow"


def _glorot(model: nn.Module) -> nn.Module:
    """Keras' default initialisation: Glorot-uniform weights, zero biases."""
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(module.weight)
            assert module.bias is not None  # every layer of these networks is built with one
            nn.init.zeros_(module.bias)
    return model


def _head(features: int, dropout: bool) -> list[nn.Module]:
    """Flatten → Dense 128 ReLU → (Dropout 0.5) → Dense 1."""
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(features, DENSE_UNITS), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(DROPOUT))
    return layers + [nn.Linear(DENSE_UNITS, 1)]


def conv_pool_stack(image_size: int, filters: tuple[int, ...], dropout: bool) -> nn.Module:
    """(Conv 3x3 'valid' + ReLU + MaxPool 2) per entry of `filters`, then the dense head."""
    layers: list[nn.Module] = []
    channels, size = 3, image_size
    for out_channels in filters:
        layers += [nn.Conv2d(channels, out_channels, KERNEL_SIZE), nn.ReLU(), nn.MaxPool2d(2)]
        channels, size = out_channels, (size - KERNEL_SIZE + 1) // 2  # 'valid' convolution, then floor pooling
    return _glorot(nn.Sequential(*layers, *_head(channels * size * size, dropout)))


@catdog_workload(
    name="catdog-original",
    summary="64x64: 2 x (Conv 3x3 32 + MaxPool) → Dense 128 → Dense 1 sigmoid; Adam",
    image_shape=(3, 64, 64),
    defaults=TRAINING,
    published=Published(
        speedup=None,
        basis="the post gives no CPU time for this network: it left the GPU 0-10% busy, input-bound",
        hardware=HARDWARE,
        accuracy=0.80,
    ),
)
def catdog_original(hyperparameters: Hyperparameters) -> nn.Module:
    return conv_pool_stack(64, (32, 32), dropout=False)


@catdog_workload(
    name="catdog-improved",
    summary="64x64: 3 x (Conv 3x3 + MaxPool) 32, 32, 64 → Dense 128 → Dropout 0.5 → Dense 1 sigmoid; Adam",
    image_shape=(3, 64, 64),
    defaults=TRAINING,
    published=Published(
        speedup=23.0,
        basis="GPU/CPU training throughput ratio as published; GPU 425 images/s with augmentation, 533 without",
        hardware=HARDWARE,
        accuracy=0.90,
        samples_per_s={"gpu": 425.0},
    ),
)
def catdog_improved(hyperparameters: Hyperparameters) -> nn.Module:
    return conv_pool_stack(64, (32, 32, 64), dropout=True)


@catdog_workload(
    name="catdog-hires",
    summary="128x128: 4 x (Conv 3x3 64 + MaxPool) → Dense 128 → Dropout 0.5 → Dense 1 sigmoid; Adam",
    image_shape=(3, 128, 128),
    defaults=TRAINING,
    published=Published(
        speedup=None,
        basis="GPU throughput only: 333 images/s, down from 425 at 64x64",
        hardware=HARDWARE,
        accuracy=0.94,
        samples_per_s={"gpu": 333.0},
    ),
    quick=QuickSettings(max_steps=10, max_eval_steps=2),  # four times the pixels of the 64x64 nets
)
def catdog_hires(hyperparameters: Hyperparameters) -> nn.Module:
    return conv_pool_stack(128, (64, 64, 64, 64), dropout=True)


class DeepCNN(nn.Module):
    """`depth` 3x3 'same' convolutions (+ batch norm + ReLU) in four pooled blocks, then the dense head."""

    def __init__(self, depth: int, image_size: int = 64) -> None:
        super().__init__()
        if depth < len(DEEP_BLOCK_FILTERS):
            raise ValueError(
                f"depth must be at least {len(DEEP_BLOCK_FILTERS)} (one convolution per block), got {depth}"
            )
        per_block = [depth // 4 + (block < depth % 4) for block in range(4)]  # earlier blocks take the remainder
        layers: list[nn.Module] = []
        channels = 3
        for convolutions, filters in zip(per_block, DEEP_BLOCK_FILTERS):
            for _ in range(convolutions):
                layers += [nn.Conv2d(channels, filters, KERNEL_SIZE, padding=1), nn.BatchNorm2d(filters), nn.ReLU()]
                channels = filters
            layers.append(nn.MaxPool2d(2))
        size = image_size // 2 ** len(DEEP_BLOCK_FILTERS)
        self.layers = _glorot(nn.Sequential(*layers, *_head(channels * size * size, dropout=True)))

    def forward(self, images):
        return self.layers(images)


@catdog_workload(
    name="catdog-deep",
    summary="64x64: `depth` (default 32) x (Conv 3x3 'same' + BatchNorm) in 4 pooled blocks → Dense 128 → 1",
    image_shape=(3, 64, 64),
    defaults={**TRAINING, "depth": 32},  # convolution layers; --set depth=8,16,32 sweeps it
    published=Published(
        speedup=100.0,
        basis="training throughput: GPU about the improved net's speed, CPU about 3 images/s",
        hardware=HARDWARE,
        samples_per_s={"cpu": 3.0},
    ),
    quick=QuickSettings(max_steps=5, max_eval_steps=2),  # about 7 GFLOP a training image: 1.3 s a step on 2 cores
    size_bounds={"depth": MAX_DEEP_DEPTH},
)
def catdog_deep(hyperparameters: Hyperparameters) -> nn.Module:
    return DeepCNN(hyperparameters["depth"])
