"""LeNet-5 on MNIST, the convolutional network of LeCun, Bottou, Bengio and Haffner (1998), as a devicebench
workload: `devicebench list` shows it, `devicebench run` trains it in the quick suite beside the seeds, and
`devicebench run lenet5-mnist --devices cpu,cuda` compares the devices on it.

Our reading of the paper, in today's terms: 28x28 digits padded by 2 to the paper's 32x32, tanh activations,
average pooling, C3 connected to every S2 map (the paper used a sparse table), a plain linear output with
softmax cross-entropy instead of RBF units, and Adam instead of the paper's stochastic diagonal Levenberg-Marquardt.

    devicebench run lenet5-mnist --devices cpu --data synthetic --epochs 2 --max-steps 50
"""

from __future__ import annotations

from torch import nn

import devicebench
from devicebench.workloads import QuickSettings
from devicebench.workloads.optimizers import adam

TRAINING = {
    "batch_size": 128,  # samples per step
    "epochs": 10,
    "learning_rate": 1e-3,  # Adam
    "adam_epsilon": 1e-8,
}


@devicebench.workload(
    name="lenet5-mnist",
    dataset="mnist",  # a dataset devicebench knows: downloaded, verified and cached by devicebench
    summary="LeNet-5: Conv 5x5 6, AvgPool, Conv 5x5 16, AvgPool, Dense 120, 84, 10; tanh",
    image_shape=(1, 28, 28),  # (channels, height, width) the digits are decoded to
    loss=nn.CrossEntropyLoss,
    optimizer=adam,
    defaults=TRAINING,
    quick=QuickSettings(epochs=3, max_steps=40, max_eval_steps=10),
)
def lenet5(hyperparameters) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5, padding=2),
        nn.Tanh(),
        nn.AvgPool2d(2),  # 28x28 → 14x14
        nn.Conv2d(6, 16, kernel_size=5),
        nn.Tanh(),
        nn.AvgPool2d(2),  # 14x14 → 10x10 → 5x5
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.Tanh(),
        nn.Linear(120, 84),
        nn.Tanh(),
        nn.Linear(84, 10),  # logits: the softmax lives in the loss
    )
