"""S3: the TensorFlow CIFAR-10 tutorial network, the CNN the S3 post timed on a V100, a Xeon and a VM.

Our reading of the tutorial (tensorflow/models, tutorials/image/cifar10), layer by layer:
- Input: 24x24 crops of the 32x32 images, distorted on the CPU for training (crop, flip, brightness,
  contrast, per-image standardisation: see `CifarDistortion`), centre-cropped for evaluation.
- conv1 5x5x64 'SAME' + ReLU → max-pool 3x3 stride 2 'SAME' → LRN; conv2 5x5x64 + ReLU → LRN → max-pool;
  local3 Dense 384 + ReLU; local4 Dense 192 + ReLU; softmax_linear Dense 10 (logits).
- 'SAME' 3x3/2 pooling pads only after the image (24 → 12 → 6), which is PyTorch's `ceil_mode=True`.
- LRN: TensorFlow sums squares over depth_radius 4 each side (9 channels) and multiplies by alpha 0.001/9;
  PyTorch divides its alpha by the window size, so alpha = 0.001/9 x 9 = 0.001 with size 9, bias 1, beta 0.75.
- Initialisation: truncated normals of stddev 0.05 (convolutions), 0.04 (local3, local4) and 1/192 (logits);
  biases 0 (conv1, logits) and 0.1 (conv2, local3, local4). Truncation at two deviations, as TensorFlow's.
- Training: plain SGD at 0.1 with L2 weight decay 0.004 on local3 and local4 only (TensorFlow's
  wd * l2_loss(w) has gradient wd * w: SGD's weight_decay); batch 128; 100,000 steps ≈ 256 epochs. The
  tutorial's learning-rate decay (x0.1 every 350 epochs) never triggers within that, so it is left out,
  as is its moving average of the weights, which only changes evaluation.

    devicebench run cifar10-cnn --devices cpu --data synthetic --epochs 2 --max-steps 20
"""

from __future__ import annotations

import torch
from torch import nn

from devicebench.data.augmentation import CifarDistortion
from devicebench.workloads import Hyperparameters, Published, QuickSettings, workload

CROP = 24  # pixels per side of the model's input
FILTERS = 64
KERNEL_SIZE = 5
FLATTENED = FILTERS * 6 * 6  # two 'SAME' stride-2 poolings: 24 → 12 → 6


def _local_response_norm() -> nn.LocalResponseNorm:
    """TensorFlow's depth_radius 4 (9 channels), alpha 0.001/9 (PyTorch divides alpha by the size), bias 1."""
    return nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0)


def _truncated_normal(layer: nn.Conv2d | nn.Linear, stddev: float, bias: float) -> None:
    nn.init.trunc_normal_(layer.weight, std=stddev, a=-2 * stddev, b=2 * stddev)
    assert layer.bias is not None  # every layer of the tutorial's network is built with one
    nn.init.constant_(layer.bias, bias)


class TutorialCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, FILTERS, KERNEL_SIZE, padding=KERNEL_SIZE // 2)
        self.conv2 = nn.Conv2d(FILTERS, FILTERS, KERNEL_SIZE, padding=KERNEL_SIZE // 2)
        self.local3 = nn.Linear(FLATTENED, 384)
        self.local4 = nn.Linear(384, 192)
        self.logits = nn.Linear(192, 10)
        self.features = nn.Sequential(
            self.conv1,
            nn.ReLU(),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            _local_response_norm(),
            self.conv2,
            nn.ReLU(),
            _local_response_norm(),
            nn.MaxPool2d(3, 2, ceil_mode=True),
        )
        self.classifier = nn.Sequential(nn.Flatten(), self.local3, nn.ReLU(), self.local4, nn.ReLU(), self.logits)
        _truncated_normal(self.conv1, 0.05, 0.0)
        _truncated_normal(self.conv2, 0.05, 0.1)
        _truncated_normal(self.local3, 0.04, 0.1)
        _truncated_normal(self.local4, 0.04, 0.1)
        _truncated_normal(self.logits, 1 / 192, 0.0)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def sgd_with_dense_decay(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    """SGD with weight decay on the weights of local3 and local4 only, as the tutorial's loss adds it."""
    assert isinstance(model, TutorialCNN)  # the engine builds the optimizer for the model cifar10_cnn built
    decayed = [model.local3.weight, model.local4.weight]
    plain = [parameter for parameter in model.parameters() if all(parameter is not d for d in decayed)]
    return torch.optim.SGD(
        [{"params": plain}, {"params": decayed, "weight_decay": hyperparameters["weight_decay"]}],
        lr=hyperparameters["learning_rate"],
    )


@workload(
    name="cifar10-cnn",
    seed="S3",
    dataset="cifar10",
    summary="TF CIFAR-10 tutorial: 2 x (Conv 5x5 64 + MaxPool 3/2 + LRN) → Dense 384 → 192 → 10, 24x24 crops",
    image_shape=(3, 32, 32),
    loss=nn.CrossEntropyLoss,
    optimizer=sgd_with_dense_decay,
    preprocessing=lambda hyperparameters: CifarDistortion(crop=CROP, augment=hyperparameters["augment"]),
    defaults={
        "batch_size": 128,
        "epochs": 256,  # the tutorial's 100,000 steps of 128 over 50,000 images
        "learning_rate": 0.1,
        "weight_decay": 0.004,  # on local3 and local4 weights only
        "augment": True,  # crops, flips, brightness and contrast on the CPU; false: centre crops only
    },
    published=Published(
        speedup=75.0,
        basis="training throughput, V100 at batch 512 about 15,000-17,000 images/s vs a dual Xeon Silver 4110 "
        "about 210 images/s (AVX2 build); a VirtualBox VM about 90 images/s",
        hardware="Tesla V100 vs dual Xeon Silver 4110 (16 cores), TensorFlow",
        samples_per_s={"cpu": 210.0, "gpu": 16_000.0},
        batch_size=512,  # the V100 figure's batch; the tutorial's default is 128
    ),
    quick=QuickSettings(max_steps=30, max_eval_steps=5),  # about 0.2 s a step of 128 on a 2-core CPU
)
def cifar10_cnn(hyperparameters: Hyperparameters) -> nn.Module:
    return TutorialCNN()
