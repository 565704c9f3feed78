"""The software checks of `devicebench check`: the PyTorch build against the GPUs and drivers present, the driver
and toolkit versions, variables that hide devices, and the optional libraries a GPU needs (nvidia-ml-py, XGBoost
with CUDA).

    python -c "from devicebench.check import software; print(software.pytorch_build_check())"
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re

from devicebench import devices, host, machine, nvml
from devicebench.check.findings import FAIL, PASS, SOFTWARE, WARN, Check, accelerators, nvidia_gpus
from devicebench.environment import format_cudnn_version

# The distributions a GPU build of PyTorch brings beside its own: CUDA's (nvidia-*, cuda-*) and Triton's compiler
GPU_LIBRARY_DISTRIBUTIONS = re.compile(r"(nvidia|cuda)[-_.]|triton$|pytorch-triton", re.IGNORECASE)


def _torch_build() -> str:
    build = machine.snapshot()
    if build.cuda_build:
        return f"CUDA {build.cuda_build}"
    if build.hip_build:
        return f"ROCm {build.hip_build}"
    if build.xpu_build:
        return f"XPU {build.xpu_build}"
    return "MPS" if build.mps_built else "CPU-only"


def pytorch_build_check() -> Check:
    """The build against the GPUs: a driver present that PyTorch cannot use fails; a CPU machine passes, saying why,
    unless its PyTorch is a GPU build, whose gigabytes of CUDA or ROCm libraries it cannot use: a warn."""
    build = _torch_build()
    measured = f"torch {machine.snapshot().torch_version}, a {build} build"
    seen = accelerators()
    driver = host.gpu_driver()
    if seen:
        listing = ", ".join(f"{device} ({devices.device_name(device)})" for device in seen)
        return Check(None, SOFTWARE, "PyTorch build", PASS, f"{measured}; it sees {listing}")
    if driver and build == "CPU-only":
        vendor, place = driver
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            FAIL,
            f"{measured}, but an {vendor} GPU driver is present ({place})",
            f"Install a {'ROCm' if vendor == 'AMD' else 'CUDA'} build of PyTorch ({host.INSTALL_URL}): "
            "this one cannot use the GPU, so every 'GPU' figure would be the CPU's.",
        )
    looked = ", ".join(path for paths, tools in host.GPU_DRIVERS.values() for path in (*paths, *tools))
    if build == "CPU-only" and not driver:
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            PASS,
            f"{measured}; no GPU driver either (looked for {looked}): a CPU machine, which this build suits",
        )
    if not driver and (machine.snapshot().cuda_build or machine.snapshot().hip_build):
        size = _installed_gigabytes()
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            WARN,
            f"{measured}, {size:.1f} GB on disk with its GPU libraries; no GPU driver either (looked for "
            f"{looked}): nothing here can use them",
            f"A {build.split()[0]} build is gigabytes for nothing on a machine without a GPU. In a new "
            f"virtual environment, `{host.CPU_INSTALL}` before installing devicebench gives the CPU build "
            "(under 1 GB), which trains on the CPU as this one does (uninstalling torch alone would leave "
            "its libraries behind).",
        )
    reason = host.unavailable_reason(host.expected_accelerator_kind()) or "PyTorch reports no GPU"
    if driver:
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            FAIL,
            f"{measured}; a {driver[0]} driver is present ({driver[1]}), yet PyTorch sees no GPU",
            f"{reason[:1].upper()}{reason[1:]}.",
        )
    return Check(None, SOFTWARE, "PyTorch build", PASS, f"{measured}; no GPU here: {reason}")


def _installed_gigabytes() -> float:
    """What torch and the GPU libraries installed beside it take on disk, in GB, from each distribution's record
    (the first of each name on the path, as import finds it)."""
    sizes: dict[str, int] = {}
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()  # None for a broken install
        if name not in sizes and (name == "torch" or GPU_LIBRARY_DISTRIBUTIONS.match(name)):
            sizes[name] = sum(file.size or 0 for file in distribution.files or ())
    return sum(sizes.values()) / 1e9


def driver_check() -> Check:
    """The driver's and the toolkit's versions: recorded for the reader, a pass whatever they are."""
    found = []
    driver = nvml.driver_version()
    if driver:
        found.append(f"NVIDIA driver {driver}")
    build = machine.snapshot()
    if build.cuda_build:
        found.append(f"PyTorch's CUDA {build.cuda_build}")
    if build.hip_build:
        found.append(f"PyTorch's ROCm {build.hip_build}")
    library = build.cudnn_version  # None without cuDNN or MIOpen
    if library is not None:
        text = format_cudnn_version(library, rocm=bool(build.hip_build))
        found.append(text if build.hip_build else f"cuDNN {text}")
    measured = ", ".join(found) or "no NVIDIA driver answers NVML; PyTorch has neither CUDA nor ROCm"
    return Check(None, SOFTWARE, "driver and toolkit", PASS, measured)


def visible_devices_check() -> Check:
    """Variables such as CUDA_VISIBLE_DEVICES hide GPUs from PyTorch: a warn, as the hiding may be deliberate."""
    hiding = ", ".join(filter(None, (host.device_hiding_settings(kind) for kind in ("cuda", "xpu"))))
    if not hiding:
        return Check(None, SOFTWARE, "visible devices", PASS, "no CUDA_VISIBLE_DEVICES or similar: nothing hidden")
    seen = ", ".join(str(device) for device in accelerators()) or "no GPU"
    return Check(
        None,
        SOFTWARE,
        "visible devices",
        WARN,
        f"{hiding} is set; PyTorch sees {seen}",
        "Unset it to check and benchmark every GPU, unless you meant to give devicebench only these.",
    )


def nvml_module_check() -> Check:
    """nvidia-ml-py where an NVIDIA GPU is: without it there is no utilisation, power or energy."""
    if not nvidia_gpus():
        return Check(None, SOFTWARE, "nvidia-ml-py", PASS, "not needed: no NVIDIA GPU in use")
    try:
        importlib.import_module("pynvml")
    except ImportError:
        return Check(
            None,
            SOFTWARE,
            "nvidia-ml-py",
            WARN,
            "not installed",
            "pip install nvidia-ml-py (the gpu extra): without it devicebench reports no GPU utilisation, "
            "power or energy, and this check cannot see the GPU's clocks or processes.",
        )
    driver = nvml.driver_version()
    if driver is None:
        return Check(
            None,
            SOFTWARE,
            "nvidia-ml-py",
            WARN,
            "installed, but NVML does not start",
            "NVML comes with the driver (libnvidia-ml.so): check that nvidia-smi works.",
        )
    return Check(None, SOFTWARE, "nvidia-ml-py", PASS, f"installed; NVML answers (driver {driver})")


def xgboost_check() -> Check:
    """XGBoost built with CUDA where a GPU is: the gbdt workloads train on it, or silently do not."""
    gpus = nvidia_gpus()
    try:
        xgboost = importlib.import_module("xgboost")
    except ImportError:
        if gpus:
            return Check(
                None,
                SOFTWARE,
                "XGBoost",
                WARN,
                "not installed",
                "pip install 'devicebench[gbdt]' to run the gbdt workloads on the GPU.",
            )
        return Check(None, SOFTWARE, "XGBoost", PASS, "not installed (optional: the gbdt workloads need it)")
    with_cuda = bool(xgboost.build_info().get("USE_CUDA"))
    measured = f"XGBoost {xgboost.__version__}, built {'with' if with_cuda else 'without'} CUDA"
    if gpus and not with_cuda:
        return Check(
            None,
            SOFTWARE,
            "XGBoost",
            WARN,
            measured,
            "Install the xgboost wheel from PyPI (built with CUDA on Linux x86-64), not xgboost-cpu: "
            "this one trains the gbdt workloads on the CPU even on a GPU.",
        )
    return Check(None, SOFTWARE, "XGBoost", PASS, measured)


SOFTWARE_CHECKS = (pytorch_build_check, driver_check, visible_devices_check, nvml_module_check, xgboost_check)
