"""S1: the MNIST convolutional networks of "GPU vs CPU in Convolutional Neural Networks using TensorFlow".

The post published about an 8x GPU-over-CPU speedup for both networks and about 99.3% test accuracy.

Our reading, where the post is silent: the network is the classic TensorFlow "Deep MNIST" tutorial model,
and so is its training: Adam at learning rate 1e-4 (TensorFlow 1's epsilon 1e-8), batches of 50, softmax
cross-entropy, weights drawn from a normal of stddev 0.1 truncated at two deviations, biases 0.1. The tutorial
ran 20,000 steps of 50, which over our 60,000 training digits is 17 epochs. 'SAME' 2x2 pooling rounds up
(7 → 4), which PyTorch spells `ceil_mode=True`.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 50
"""

from __future__ import annotations

from functools import partial

from torch import nn

from devicebench.workloads import Hyperparameters, Published, workload
from devicebench.workloads.optimizers import adam

IMAGE_SIZE = 28  # pixels per side
KERNEL_SIZE = 5  # every convolution is 5x5 with 'SAME' zero padding
DENSE_UNITS = 1024
DROPOUT = 0.5  # probability of dropping a unit (the tutorial's keep_prob 0.5)
INIT_STDDEV = 0.1  # the tutorial's weight_variable: truncated normal, stddev 0.1
INIT_BIAS = 0.1  # the tutorial's bias_variable: constant 0.1

TRAINING = {
    "batch_size": 50,  # samples per step
    "epochs": 17,  # 20,000 tutorial steps x 50 samples / 60,000 digits
    "learning_rate": 1e-4,
    "adam_epsilon": 1e-8,  # TensorFlow 1's AdamOptimizer default
}

mnist_workload = partial(  # what both networks share: the seed, the data, the training and the published figures
    workload,
    seed="S1",
    dataset="mnist",
    image_shape=(1, IMAGE_SIZE, IMAGE_SIZE),
    loss=nn.CrossEntropyLoss,
    optimizer=adam,
    defaults=TRAINING,
    published=Published(
        speedup=8.0,
        basis="training time, GPU vs CPU, for both networks",
        hardware="GeForce GTX 860M (laptop) vs an 8-thread laptop CPU, TensorFlow",
        accuracy=0.993,
    ),
)


class MnistCNN(nn.Module):
    """`stages` of (5x5 'SAME' conv + ReLU + 2x2 'SAME' max-pool), then Dense 1024 + ReLU + Dropout + Dense 10."""

    def __init__(self, filters: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels, size = 1, IMAGE_SIZE
        for out_channels in filters:
            layers += [
                nn.Conv2d(channels, out_channels, KERNEL_SIZE, padding=KERNEL_SIZE // 2),
                nn.ReLU(),
                nn.MaxPool2d(2, ceil_mode=True),
            ]
            channels, size = out_channels, -(-size // 2)  # ceil: 28 → 14 → 7 → 4 → 2
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * size * size, DENSE_UNITS),
            nn.ReLU(),
            nn.Dropout(DROPOUT),
            nn.Linear(DENSE_UNITS, 10),  # logits: the softmax lives in the loss
        )
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(module.weight, std=INIT_STDDEV, a=-2 * INIT_STDDEV, b=2 * INIT_STDDEV)
                assert module.bias is not None  # every layer above is built with one
                nn.init.constant_(module.bias, INIT_BIAS)

    def forward(self, images):
        return self.classifier(self.features(images))


@mnist_workload(name="mnist-cnn2", summary="2 x (Conv 5x5 + MaxPool) 32, 64 → Dense 1024 → Dropout 0.5 → Dense 10")
def mnist_cnn2(hyperparameters: Hyperparameters) -> nn.Module:
    return MnistCNN(filters=(32, 64))


@mnist_workload(
    name="mnist-cnn4", summary="4 x (Conv 5x5 + MaxPool) 32, 64, 128, 256 → Dense 1024 → Dropout 0.5 → Dense 10"
)
def mnist_cnn4(hyperparameters: Hyperparameters) -> nn.Module:
    return MnistCNN(filters=(32, 64, 128, 256))  # our reading of "four stages"
