"""The workloads: every reference experiment of SEEDS.md, and those of installed plugins, looked up by name or
pattern.

The registry (`Workload`, `@workload`, `get_workload`, `list_workloads`, the plugin loader) lives in _registry.py
and is re-exported here: import it from `devicebench.workloads`. Each workload family has a module of its own
(mnist.py, cifar_mlp.py, …), imported by the registry at the first lookup; the optimizers they share are in
optimizers.py, and what a model's outputs mean (classes, probabilities, the losses over them) in outputs.py.

    python -c "import devicebench.workloads as w; print([x.name for x in w.list_workloads()])"
"""

from __future__ import annotations

from devicebench.workloads._registry import (
    MAX_PARAMETERS,
    PLUGIN_GROUP,
    SEED_EXPERIMENTS,
    DataOptions,
    Hyperparameters,
    LossBuilder,
    ModelBuilder,
    ModelTooLarge,
    OptimizerBuilder,
    OutputKind,
    PreprocessingBuilder,
    Published,
    QuickSettings,
    TokensPerSample,
    Trainer,
    TrainStep,
    Workload,
    get_workload,
    list_workloads,
    plugin_problems,
    register_own,
    workload,
)

__all__ = [
    "MAX_PARAMETERS",
    "PLUGIN_GROUP",
    "SEED_EXPERIMENTS",
    "DataOptions",
    "Hyperparameters",
    "LossBuilder",
    "ModelBuilder",
    "ModelTooLarge",
    "OptimizerBuilder",
    "OutputKind",
    "PreprocessingBuilder",
    "Published",
    "QuickSettings",
    "TokensPerSample",
    "TrainStep",
    "Trainer",
    "Workload",
    "get_workload",
    "list_workloads",
    "plugin_problems",
    "register_own",
    "workload",
]
