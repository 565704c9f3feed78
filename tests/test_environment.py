"""The machine fingerprint and the reasons given for a missing GPU, on this machine and on faked ones."""

from __future__ import annotations

import hashlib
import json
import platform
import re
import socket
import sys
import types
from pathlib import Path

import fakes
import numpy
import psutil
import pytest
import torch

import devicebench
from devicebench import environment, host, nvml
from devicebench.environment import (
    format_cudnn_version,
    machine_fingerprint,
    machine_id,
    no_accelerator_reason,
)
from devicebench.host import isa_from_cpuinfo, isa_from_torch_capability
from devicebench.machine import Accelerator

FINGERPRINT_KEYS = [
    "hostname", "machine_name", "os", "python", "torch", "torch_cuda_build", "torch_hip_build", "cudnn", "numpy", "devicebench",
    "cpu", "memory_total_mib", "accelerators", "no_accelerator_reason", "machine_id",
]  # fmt: skip
CPU_KEYS = [
    "model", "architecture", "physical_cores", "logical_cores", "torch_threads", "torch_interop_threads", "isa",
    "torch_cpu_capability",
]  # fmt: skip
CACHED = (
    host.cpu_model,
    host.cpu_isa,
    host._cpuinfo_text,
    environment._software_versions,
    environment._cudnn_version,
    environment._accelerator_descriptions,
    nvml.driver_version,
)

# Two CPUs of a Sapphire Rapids machine, as /proc/cpuinfo shows them (trimmed)
SAPPHIRE_RAPIDS_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
HASWELL_CPUINFO = """\
processor\t: 0
model name\t: Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz
flags\t\t: fpu sse sse2 avx avx2 fma avx512fp16_not_a_real_flag
"""
GRAVITON_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve bf16
CPU implementer\t: 0x41
"""


@pytest.fixture(autouse=True)
def fresh_caches():
    """Each test sees its own monkeypatched machine, not facts cached by an earlier test."""
    for cached in CACHED:
        cached.cache_clear()
    yield
    for cached in CACHED:
        cached.cache_clear()


@pytest.fixture
def no_accelerator_visible(monkeypatch):
    """A Linux machine on which PyTorch sees no GPU; `build(...)` then chooses the build (any Machine field), and
    tests choose the driver and the variables."""
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def build(**changes: object) -> None:
        fakes.install_machine(monkeypatch, fakes.machine(**changes))

    build()
    return build


class NvmlLibraryMissing(fakes.FakeNvmlError):
    text = "NVML Shared Library Not Found"


@pytest.fixture
def fake_h100s(monkeypatch):
    """Two H100s behind a CUDA 12.4 build with cuDNN 9.1.0 and NVML reporting driver 550.54.15 (as bytes)."""
    fakes.install_machine(monkeypatch, fakes.cuda_build(devices=2), fakes.h100s(2))
    fakes.install_nvml(monkeypatch, [fakes.FakeGpu()], driver=b"550.54.15")


def test_fingerprint_has_exactly_the_documented_keys_and_types():
    fingerprint = machine_fingerprint()
    assert list(fingerprint) == FINGERPRINT_KEYS
    assert list(fingerprint["cpu"]) == CPU_KEYS
    assert list(fingerprint["cpu"]["isa"]) == ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]
    assert all(isinstance(value, bool) for value in fingerprint["cpu"]["isa"].values())
    for key in ("hostname", "os", "python", "torch", "numpy", "devicebench", "machine_id"):
        assert isinstance(fingerprint[key], str) and fingerprint[key], key
    for key in ("logical_cores", "torch_threads", "torch_interop_threads"):
        assert isinstance(fingerprint["cpu"][key], int) and fingerprint["cpu"][key] >= 1, key
    assert fingerprint["cpu"]["physical_cores"] is None or fingerprint["cpu"]["physical_cores"] >= 1
    assert isinstance(fingerprint["memory_total_mib"], int)
    assert isinstance(fingerprint["accelerators"], list)


def test_fingerprint_reports_this_machine():
    fingerprint = machine_fingerprint()
    assert fingerprint["hostname"] == socket.gethostname()
    assert fingerprint["python"] == platform.python_version()
    assert fingerprint["torch"] == torch.__version__
    assert fingerprint["torch_cuda_build"] == torch.version.cuda
    assert fingerprint["numpy"] == numpy.__version__
    assert fingerprint["devicebench"] == devicebench.__version__
    assert fingerprint["memory_total_mib"] == psutil.virtual_memory().total // 2**20
    assert fingerprint["cpu"]["model"] == host.cpu_model()
    assert fingerprint["cpu"]["architecture"] == platform.machine()
    assert fingerprint["cpu"]["logical_cores"] == psutil.cpu_count()
    assert fingerprint["cpu"]["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert fingerprint["no_accelerator_reason"] == no_accelerator_reason()


def test_fingerprint_round_trips_through_json():
    fingerprint = machine_fingerprint()
    assert json.loads(json.dumps(fingerprint)) == fingerprint


def test_fingerprint_reports_the_thread_count_set_since_the_last_call():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert machine_fingerprint()["cpu"]["torch_threads"] == 1
        torch.set_num_threads(threads + 1)
        assert machine_fingerprint()["cpu"]["torch_threads"] == threads + 1
    finally:
        torch.set_num_threads(threads)


def test_machine_id_is_stable_and_follows_the_hostname(monkeypatch):
    first, second = machine_fingerprint()["machine_id"], machine_fingerprint()["machine_id"]
    assert first == second
    assert len(first) == 12 and int(first, 16) >= 0
    monkeypatch.setattr(socket, "gethostname", lambda: "another-host")
    moved = machine_fingerprint()
    assert moved["hostname"] == "another-host"
    assert moved["machine_id"] != first
    assert moved["machine_id"] == machine_id("another-host", host.cpu_model(), [])


def test_a_chosen_machine_name_labels_the_machine_and_sets_its_id(monkeypatch):
    monkeypatch.setenv("DEVICEBENCH_MACHINE", "  laptop ")
    named = machine_fingerprint()
    assert named["machine_name"] == "laptop" and named["hostname"] == socket.gethostname()
    assert named["machine_id"] == machine_id("laptop", host.cpu_model(), [])
    monkeypatch.setenv("DEVICEBENCH_MACHINE", "")
    assert machine_fingerprint()["machine_name"] == socket.gethostname()


def test_machine_id_hashes_hostname_cpu_and_sorted_accelerator_names():
    expected = hashlib.sha256(b"node1\nAMD EPYC 9654\nNVIDIA A100\nNVIDIA H100").hexdigest()[:12]
    assert machine_id("node1", "AMD EPYC 9654", ["NVIDIA H100", "NVIDIA A100"]) == expected
    assert machine_id("node1", "AMD EPYC 9654", ["NVIDIA A100", "NVIDIA H100"]) == expected
    assert machine_id("node1", "AMD EPYC 9654", ["NVIDIA A100"]) != expected


@pytest.mark.parametrize(
    ("cpuinfo", "present"),
    [
        (SAPPHIRE_RAPIDS_CPUINFO, {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}),
        (HASWELL_CPUINFO, {"avx2"}),  # a flag that merely starts with "avx512f" is not avx512f
        (GRAVITON_CPUINFO, set()),  # Arm lists "Features", none of them x86 ISA
        ("", set()),
    ],
)
def test_isa_from_cpuinfo_reads_the_flags_line(cpuinfo, present):
    assert isa_from_cpuinfo(cpuinfo) == {flag: flag in present for flag in host.ISA_FLAGS}


@pytest.mark.parametrize(
    ("capability", "present"),
    [("AVX512", {"avx2", "avx512f"}), ("AVX2", {"avx2"}), ("DEFAULT", set()), ("SVE256", set())],
)
def test_isa_from_torch_capability_implies_only_what_it_names(capability, present):
    assert isa_from_torch_capability(capability) == {flag: flag in present for flag in host.ISA_FLAGS}


def test_fingerprint_isa_comes_from_proc_cpuinfo_on_linux(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo_text", lambda: HASWELL_CPUINFO)
    fakes.install_machine(monkeypatch, fakes.machine(cpu_capability="AVX512"))  # must not be consulted
    isa = machine_fingerprint()["cpu"]["isa"]
    assert isa == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}


def test_fingerprint_isa_comes_from_torch_without_proc_cpuinfo(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo_text", lambda: "")
    fakes.install_machine(monkeypatch, fakes.machine(cpu_capability="AVX2"))
    isa = machine_fingerprint()["cpu"]["isa"]
    assert isa == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False, "amx_tile": False}


def test_cpu_model_reads_model_name_from_proc_cpuinfo(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo_text", lambda: SAPPHIRE_RAPIDS_CPUINFO)
    assert host.cpu_model() == "Intel(R) Xeon(R) Platinum 8480+"


def test_cpu_model_asks_sysctl_on_macos(monkeypatch):
    monkeypatch.setattr(host, "_cpuinfo_text", lambda: "")
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    asked = []

    def fake_run(command, **options):
        asked.append(command)
        return types.SimpleNamespace(stdout="Apple M2 Pro\n")

    monkeypatch.setattr(host.subprocess, "run", fake_run)
    assert host.cpu_model() == "Apple M2 Pro"
    assert asked == [["sysctl", "-n", "machdep.cpu.brand_string"]]


@pytest.mark.parametrize(
    ("processor", "expected"),
    [("Intel64 Family 6 Model 85 Stepping 7, GenuineIntel", "Intel64 Family 6 Model 85 Stepping 7, GenuineIntel"),
     ("", "AMD64")],
)  # fmt: skip
def test_cpu_model_falls_back_to_platform(monkeypatch, processor, expected):
    monkeypatch.setattr(host, "_cpuinfo_text", lambda: "")
    monkeypatch.setattr(platform, "system", lambda: "Windows")
    monkeypatch.setattr(platform, "processor", lambda: processor)
    monkeypatch.setattr(platform, "machine", lambda: "AMD64")
    assert host.cpu_model() == expected


@pytest.mark.parametrize(
    ("raw", "rocm", "expected"),
    [(90100, False, "9.1.0"), (91002, False, "9.10.2"), (8902, False, "8.9.2"), (7605, False, "7.6.5"),
     (3001000, True, "MIOpen 3.1.0")],
)  # fmt: skip
def test_format_cudnn_version(raw, rocm, expected):
    assert format_cudnn_version(raw, rocm=rocm) == expected


def test_fingerprint_describes_each_cuda_gpu(fake_h100s):
    fingerprint = machine_fingerprint()
    h100 = {
        "kind": "cuda",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "compute_capability": "9.0",
        "multiprocessors": 132,
        "driver": "550.54.15",
        "cuda_runtime": "12.4",
        "cudnn": "9.1.0",
        "power_limit_w": 700.0,
    }
    assert fingerprint["accelerators"] == [{"device": "cuda:0", **h100}, {"device": "cuda:1", **h100}]
    assert fingerprint["cudnn"] == "9.1.0"
    assert fingerprint["torch_cuda_build"] == "12.4"
    assert fingerprint["no_accelerator_reason"] is None
    assert fingerprint["machine_id"] == machine_id(
        socket.gethostname(), host.cpu_model(), ["NVIDIA H100 80GB HBM3"] * 2
    )
    assert json.loads(json.dumps(fingerprint)) == fingerprint


def test_changing_a_returned_fingerprint_leaves_the_next_one_intact(fake_h100s):
    machine_fingerprint()["accelerators"][0]["name"] = "changed"
    assert machine_fingerprint()["accelerators"][0]["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "pynvml", [None, fakes.fake_pynvml([], driver="", init_error=NvmlLibraryMissing())[0]], ids=["absent", "no-driver"]
)
def test_driver_is_none_without_working_nvml(fake_h100s, monkeypatch, pynvml):
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)  # None in sys.modules makes `import pynvml` fail
    assert [entry["driver"] for entry in machine_fingerprint()["accelerators"]] == [None, None]


def test_fingerprint_describes_apple_and_intel_gpus(monkeypatch):
    monkeypatch.setattr(host, "cpu_model", lambda: "Apple M2 Pro")
    apple = Accelerator(torch.device("mps"), None, 21 * 2**30)
    intel = Accelerator(torch.device("xpu", 0), "Intel(R) Data Center GPU Max 1100", 64 * 2**30, driver="1.3.27642")
    fakes.install_machine(monkeypatch, fakes.machine(mps_available=True, xpu_devices=1), [apple, intel])
    assert machine_fingerprint()["accelerators"] == [
        {"device": "mps", "kind": "mps", "name": "Apple M2 Pro GPU", "memory_total_mib": 21 * 1024},
        {
            "device": "xpu:0",
            "kind": "xpu",
            "name": "Intel(R) Data Center GPU Max 1100",
            "memory_total_mib": 64 * 1024,
            "driver": "1.3.27642",
        },
    ]


@pytest.mark.skipif(
    torch.version.cuda is not None or torch.version.hip is not None, reason="this PyTorch is a GPU build"
)
def test_on_this_machine_the_reason_is_the_cpu_only_build():
    reason = no_accelerator_reason()
    assert reason.startswith(f"this PyTorch ({torch.__version__}) is a CPU-only build: ")
    assert "https://pytorch.org/get-started/locally/" in reason


def test_reason_is_none_when_a_gpu_is_usable(fake_h100s):
    assert no_accelerator_reason() is None


def test_reason_for_a_cpu_only_build(no_accelerator_visible):
    no_accelerator_visible(cuda_build=None, torch_version="2.13.0+cpu")
    assert no_accelerator_reason() == (
        "this PyTorch (2.13.0+cpu) is a CPU-only build: it cannot use a GPU even if one is present. "
        "Install a CUDA build from https://pytorch.org/get-started/locally/"
    )


def test_reason_for_a_cuda_build_without_a_driver(no_accelerator_visible, monkeypatch):
    no_accelerator_visible(cuda_build="12.4")
    fakes.install_driver(monkeypatch)
    assert no_accelerator_reason() == (
        "this PyTorch has CUDA 12.4 but no NVIDIA driver was found (no /proc/driver/nvidia, no nvidia-smi)"
    )


@pytest.mark.parametrize(
    ("paths", "tools"), [({"/proc/driver/nvidia"}, set()), (set(), {"nvidia-smi"})], ids=["proc", "nvidia-smi"]
)
@pytest.mark.parametrize("visible", ["", "-1", "GPU-deadbeef"])
def test_reason_for_gpus_hidden_by_cuda_visible_devices(no_accelerator_visible, monkeypatch, paths, tools, visible):
    no_accelerator_visible(cuda_build="12.4")
    fakes.install_driver(monkeypatch, paths=paths, tools=tools)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert no_accelerator_reason() == (
        f"this PyTorch has CUDA 12.4 and a driver is present, but no GPU is visible (CUDA_VISIBLE_DEVICES={visible!r})"
    )


def test_reason_for_a_driver_that_finds_no_gpu(no_accelerator_visible, monkeypatch):
    no_accelerator_visible(cuda_build="12.4")
    fakes.install_driver(monkeypatch, paths={"/proc/driver/nvidia"}, tools={"nvidia-smi"})
    reason = no_accelerator_reason()
    assert reason.startswith("this PyTorch has CUDA 12.4 and a driver is present, but it finds no usable GPU: ")
    assert "too old for CUDA 12.4" in reason
    assert "nvidia-smi shows the driver" in reason


def test_reason_for_a_rocm_build_without_a_driver(no_accelerator_visible, monkeypatch):
    no_accelerator_visible(hip_build="6.1.40091")
    fakes.install_driver(monkeypatch)
    assert no_accelerator_reason() == (
        "this PyTorch has ROCm 6.1.40091 but no AMD GPU driver was found (no /dev/kfd, no rocm-smi, no amd-smi)"
    )


def test_reason_for_a_rocm_build_with_hidden_gpus(no_accelerator_visible, monkeypatch):
    no_accelerator_visible(hip_build="6.1.40091")
    fakes.install_driver(monkeypatch, paths={"/dev/kfd"})
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert no_accelerator_reason() == (
        "this PyTorch has ROCm 6.1.40091 and a driver is present, but no GPU is visible (HIP_VISIBLE_DEVICES='')"
    )


@pytest.mark.parametrize(
    ("mps_built", "expected"),
    [
        (False, "this PyTorch (2.13.0) was built without MPS. Install a macOS build from "
                "https://pytorch.org/get-started/locally/"),
        (True, "this PyTorch has MPS, but macOS offers it no GPU: MPS needs macOS 12.3 or later on Apple silicon"),
    ],
)  # fmt: skip
def test_reason_on_macos_is_about_mps(no_accelerator_visible, monkeypatch, mps_built, expected):
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    no_accelerator_visible(mps_built=mps_built, torch_version="2.13.0")  # PyTorch's macOS builds have no CUDA
    assert no_accelerator_reason() == expected
    assert host.unavailable_reason("cuda") == "PyTorch has no CUDA on macOS: the Apple GPU is the device 'mps'."


def test_reason_for_an_xpu_build_without_an_intel_gpu(no_accelerator_visible, monkeypatch):
    no_accelerator_visible(xpu_build="20250101")
    assert no_accelerator_reason() == (
        "this PyTorch has XPU (20250101) but finds no Intel GPU: check the Intel GPU driver "
        "and that ZE_AFFINITY_MASK does not hide the devices"
    )


def test_unavailable_reason_is_none_for_the_cpu_and_for_a_usable_kind(fake_h100s):
    assert host.unavailable_reason("cpu") is None
    assert host.unavailable_reason("cuda") is None


def test_hiding_settings_name_only_the_variables_this_build_obeys(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "0.0")
    fakes.install_machine(monkeypatch, fakes.machine(hip_build=None))
    assert host.device_hiding_settings("cuda") == "CUDA_VISIBLE_DEVICES='0'"
    fakes.install_machine(monkeypatch, fakes.machine(hip_build="6.1.40091"))
    assert host.device_hiding_settings("cuda") == "CUDA_VISIBLE_DEVICES='0', HIP_VISIBLE_DEVICES='1'"
    assert host.device_hiding_settings("xpu") == "ZE_AFFINITY_MASK='0.0'"
    assert host.device_hiding_settings("mps") == ""


def test_the_isa_can_be_forced_to_an_avx2_or_an_amx_cpu_whatever_this_one_is(force_cpu_isa):
    force_cpu_isa("avx2")
    assert host.cpu_isa() == {
        "avx2": True,
        "avx512f": False,
        "avx512_bf16": False,
        "amx_bf16": False,
        "amx_tile": False,
    }
    force_cpu_isa(" AVX2, avx512f,avx512_bf16 ,amx_bf16,amx_tile")
    assert all(host.cpu_isa().values())
    assert machine_fingerprint()["cpu"]["isa"]["amx_bf16"]  # the record says what the run took the CPU to be


def test_a_forced_isa_naming_an_unknown_flag_is_an_error_that_lists_the_known_ones(force_cpu_isa):
    force_cpu_isa("avx2,sse9")
    with pytest.raises(ValueError, match=r"DEVICEBENCH_CPU_ISA names sse9; the flags it knows are avx2, avx512f"):
        host.cpu_isa()


def test_the_torch_floor_is_one_release_for_pyproject_and_the_readme_and_this_torch_meets_it():
    root = Path(__file__).parent.parent
    floor = re.search(r'"torch>=([\d.]+)"', (root / "pyproject.toml").read_text())[1]
    assert f"PyTorch {floor} or newer" in (root / "README.md").read_text()
    assert tuple(map(int, floor.split("."))) >= (2, 5)  # torch.OutOfMemoryError, which devices.py catches
    assert tuple(map(int, torch.__version__.split("+")[0].split(".")[:2])) >= tuple(map(int, floor.split(".")))
