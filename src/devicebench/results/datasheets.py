"""The GPU catalog: what each GPU's vendor document promises (peaks, memory, host link, launch year), so that a
calibration is read against its datasheet and `devicebench estimate --on t4,a100-80gb` can predict a GPU not at hand.

Every figure is a dense peak (no 2:4 sparsity) at boost clock, in TFLOP/s, and memory bandwidth in GB/s (1e9
bytes). Datasheets print the tensor-core figures with sparsity and a footnote; those are halved here, and each
entry names the document it comes from. A figure no document we can name gives is None, never guessed (the A10G's
compute, an AWS part without an NVIDIA datasheet); the CPUs have no such datasheet and are not here. A dual-GPU board
(the K80) is entered as one of its GPUs, the device torch sees, at half the board's figures.

    python -c "from devicebench.results.datasheets import parse_targets; print(parse_targets('t4,h100-sxm'))"
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from devicebench.errors import DevicebenchError

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})  # prefixes torch's names carry or drop by generation

# One direction of an x16 link: transfers/s per lane x 16 lanes x 128/130 encoding / 8 bits, in GB/s (rounded)
PCIE3_X16_GB_S = 15.75  # PCIe 3.0: 8 GT/s a lane
PCIE4_X16_GB_S = 31.5  # PCIe 4.0: 16 GT/s a lane
PCIE5_X16_GB_S = 63.0  # PCIe 5.0: 32 GT/s a lane


@dataclass(frozen=True)
class Datasheet:
    product: str  # as the datasheet names it
    fp32_tflops: float | None  # on the CUDA cores, no tensor cores; None: no document we can name gives it (A10G)
    tf32_tflops: float | None  # fp32 matmuls on TF32 tensor cores; None: the GPU has none (before Ampere) or unsourced
    bf16_tflops: float | None  # bf16 tensor cores with fp32 accumulation; None: the GPU has none, or unsourced
    memory_gb_s: float  # device memory bandwidth
    source: str  # the vendor document the figures come from
    device_names: tuple[str, ...]  # what torch.cuda.get_device_name() calls it; empty: datasheet_for never matches
    key: str  # what a user types: `--on t4,a100-80gb`
    memory_gib: float  # device memory as sold: the datasheet's "GB" taken as the GiB figure (80 GB HBM3 -> 80)
    host_link_gb_s: float  # host to device, one direction: the PCIe link, SXM parts included
    year: int  # launched (first sold)
    # fp16 matrix arithmetic with fp32 accumulation (what mixed precision runs on), dense, where it is not the bf16
    # figure: the tensor cores of Volta and Turing, which have no bf16, and Pascal's packed fp16. None: as bf16 (from
    # Ampere on both run at one rate), or no fast fp16 at all (Kepler, Maxwell, the TITAN Xp's 1/64 rate). Each figure
    # is from the entry's own source document (its "tensor" or "mixed precision" TFLOPS), unless its line says else
    fp16_tflops: float | None = None

    def tflops(self, precision: str) -> float | None:
        """The peak for a calibrated precision: "fp32", "tf32" or "bf16"."""
        return {"fp32": self.fp32_tflops, "tf32": self.tf32_tflops, "bf16": self.bf16_tflops}[precision]


HOPPER_WHITEPAPER = "NVIDIA H100 Tensor Core GPU Architecture whitepaper"
H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet"
A100_DATASHEET = "NVIDIA A100 Tensor Core GPU datasheet"
V100_DATASHEET = "NVIDIA Tesla V100 GPU datasheet"
P100_DATASHEET = "NVIDIA Tesla P100 datasheet"
GA102_WHITEPAPER = "NVIDIA Ampere GA102 GPU Architecture whitepaper"

DATASHEETS = (
    # Turing: FP16 tensor cores only (65 TFLOP/s mixed precision), no TF32, no BF16
    Datasheet(
        "T4",
        8.1,
        None,
        None,
        320.0,
        "NVIDIA T4 Tensor Core GPU datasheet",
        ("Tesla T4",),
        key="t4",
        memory_gib=16,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2018,
        fp16_tflops=65.0,
    ),
    # Volta: FP16 tensor cores only (125 and 112 TFLOP/s), no TF32, no BF16; sold with 16 or 32 GB, 16 here
    Datasheet(
        "V100 SXM2",
        15.7,
        None,
        None,
        900.0,
        V100_DATASHEET,
        ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"),
        key="v100-sxm2",
        memory_gib=16,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2017,
        fp16_tflops=125.0,
    ),  # PCIe 3.0 to the host
    Datasheet(
        "V100 PCIe",
        14.0,
        None,
        None,
        900.0,
        V100_DATASHEET,
        ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"),
        key="v100-pcie",
        memory_gib=16,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2017,
        fp16_tflops=112.0,
    ),  # PCIe 3.0
    # AWS's GA102 part for EC2 G5: NVIDIA publishes no datasheet. Memory and bandwidth as Baseten and AWS state them;
    # its FP32, TF32 and BF16 peaks are in no document we can quote (they differ from the A10's), so None. PCIe 4.0, as
    # every GA102 (GA102 whitepaper). No device_names: its compute cannot be checked against a datasheet.
    Datasheet(
        "A10G",
        None,
        None,
        None,
        600.0,
        "Baseten, NVIDIA A10 vs A10G for ML model inference; Amazon EC2 G5 instance documentation",
        (),
        key="a10g",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),
    # TF32 62.5 and BF16 125 dense, as the datasheet prints them beside 125 and 250 with sparsity
    Datasheet(
        "A10",
        31.2,
        62.5,
        125.0,
        600.0,
        "NVIDIA A10 Tensor Core GPU datasheet",
        ("NVIDIA A10",),
        key="a10",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),  # PCIe 4.0
    # half the datasheet's 120 (TF32) and 242 (BF16) with sparsity
    Datasheet(
        "L4",
        30.3,
        60.0,
        121.0,
        300.0,
        "NVIDIA L4 Tensor Core GPU datasheet",
        ("NVIDIA L4",),
        key="l4",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2023,
    ),  # PCIe 4.0
    # the datasheet prints TF32 183 | 366 and BF16 362.05 | 733 (dense | sparse). No device_names yet:
    # tests/test_calibrate.py holds "NVIDIA L40S" unmatched; add the name together with that test
    Datasheet(
        "L40S",
        91.6,
        183.0,
        362.05,
        864.0,
        "NVIDIA L40S GPU datasheet",
        (),
        key="l40s",
        memory_gib=48,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2023,
    ),  # PCIe 4.0
    # the same compute in all four A100s (TF32 312 and BF16 624 with sparsity); bandwidth by memory and form; the SXM4
    # parts reach the host over PCIe 4.0, as the PCIe cards do
    Datasheet(
        "A100 40GB SXM",
        19.5,
        156.0,
        312.0,
        1555.0,
        A100_DATASHEET,
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM-40GB"),
        key="a100-40gb",
        memory_gib=40,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),
    Datasheet(
        "A100 40GB PCIe",
        19.5,
        156.0,
        312.0,
        1555.0,
        A100_DATASHEET,
        ("NVIDIA A100-PCIE-40GB",),
        key="a100-40gb-pcie",
        memory_gib=40,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),
    Datasheet(
        "A100 80GB SXM",
        19.5,
        156.0,
        312.0,
        2039.0,
        A100_DATASHEET,
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM-80GB"),
        key="a100-80gb",
        memory_gib=80,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),
    Datasheet(
        "A100 80GB PCIe",
        19.5,
        156.0,
        312.0,
        1935.0,
        A100_DATASHEET,
        ("NVIDIA A100 80GB PCIe",),
        key="a100-80gb-pcie",
        memory_gib=80,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),
    # half the datasheet's 756 (TF32) and 1,513 (BF16) with sparsity
    Datasheet(
        "H100 PCIe",
        51.0,
        378.0,
        756.5,
        2000.0,
        H100_DATASHEET,
        ("NVIDIA H100 PCIe",),
        key="h100-pcie",
        memory_gib=80,
        host_link_gb_s=PCIE5_X16_GB_S,
        year=2022,
    ),  # PCIe 5.0
    # TF32 and BF16 dense from the whitepaper; the datasheet prints 989 and 1,979, which are with sparsity
    Datasheet(
        "H100 SXM",
        67.0,
        494.7,
        989.4,
        3350.0,
        f"{H100_DATASHEET}; {HOPPER_WHITEPAPER}",
        ("NVIDIA H100 80GB HBM3",),
        key="h100-sxm",
        memory_gib=80,
        host_link_gb_s=PCIE5_X16_GB_S,
        year=2022,
    ),  # SXM5, PCIe 5.0 to host
    # the H100 SXM's compute with faster, larger HBM3e; half the datasheet's 989 and 1,979 with sparsity; announced
    # November 2023, sold from 2024
    Datasheet(
        "H200 SXM",
        67.0,
        494.7,
        989.4,
        4800.0,
        "NVIDIA H200 Tensor Core GPU datasheet",
        ("NVIDIA H200",),
        key="h200",
        memory_gib=141,
        host_link_gb_s=PCIE5_X16_GB_S,
        year=2024,
    ),  # SXM5, PCIe 5.0 to host
    # GeForce tensor cores run TF32 and BF16 with fp32 accumulation at half the professional cards' rate: TF32 35.6
    # and BF16 71 dense (71.2 and 142 with sparsity) in the whitepaper's RTX 3090 appendix
    Datasheet(
        "GeForce RTX 3090",
        35.6,
        35.6,
        71.0,
        936.0,
        GA102_WHITEPAPER,
        ("NVIDIA GeForce RTX 3090",),
        key="rtx-3090",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),  # PCIe 4.0
    # BF16 with fp32 accumulation at half the FP16-accumulate rate (330.3 with sparsity)
    Datasheet(
        "GeForce RTX 4090",
        82.6,
        82.6,
        165.2,
        1008.0,
        "NVIDIA Ada GPU Architecture whitepaper",
        ("NVIDIA GeForce RTX 4090",),
        key="rtx-4090",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2022,
    ),  # PCIe 4.0
    # The laptop GPU of the 2015-era blog post: the Maxwell GM107 version, 640 CUDA cores at 1029 MHz "+ Boost"; a
    # Kepler GK104 version with 1152 cores at 797 MHz was sold under the same name. NVIDIA states no boost clock, so
    # fp32 is at base clock: 640 x 2 (multiply-add) x 1.029 GHz = 1.317 TFLOP/s, below what the chip reaches boosted.
    # Memory: 128-bit GDDR5 at 5.0 Gbps = 80 GB/s; sold with 2 or 4 GB, 2 here. No tensor cores. No device_names:
    # torch names both versions alike, and a boosted chip passes the base-clock figure, which check would call broken
    Datasheet(
        "GeForce GTX 860M",
        1.317,
        None,
        None,
        80.0,
        "NVIDIA GeForce GTX 860M specifications (as reproduced by Notebookcheck and notebookinfo.de)",
        (),
        key="gtx-860m",
        memory_gib=2,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2014,
    ),  # PCIe 3.0
    # Kepler, no tensor cores. A dual-GPU board: torch sees two devices, and an entry is one of them, so each figure
    # is half the board's: the datasheet's "up to 8.73 teraflops single precision with GPU Boost" and "24 GB GDDR5
    # with 480 GB/s aggregate" (NVIDIA's bullets as quoted in robang74/chatbots-for-fun; AnandTech's launch table
    # prints 2 x 2496 cores, 2 x 12 GB, 875 MHz boost, 8.74 TFLOPS). One PCIe 3.0 x16 link for both GPUs; sold 2014.
    # torch's name: "Tesla K80" (gpu.name in a device report in public code)
    Datasheet(
        "Tesla K80 (one GPU of two)",
        8.73 / 2,
        None,
        None,
        480.0 / 2,
        "NVIDIA Tesla K80 datasheet",
        ("Tesla K80",),
        key="k80",
        memory_gib=24 / 2,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2014,
    ),
    # Pascal, no tensor cores: 9.3 (PCIe) and 10.6 (SXM2) TFLOPS single precision, 16 GB HBM2 at 732 GB/s, as
    # Microway's Pascal comparison reproduces NVIDIA's table; the 12 GB PCIe card (549 GB/s) is not this entry and
    # its name, "Tesla P100-PCIE-12GB", does not match. Announced April and June 2016, shipped from autumn 2016.
    # torch's names: "Tesla P100-PCIE-16GB" (Microway's bandwidthTest), "Tesla P100-SXM2-16GB" (cudaDeviceProp.name
    # and nvidia-smi in public code)
    Datasheet(
        "Tesla P100 PCIe",
        9.3,
        None,
        None,
        732.0,
        P100_DATASHEET,
        ("Tesla P100-PCIE-16GB",),
        key="p100-pcie",
        memory_gib=16,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2016,
        fp16_tflops=18.7,
    ),  # PCIe 3.0
    Datasheet(
        "Tesla P100 SXM2",
        10.6,
        None,
        None,
        732.0,
        P100_DATASHEET,
        ("Tesla P100-SXM2-16GB",),
        key="p100-sxm2",
        memory_gib=16,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2016,
        fp16_tflops=21.2,
    ),  # NVLink 1, PCIe 3.0 to host
    # Pascal GP102, all 3840 cores: 12.1 TFLOPS (3840 x 2 x 1.582 GHz boost, AnandTech's table; NVIDIA rounds to 12),
    # 12 GB GDDR5X at 11.4 Gbps, 547.7 GB/s (NVIDIA's launch figures as TechGage and GameRevolution print them). No
    # tensor cores; PCIe 3.0 as every Pascal card. Launched April 2017. torch's name: "NVIDIA TITAN Xp" (nvidia-smi
    # in public code; older drivers drop "NVIDIA", which datasheet_for ignores)
    Datasheet(
        "TITAN Xp",
        12.1,
        None,
        None,
        547.7,
        "NVIDIA TITAN Xp specifications",
        ("NVIDIA TITAN Xp",),
        key="titan-xp",
        memory_gib=12,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2017,
    ),
    # Volta GV100: FP16 tensor cores only (no TF32, no BF16). 5120 cores at 1455 MHz boost: 5120 x 2 x 1.455 GHz =
    # 14.9 TFLOPS; NVIDIA's launch figure, 13.8 (AnandTech, Tom's Hardware), is at about 1.35 GHz, below the boost
    # clock this catalog takes. 12 GB HBM2 on 3072 bits at 1.7 Gbps: 652.8 GB/s. PCIe 3.0 as the V100 PCIe.
    # December 2017. torch's name: "NVIDIA TITAN V" (a CUDA device listing in public code)
    Datasheet(
        "TITAN V",
        14.9,
        None,
        None,
        652.8,
        "NVIDIA TITAN V specifications",
        ("NVIDIA TITAN V",),
        key="titan-v",
        memory_gib=12,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2017,
        fp16_tflops=110.0,
    ),
    # Turing TU102, all 4608 cores: FP16 tensor cores only (130 TFLOPS), no TF32, no BF16. 16.3 TFLOPS at 1770 MHz
    # boost, 24 GB GDDR6 at 672 GB/s (NVIDIA's figures in Tom's Hardware's launch table). PCIe 3.0, as the Quadro RTX
    # 8000 datasheet prints for the same chip. December 2018. torch's name: "NVIDIA TITAN RTX" (cudaDeviceProp.name)
    Datasheet(
        "TITAN RTX",
        16.3,
        None,
        None,
        672.0,
        "NVIDIA TITAN RTX specifications",
        ("NVIDIA TITAN RTX",),
        key="titan-rtx",
        memory_gib=24,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2018,
        fp16_tflops=130.0,
    ),
    # Turing TU102, 4352 cores, FP16 tensor cores only. The Founders Edition's 1635 MHz boost: 14.2 TFLOPS (Tom's
    # Hardware's table); reference-clocked cards (1545 MHz, the Turing whitepaper as bit-tech reproduces it) peak at
    # 13.4. Taken from NVIDIA's own card, which partner cards match or exceed. 11 GB GDDR6 at 616 GB/s. PCIe 3.0,
    # September 2018. torch's name: "NVIDIA GeForce RTX 2080 Ti" (a device report in public code)
    Datasheet(
        "GeForce RTX 2080 Ti",
        14.2,
        None,
        None,
        616.0,
        "NVIDIA GeForce RTX 2080 Ti Founders Edition specifications",
        ("NVIDIA GeForce RTX 2080 Ti",),
        key="rtx-2080-ti",
        memory_gib=11,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2018,
        fp16_tflops=56.9,
    ),  # FP16 tensor with FP32 accumulate, Founders Edition: the Turing whitepaper
    # Turing TU102: the datasheet prints 16.3 TFLOPS FP32, 130.5 "Deep Learning" TFLOPS (FP16 matmul, no TF32 or
    # BF16), 48 GB GDDR6 at 672 GB/s, PCI Express 3.0 x16 (as a reseller reproduces it). Announced August 2018,
    # sold from late 2018. torch's name: "Quadro RTX 8000" (a GPU report in public code)
    Datasheet(
        "Quadro RTX 8000",
        16.3,
        None,
        None,
        672.0,
        "NVIDIA Quadro RTX 8000 datasheet",
        ("Quadro RTX 8000",),
        key="quadro-rtx-8000",
        memory_gib=48,
        host_link_gb_s=PCIE3_X16_GB_S,
        year=2018,
        fp16_tflops=130.5,
    ),
    # GA102, professional: fp32-accumulate tensor cores at the full rate. The whitepaper's v2 Table 3 prints BF16 with
    # FP32 accumulate 154.8/309.6 and TF32 77.4 dense, 768 GB/sec (as public code citing it quotes them, among it
    # IST-DASLab/llmq's src/utilities/sol.cpp); 38.7 TFLOPS FP32 is the datasheet's. 48 GB GDDR6, PCIe 4.0 x16;
    # announced October 2020, sold from December 2020. torch's name: "NVIDIA RTX A6000" (nvidia-smi in a public gist)
    Datasheet(
        "RTX A6000",
        38.7,
        77.4,
        154.8,
        768.0,
        f"{GA102_WHITEPAPER}; NVIDIA RTX A6000 datasheet",
        ("NVIDIA RTX A6000",),
        key="rtx-a6000",
        memory_gib=48,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),
    # GA102: 27.8 TFLOPS FP32, 24 GB GDDR6 at 768 GB/s, as the datasheet's figures are quoted in public cluster
    # documentation and an A4000/A5000 datasheet comparison; that datasheet's one "Tensor performance", 222.2 TFLOPS,
    # names neither precision nor sparsity, so TF32 and BF16 are None. PCIe 4.0 as every GA102; April 2021.
    # torch's name: "NVIDIA RTX A5000" (nvidia-smi and a device report in public code)
    Datasheet(
        "RTX A5000",
        27.8,
        None,
        None,
        768.0,
        "NVIDIA RTX A5000 datasheet",
        ("NVIDIA RTX A5000",),
        key="rtx-a5000",
        memory_gib=24,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),
    # GA104: the datasheet prints 19.2 TFLOPS single precision, 16 GB GDDR6 at 448 GB/s, PCIe 4.0 x16 (as a reseller
    # reproduces it) and one "Tensor performance" of 153.4 TFLOPS whose precision and sparsity that copy's footnote
    # does not show: TF32 and BF16 are None. April 2021. torch's name: "NVIDIA RTX A4000" (nvidia-smi in public code)
    Datasheet(
        "RTX A4000",
        19.2,
        None,
        None,
        448.0,
        "NVIDIA RTX A4000 datasheet",
        ("NVIDIA RTX A4000",),
        key="rtx-a4000",
        memory_gib=16,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),
    # GA102 for servers: the datasheet prints FP32 37.4, TF32 74.8 | 149.6 and BF16 with FP32 accumulate 149.7 |
    # 299.4 (dense | sparse), 48 GB GDDR6 at 696 GB/s, PCIe Gen4 (a reseller's and astroC86/gpu-datasheet's copies).
    # Announced October 2020, sold from 2021. torch's name: "NVIDIA A40" (a name-to-architecture map in public code)
    Datasheet(
        "A40",
        37.4,
        74.8,
        149.7,
        696.0,
        "NVIDIA A40 datasheet",
        ("NVIDIA A40",),
        key="a40",
        memory_gib=48,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2021,
    ),
    # GA102, 8704 cores at 1.71 GHz boost: 29.8 TFLOPS, 10 GB GDDR6X at 19 Gbps on 320 bits, 760 GB/s (NVIDIA's launch
    # specifications as Fudzilla and PC Gamer print them). GeForce, so fp32-accumulate tensor cores at half the
    # professional rate (see the RTX 3090): TF32 29.8 and BF16 59.5 dense, as IST-DASLab/llmq's src/utilities/sol.cpp
    # lists them beside the GA102 and Ada whitepapers it cites (no stored copy of the GA102 whitepaper's Table 1
    # shows them). The 12 GB card of 2022 (8960 cores, 912 GB/s) is not this entry. PCIe 4.0, September 2020.
    # torch's name: "NVIDIA GeForce RTX 3080" (torch.cuda.get_device_name in public code)
    Datasheet(
        "GeForce RTX 3080",
        29.8,
        29.8,
        59.5,
        760.0,
        f"NVIDIA GeForce RTX 3080 specifications; {GA102_WHITEPAPER}",
        ("NVIDIA GeForce RTX 3080",),
        key="rtx-3080",
        memory_gib=10,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2020,
    ),
    # AD102: the datasheet prints 91.1 TFLOPS single precision, 48 GB GDDR6 at 960 GB/s, PCIe 4.0 x16 and, for the
    # tensor cores, only FP8 with sparsity (1,457 TFLOPS) (as atineoSE/coding-model-seeks-gpu reproduces it). TF32
    # 182.1 and BF16 with FP32 accumulate 364.2 dense, the professional full rate, are the Ada professional (PROVIZ)
    # whitepaper v1.1's, as IST-DASLab/llmq's src/utilities/sol.cpp quotes them. Announced September 2022, sold from
    # December 2022. torch's name: "NVIDIA RTX 6000 Ada Generation" (cudaDeviceProp.name and nvidia-smi in public
    # code)
    Datasheet(
        "RTX 6000 Ada Generation",
        91.1,
        182.1,
        364.2,
        960.0,
        "NVIDIA RTX 6000 Ada Generation datasheet; NVIDIA Ada Lovelace professional GPU architecture whitepaper",
        ("NVIDIA RTX 6000 Ada Generation",),
        key="rtx-6000-ada",
        memory_gib=48,
        host_link_gb_s=PCIE4_X16_GB_S,
        year=2022,
    ),
)


@dataclass(frozen=True)
class RentedHost:
    """The host a cloud rents a GPU with: the smallest instance that carries one, or a GPU's share of an 8-GPU one."""

    cores: int  # vCPUs (hardware threads) per GPU
    instance: str  # which instance, and how many vCPUs for how many GPUs


AWS_GPU_INSTANCES = "AWS Batch User Guide, 'GPU jobs' (instance types table); Amazon EC2 instance type pages"
# The input pipeline of `devicebench estimate` is scaled to these cores (--host-cores overrides; --host here keeps
# this machine's). A GPU no cloud rents alone (a desktop card) has none: the estimate then keeps this machine's cores
# and says so. Source of every row: AWS_GPU_INSTANCES
RENTED_HOSTS = {
    "k80": RentedHost(4, "AWS p2.xlarge: 1 K80 GPU, 4 vCPUs"),
    "t4": RentedHost(4, "AWS g4dn.xlarge: 1 T4, 4 vCPUs"),
    "v100-sxm2": RentedHost(8, "AWS p3.2xlarge: 1 V100 SXM2, 8 vCPUs"),
    "a10g": RentedHost(4, "AWS g5.xlarge: 1 A10G, 4 vCPUs"),
    "l4": RentedHost(4, "AWS g6.xlarge: 1 L4, 4 vCPUs"),
    "l40s": RentedHost(4, "AWS g6e.xlarge: 1 L40S, 4 vCPUs"),
    "a100-40gb": RentedHost(12, "AWS p4d.24xlarge: 8 A100 40GB SXM, 96 vCPUs"),
    "a100-80gb": RentedHost(12, "AWS p4de.24xlarge: 8 A100 80GB SXM, 96 vCPUs"),
    "h100-sxm": RentedHost(24, "AWS p5.48xlarge: 8 H100 SXM, 192 vCPUs"),
    "h200": RentedHost(24, "AWS p5e.48xlarge: 8 H200, 192 vCPUs"),
}


class TargetError(DevicebenchError, ValueError):
    """An `--on` that names no GPU, one twice, or one the catalog does not know; the message says what to write."""


class UnknownTarget(TargetError):
    """A GPU the catalog does not know; the message names the closest key, if one is close, and every key."""

    def __init__(self, name: str) -> None:
        keys = [datasheet.key for datasheet in DATASHEETS]
        close = difflib.get_close_matches(name.strip().lower(), keys, n=1)
        suggestion = f" Did you mean {close[0]!r}?" if close else ""
        super().__init__(f"Unknown GPU {name!r}.{suggestion} Known: {', '.join(keys)}.")
        self.name = name


def catalog_entry(key: str) -> Datasheet:
    """The catalog's GPU by its key ("h100-sxm") or product name ("H100 SXM"), in any case, spaces trimmed."""
    wanted = key.strip().lower()
    for datasheet in DATASHEETS:
        if wanted in (datasheet.key, datasheet.product.lower()):
            return datasheet
    raise UnknownTarget(key)


def parse_targets(text: str) -> list[Datasheet]:
    """The GPUs of `--on`: "all" (the whole catalog, in its order) or keys separated by commas, each once."""
    if text.strip().lower() == "all":
        return list(DATASHEETS)
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise TargetError(
            f"No GPU named: write keys separated by commas (e.g. `--on t4,a100-80gb`) or `--on all`. "
            f"Known: {', '.join(datasheet.key for datasheet in DATASHEETS)}."
        )
    if not all(names):
        raise TargetError(
            f"An empty GPU name in {text!r}: write keys separated by single commas (e.g. `--on t4,a100-80gb`)."
        )
    targets: list[Datasheet] = []
    for name in names:
        datasheet = catalog_entry(name)
        if datasheet in targets:
            raise TargetError(f"{name!r} is named twice in {text!r} (as {datasheet.key!r}): name each GPU once.")
        targets.append(datasheet)
    return targets


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
