"""What tuned mode can choose for a run, as plain data: no torch here, so the tables that show a run's choices
(history, compare) load without it. Making the choices is engine/tuning.py's work.

    python -c "import dataclasses, devicebench.engine.tuning_choices as t; print(dataclasses.fields(t.Tuning))"
"""

from __future__ import annotations

from dataclasses import dataclass

from devicebench.choices import TrainingPrecision


@dataclass(frozen=True)
class Tuning:
    """How a model runs on its device. The defaults are seed mode: nothing changed."""

    precision: TrainingPrecision = "fp32"  # bf16: autocast; weights, gradients and optimizer state stay fp32
    channels_last: bool = False
    fused_optimizer: bool = False
    compiled: bool = False  # torch.compile; its compile time lands in the warm-up epoch
    step_graph: bool = False  # CUDA: the whole training step captured once as a CUDA graph and replayed
    tf32_matmul: bool = False  # CUDA fp32 matmuls on TF32 tensor cores
    tf32_cudnn: bool = False  # CUDA fp32 convolutions and RNNs on TF32 tensor cores (cuDNN's own switch)
    cudnn_benchmark: bool = False
    device_resident: bool = False  # the dataset lives on the device, preprocessed; batches are gathered there
    allocator_keeps_memory: bool = False
