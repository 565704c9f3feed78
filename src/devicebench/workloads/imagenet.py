"""The ImageNet reference models: ResNet-50 v1.5, ResNet-152 and VGG-16, whose training throughput the field's GPU
tables publish, in plain PyTorch with the shapes of the published implementations (no model zoo).

They run only when named (`in_suites=False`): ResNet-50 trains at about 10 images/s on 2 CPU cores. ImageNet itself
cannot be downloaded (see the "imagenet" dataset in data/sources.py): by default they train on a few synthetic
images of its shape, saying so; `--data-dir DIR` with DIR/train/<class>/* and DIR/val/<class>/* trains on real
ones. `--set image_size=64` trains the same model on smaller inputs, for a laptop or a test.

ResNet (He, Zhang, Ren and Sun 2015, "Deep Residual Learning for Image Recognition", table 1), version 1.5:
- Stem: Conv 7x7/2 64 → BatchNorm → ReLU → MaxPool 3x3/2 (padding 1): 224 → 112 → 56.
- Four stages of bottleneck blocks of widths 64, 128, 256 and 512; [3, 4, 6, 3] blocks for ResNet-50,
  [3, 8, 36, 3] for ResNet-152. A block: Conv 1x1 (width) → BN → ReLU → Conv 3x3 (width, stride s) → BN → ReLU →
  Conv 1x1 (4 x width) → BN, plus the shortcut, then ReLU. Stages 2-4 begin with s = 2. The shortcut is the
  identity, or Conv 1x1/s → BN where the shape changes (the paper's option B). Convolutions have no bias.
- Global average pooling → Dense 1000.
- Version 1.5 puts a downsampling block's stride on its 3x3 convolution, where the paper put it on the first 1x1:
  the model torchvision builds and NVIDIA's PyTorch ResNet-50 v1.5 tables measure (NVIDIA's README: about 0.5%
  more top-1 accuracy, about 5% fewer images/s). Parameters: 25,557,032 and 60,192,808, torchvision's figures
  (quoted as 25.6M and 60.2M).
- Initialisation as torchvision's and NVIDIA's (He et al. 2015, "Delving Deep into Rectifiers"): convolutions
  He-normal over fan-out for ReLU, BatchNorm gamma 1 and beta 0, the dense layer PyTorch's default.

VGG-16 (Simonyan and Zisserman 2014, "Very Deep Convolutional Networks for Large-Scale Image Recognition",
configuration D, no batch normalisation):
- 13 Conv 3x3 (padding 1) + ReLU in five blocks of 2, 2, 3, 3, 3 convolutions with 64, 128, 256, 512, 512 filters,
  each block ending in MaxPool 2x2/2: 224 → 7.
- Adaptive average pooling to 7x7, as torchvision's VGG (the identity at 224; other sizes keep the classifier's
  shape), then Dense 4096 → ReLU → Dropout 0.5 → Dense 4096 → ReLU → Dropout 0.5 → Dense 1000.
  Parameters: 138,357,544, torchvision's figure (the paper's: 138M).
- Initialisation as torchvision's: convolutions He-normal over fan-out with zero biases, dense layers normal with
  standard deviation 0.01 and zero biases. (The paper trained its shallow net A from normal weights of variance
  1e-2 and started D's first four convolutions and three dense layers from A's.)

Training (SGD with momentum 0.9, cross-entropy, batches of 256):
- ResNet: learning rate 0.1 per 256 images, scaled linearly with the batch (Goyal et al. 2017, "Accurate, Large
  Minibatch SGD: Training ImageNet in 1 Hour"), weight decay 1e-4 on every parameter (as torchvision's reference
  script), 90 epochs. 256 images a step is also the batch per GPU of NVIDIA's PyTorch ResNet-50 v1.5 throughput
  tables: `--batch-size` sets it, and the learning rate follows.
- VGG-16: learning rate 0.01, weight decay 5e-4, 74 epochs (Simonyan and Zisserman).
- The learning-rate schedules (ResNet: x0.1 at epochs 30, 60 and 80; VGG: x0.1 when validation accuracy stalls) are
  left out: they change what is learnt, not what a step costs. So are random crops and flips (see ImageNetInput).

    devicebench run resnet50 --devices cpu --data synthetic --set image_size=64 --batch-size 8 --epochs 2 --max-steps 2
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from devicebench.data.augmentation import ImageNetInput
from devicebench.workloads import Hyperparameters, QuickSettings, workload

CLASSES = 1000
IMAGE_SIZE = 224  # pixels per side: the size the models were designed for, and the images are decoded to
# image_size must leave VGG's fifth pooling a pixel (32 → 1): smaller inputs pool to nothing
SMALLEST_IMAGE_SIZE = 32
# The largest input devicebench builds: 4.5 times 224 per side, 21 times the pixels. ImageNet models train at up to
# about 600 pixels (EfficientNet-B7); a larger value (from --set or a checkpoint) is a typo
LARGEST_IMAGE_SIZE = 1024
REFERENCE_BATCH = 256  # images per step in the papers' and NVIDIA's tables; ResNet's learning rate is per this many
BOTTLENECK_EXPANSION = 4  # a bottleneck block's output has 4 x its width channels
STAGE_WIDTHS = (64, 128, 256, 512)
RESNET50_BLOCKS = (3, 4, 6, 3)
RESNET152_BLOCKS = (3, 8, 36, 3)
VGG16_BLOCKS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))  # filters per convolution
VGG_POOLED = 7  # pixels per side of VGG's last feature map at 224, which its classifier takes
VGG_DENSE_UNITS = 4096
DROPOUT = 0.5  # probability of dropping a unit
DENSE_INIT_STD = 0.01  # standard deviation of VGG's dense layers' initial weights


def _he_normal(convolution: nn.Conv2d) -> None:
    nn.init.kaiming_normal_(convolution.weight, mode="fan_out", nonlinearity="relu")
    if convolution.bias is not None:
        nn.init.zeros_(convolution.bias)


def _check_image_size(hyperparameters: Hyperparameters) -> None:
    """The smallest size is refused here; the largest by `size_bounds`, before anything is built."""
    size = hyperparameters["image_size"]
    if size < SMALLEST_IMAGE_SIZE:
        raise ValueError(
            f"image_size must be at least {SMALLEST_IMAGE_SIZE} pixels (VGG's five poolings halve it to 1), got {size}"
        )


# ---------------------------------------------------------------------------------------------------------------
# ResNet v1.5
# ---------------------------------------------------------------------------------------------------------------


def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    ]


class Bottleneck(nn.Module):
    """1x1 (width) → 3x3 (width, stride) → 1x1 (4 x width), each with BN, plus the shortcut, then ReLU."""

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * BOTTLENECK_EXPANSION
        self.residual = nn.Sequential(
            *_conv_bn(in_channels, width, 1),
            nn.ReLU(),
            *_conv_bn(width, width, 3, stride),
            nn.ReLU(),  # v1.5: the stride is here
            *_conv_bn(width, out_channels, 1),
        )
        changes_shape = stride != 1 or in_channels != out_channels
        self.shortcut = (
            nn.Sequential(*_conv_bn(in_channels, out_channels, 1, stride)) if changes_shape else nn.Identity()
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.residual(features) + self.shortcut(features))


class ResNet(nn.Module):
    def __init__(self, blocks_per_stage: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            *_conv_bn(3, STAGE_WIDTHS[0], 7, stride=2),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
        channels = STAGE_WIDTHS[0]
        for stage, (width, blocks) in enumerate(zip(STAGE_WIDTHS, blocks_per_stage, strict=True)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(Bottleneck(channels, width, stride))
                channels = width * BOTTLENECK_EXPANSION
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, CLASSES))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                _he_normal(module)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def resnet_sgd(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    """SGD with momentum and weight decay, at learning_rate per 256 images scaled to the batch (Goyal et al.)."""
    scaled = hyperparameters["learning_rate"] * hyperparameters["batch_size"] / REFERENCE_BATCH
    return torch.optim.SGD(
        model.parameters(),
        lr=scaled,
        momentum=hyperparameters["momentum"],
        weight_decay=hyperparameters["weight_decay"],
    )


def vgg_sgd(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        model.parameters(),
        lr=hyperparameters["learning_rate"],
        momentum=hyperparameters["momentum"],
        weight_decay=hyperparameters["weight_decay"],
    )


imagenet_workload = partial(  # what the three models share: the data, its input, the loss, the quick settings
    workload,
    dataset="imagenet",
    image_shape=(3, IMAGE_SIZE, IMAGE_SIZE),
    loss=nn.CrossEntropyLoss,
    preprocessing=lambda hyperparameters: ImageNetInput(size=hyperparameters["image_size"]),
    in_suites=False,  # hours an epoch on a CPU: run only when named
    size_bounds={"image_size": LARGEST_IMAGE_SIZE},
    # with --suite quick: a warm-up epoch and a steady one of 5 steps (at 224, seconds a step on a laptop CPU)
    quick=QuickSettings(epochs=2, max_steps=5, max_eval_steps=2),
)
RESNET_TRAINING = {
    "batch_size": REFERENCE_BATCH,
    "epochs": 90,
    "learning_rate": 0.1,  # per 256 images: the optimizer uses learning_rate x batch_size / 256
    "momentum": 0.9,
    "weight_decay": 1e-4,
    "image_size": IMAGE_SIZE,  # pixels per side of the model's input; smaller for a laptop or a test
}


@imagenet_workload(
    name="resnet50",
    summary="ResNet-50 v1.5: 7x7 stem → [3, 4, 6, 3] bottlenecks (stride on the 3x3) → pool → Dense 1000; SGD",
    defaults=RESNET_TRAINING,
    optimizer=resnet_sgd,
)
def resnet50(hyperparameters: Hyperparameters) -> nn.Module:
    _check_image_size(hyperparameters)
    return ResNet(RESNET50_BLOCKS)


@imagenet_workload(
    name="resnet152",
    summary="ResNet-152 v1.5: 7x7 stem → [3, 8, 36, 3] bottlenecks (stride on the 3x3) → pool → Dense 1000; SGD",
    defaults=RESNET_TRAINING,
    optimizer=resnet_sgd,
)
def resnet152(hyperparameters: Hyperparameters) -> nn.Module:
    _check_image_size(hyperparameters)
    return ResNet(RESNET152_BLOCKS)


# ---------------------------------------------------------------------------------------------------------------
# VGG-16
# ---------------------------------------------------------------------------------------------------------------


class VGG(nn.Module):
    def __init__(self, blocks: tuple[tuple[int, ...], ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for filters_per_convolution in blocks:
            for filters in filters_per_convolution:
                layers += [nn.Conv2d(channels, filters, 3, padding=1), nn.ReLU()]
                channels = filters
            layers.append(nn.MaxPool2d(2, stride=2))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(VGG_POOLED),
            nn.Flatten(),
            nn.Linear(channels * VGG_POOLED * VGG_POOLED, VGG_DENSE_UNITS),
            nn.ReLU(),
            nn.Dropout(DROPOUT),
            nn.Linear(VGG_DENSE_UNITS, VGG_DENSE_UNITS),
            nn.ReLU(),
            nn.Dropout(DROPOUT),
            nn.Linear(VGG_DENSE_UNITS, CLASSES),
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                _he_normal(module)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=DENSE_INIT_STD)
                nn.init.zeros_(module.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


@imagenet_workload(
    name="vgg16",
    summary="VGG-16 (configuration D): 13 Conv 3x3 in 5 pooled blocks → Dense 4096 → 4096 → 1000, dropout; SGD",
    defaults={
        "batch_size": REFERENCE_BATCH,
        "epochs": 74,
        "learning_rate": 0.01,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "image_size": IMAGE_SIZE,  # pixels per side of the model's input; smaller for a laptop or a test
    },
    optimizer=vgg_sgd,
)
def vgg16(hyperparameters: Hyperparameters) -> nn.Module:
    _check_image_size(hyperparameters)
    return VGG(VGG16_BLOCKS)
