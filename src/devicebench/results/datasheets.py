"""What NVIDIA's datasheets promise for well-known GPUs: the peaks a calibration is read against.

Every figure is a dense peak (no 2:4 sparsity) at boost clock, in TFLOP/s, and memory bandwidth in GB/s (1e9
bytes). Datasheets print the tensor-core figures with sparsity and a footnote; those are halved here, and each
entry says which document it comes from. A GPU whose figures are not on an NVIDIA datasheet or whitepaper
(the A10G, made for AWS) is left out rather than guessed, and so are the CPUs, which have no such datasheet.

    python -c "from devicebench.results.datasheets import datasheet_for; print(datasheet_for('NVIDIA H100 PCIe'))"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})  # prefixes torch's names carry or drop by generation


@dataclass(frozen=True)
class Datasheet:
    product: str  # as the datasheet names it
    fp32_tflops: float  # on the CUDA cores, no tensor cores
    tf32_tflops: float | None  # fp32 matmuls on TF32 tensor cores; None: the GPU has none (before Ampere)
    bf16_tflops: float | None  # bf16 tensor cores with fp32 accumulation; None: the GPU has none
    memory_gb_s: float  # device memory bandwidth
    source: str  # the NVIDIA document the figures come from
    device_names: tuple[str, ...]  # what torch.cuda.get_device_name() calls it

    def tflops(self, precision: str) -> float | None:
        """The peak for a calibrated precision: "fp32", "tf32" or "bf16"."""
        return {"fp32": self.fp32_tflops, "tf32": self.tf32_tflops, "bf16": self.bf16_tflops}[precision]


HOPPER_WHITEPAPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper"
H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet"
A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet"

DATASHEETS = (
    # TF32 and BF16 dense from the whitepaper; the datasheet prints 989 and 1,979, which are with sparsity
    Datasheet("H100 SXM", 67.0, 494.7, 989.4, 3350.0, f"{H100_DATASHEET}; {HOPPER_WHITEPAPER}",
              ("NVIDIA H100 80GB HBM3",)),
    # half the datasheet's 756 (TF32) and 1,513 (BF16) with sparsity
    Datasheet("H100 PCIe", 51.0, 378.0, 756.5, 2000.0, H100_DATASHEET, ("NVIDIA H100 PCIe",)),
    # the H100 SXM's compute with faster, larger HBM3e; half the datasheet's 989 and 1,979 with sparsity
    Datasheet("H200 SXM", 67.0, 494.7, 989.4, 4800.0, "NVIDIA H200 Tensor Core GPU datasheet", ("NVIDIA H200",)),
    # the same compute in all four A100s (TF32 312 and BF16 624 with sparsity); bandwidth by memory and form
    Datasheet("A100 40GB SXM", 19.5, 156.0, 312.0, 1555.0, A100_DATASHEET,
              ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM-40GB")),
    Datasheet("A100 80GB SXM", 19.5, 156.0, 312.0, 2039.0, A100_DATASHEET,
              ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM-80GB")),
    Datasheet("A100 40GB PCIe", 19.5, 156.0, 312.0, 1555.0, A100_DATASHEET, ("NVIDIA A100-PCIE-40GB",)),
    Datasheet("A100 80GB PCIe", 19.5, 156.0, 312.0, 1935.0, A100_DATASHEET, ("NVIDIA A100 80GB PCIe",)),
    # TF32 62.5 and BF16 125 dense, as the datasheet prints them beside 125 and 250 with sparsity
    Datasheet("A10", 31.2, 62.5, 125.0, 600.0, "NVIDIA A10 Tensor Core GPU datasheet", ("NVIDIA A10",)),
    # half the datasheet's 120 (TF32) and 242 (BF16) with sparsity
    Datasheet("L4", 30.3, 60.0, 121.0, 300.0, "NVIDIA L4 Tensor Core GPU datasheet", ("NVIDIA L4",)),
    # Turing: FP16 tensor cores only (65 TFLOP/s mixed precision), no TF32, no BF16
    Datasheet("T4", 8.1, None, None, 320.0, "NVIDIA T4 Tensor Core GPU datasheet", ("Tesla T4",)),
    # Volta: FP16 tensor cores only (125 and 112 TFLOP/s), no TF32, no BF16
    Datasheet("V100 SXM2", 15.7, None, None, 900.0, "NVIDIA Tesla V100 GPU datasheet",
              ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB")),
    Datasheet("V100 PCIe", 14.0, None, None, 900.0, "NVIDIA Tesla V100 GPU datasheet",
              ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB")),
    # GeForce tensor cores run BF16 with fp32 accumulation at half their FP16-accumulate rate (330.3)
    Datasheet("GeForce RTX 4090", 82.6, 82.6, 165.2, 1008.0, "NVIDIA Ada GPU Architecture whitepaper",
              ("NVIDIA GeForce RTX 4090",)),
)


def datasheet_for(device_name: str) -> Datasheet | None:
    """The datasheet of the GPU torch calls `device_name`, or None for a CPU or a GPU not in DATASHEETS.

    Names match word for word, in any order and spacing ("A100 80GB PCIe" and "A100-PCIE-80GB" are one GPU), so a
    longer name never matches a shorter one: "H100 PCIe" and "H100 NVL" are not the SXM part, "A10G" is not the A10
    nor an A100, "RTX 4090 D" is not the RTX 4090.
    """
    words = _words(device_name)
    for datasheet in DATASHEETS:
        if any(_words(name) == words for name in datasheet.device_names):
            return datasheet
    return None


def _words(device_name: str) -> frozenset[str]:
    return frozenset(re.split(r"[\s_-]+", device_name.strip().lower())) - _VENDOR_WORDS - {""}
