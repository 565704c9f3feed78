"""The choices a run is made of, each declared once as a type beside the tuple of its values: the mode, the precision
asked for and the one a run trains at, the compile choice, the data asked for, the precisions a device's matrix
multiplies are calibrated at, and the precisions the public record and the estimate name a GPU's kernels by. A
module that takes one of these takes the type; one that checks a user's word checks it against the tuple.

    python -c "import devicebench.choices as c; print(c.MODES, c.PRECISION_CHOICES, c.COMPILE_CHOICES)"
"""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

Mode = Literal["seed", "tuned"]  # seed: the published settings; tuned: each device at its best (engine/tuning.py)
MODES: tuple[Mode, ...] = get_args(Mode)

PrecisionChoice = Literal["auto", "fp32", "bf16"]  # auto: tuned mode tries bf16 where the device computes it natively
PRECISION_CHOICES: tuple[PrecisionChoice, ...] = get_args(PrecisionChoice)

TrainingPrecision = Literal["fp32", "bf16"]  # bf16: autocast; weights, gradients and optimizer state stay fp32
TRAINING_PRECISIONS: tuple[TrainingPrecision, ...] = get_args(TrainingPrecision)

CompileChoice = Literal["auto", "on", "off"]  # auto: tuned mode tries torch.compile on GPUs
COMPILE_CHOICES: tuple[CompileChoice, ...] = get_args(CompileChoice)

DataChoice = Literal["auto", "real", "synthetic"]  # auto: the real data where it is on disk or can be fetched
DATA_CHOICES: tuple[DataChoice, ...] = get_args(DataChoice)

MatmulPrecision = Literal["fp32", "tf32", "bf16"]  # a calibrated ceiling's; tf32: fp32 tensors on TF32 tensor cores
MATMUL_PRECISIONS: tuple[MatmulPrecision, ...] = get_args(MatmulPrecision)

KernelPrecision = Literal["fp32", "tf32", "amp-fp16", "amp-bf16"]  # the record's and the estimate's; amp-*: autocast
KERNEL_PRECISIONS: tuple[KernelPrecision, ...] = get_args(KernelPrecision)


Choice = TypeVar("Choice", bound=str)


def narrowed(value: str, values: tuple[Choice, ...]) -> Choice:
    """`value` as the type of `values`, where the edge (config.RunConfig, a command's checks) has already refused
    any other word; a ValueError here is devicebench's mistake, not the user's."""
    for known in values:
        if known == value:
            return known
    raise ValueError(f"{value!r} is not one of: {', '.join(values)}")
