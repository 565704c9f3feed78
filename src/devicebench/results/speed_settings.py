"""Which settings change speed, which of them a baseline must share, which tuned mode chooses, and how a row's
label words each.

    python -c "from devicebench.results.speed_settings import setting_text; print(setting_text('threads', 4))"
"""

from __future__ import annotations

from typing import Any

# Settings that change speed. Runs that differ in any of them form separate rows. max_steps too: a 20-step epoch
# spends a larger share of its time starting up than a 60-step one, so their rates are not the same measurement.
# So does every choice tuned mode makes (engine/tuning.py's Tuning): tuned runs that chose differently ran
# differently, and pooling them would hide which choice gave which speed.
SPEED_SETTINGS = (
    "mode",
    "precision",
    "batch_size",
    "batch_size_auto",
    "data_source",
    "workers",
    "overrides",
    "threads",
    "tf32_matmul",
    "tf32_cudnn",
    "compiled",
    "step_graph",
    "channels_last",
    "fused_optimizer",
    "cudnn_benchmark",
    "device_resident",
    "allocator_keeps_memory",
    "world_size",
    "max_steps",
)
# Of those, the ones a baseline must share: the work itself. Threads, TF32 and compiling describe how a device ran
# it. Two exceptions (compare.py's `_same_work`): in tuned mode each device picks its own precision, and with --batch-size auto
# its own batch size: the comparison is then each device at its best.
SAME_WORK_SETTINGS = ("mode", "precision", "batch_size", "batch_size_auto", "data_source", "workers", "overrides")
# What tuned mode chooses for each run (engine/tuning_choices.Tuning's fields; a test keeps the two the same). They
# follow from the mode, so a row's label names them only where rows of the same mode chose differently.
TUNED_CHOICES = (
    "precision",
    "channels_last",
    "fused_optimizer",
    "compiled",
    "step_graph",
    "tf32_matmul",
    "tf32_cudnn",
    "cudnn_benchmark",
    "device_resident",
    "allocator_keeps_memory",
)

# What else keeps runs apart (results/pooling.py): the software that ran them, read from the session's machine
# fingerprint (environment.py) and its devicebench version, and the workload's definition (workloads/definition.py).
# A new torch or cuDNN can change a kernel's speed as much as a setting can; a changed model is another experiment.
SOFTWARE_WORDS = {
    "torch": "torch",
    "torch_cuda_build": "CUDA",
    "torch_hip_build": "ROCm",
    "cudnn": "cuDNN",
    "devicebench": "devicebench",
}
SOFTWARE = tuple(SOFTWARE_WORDS)
POOLED_APART = (*SOFTWARE, "definition", "interrupted")  # interrupted: pooling.run_settings

SWITCH_WORDS = {
    "batch_size_auto": "auto batch",
    "step_graph": "CUDA graph",
}  # other switches read as their names, `channels last`
COUNTED = {"threads": "thread", "workers": "worker", "world_size": "process"}  # `4 threads`, `1 process`


def setting_text(name: str, value: Any) -> str:
    """A setting's value as a row's label gives it: `tuned`, `bf16`, `synthetic`, `batch 64`, `4 threads`,
    `2 processes`, `25 steps`, `full epochs`, `channels last`, the --set that made it (`learning_rate=0.1`),
    `torch 2.13.0`, `definition 3fa2c19d0b7e`; "" for a switch that is off and for no --set."""
    if name in SOFTWARE_WORDS:  # `torch 2.13.0`, `CUDA 12.4`; a torch built without CUDA: `no CUDA`
        return f"{SOFTWARE_WORDS[name]} {value}" if value is not None else f"no {SOFTWARE_WORDS[name]}"
    if name == "definition":
        return f"definition {value}" if value is not None else "definition not recorded"
    if isinstance(value, bool):
        return SWITCH_WORDS.get(name, name.replace("_", " ")) if value else ""
    if name == "overrides":
        return ", ".join(f"{key}={item}" for key, item in value.items())
    if name == "batch_size":
        return f"batch {value:,}"
    if name == "max_steps":
        return "full epochs" if value is None else f"{value:,} step{'s' if value != 1 else ''}"
    if name in COUNTED:
        noun = COUNTED[name]
        return f"{value:,} {noun}" + ("" if value == 1 else "es" if noun.endswith("s") else "s")
    return str(value)
