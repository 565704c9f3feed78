"""The optimizers the seeds trained with, as the `optimizer=` of `@workload`: each takes the model and the
workload's hyperparameters (learning_rate, and adam_epsilon or momentum) and builds a torch optimizer.

    python -c "import torch; from devicebench.workloads.optimizers import sgd; print(sgd(torch.nn.Linear(2, 1), {'learning_rate': 0.1, 'momentum': 0.9}))"
"""

from __future__ import annotations

import torch
from torch import nn

from devicebench.workloads import Hyperparameters


def adam(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        model.parameters(), lr=hyperparameters["learning_rate"], eps=hyperparameters["adam_epsilon"]
    )


def sgd(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        model.parameters(), lr=hyperparameters["learning_rate"], momentum=hyperparameters["momentum"]
    )
