"""Calibration: sustained figures computed exactly on a fake device of known speed, precisions measured only where
the device computes them natively, a time cap that holds whatever the device's speed, ceilings stored per machine
and merged, read back safely, set against the right datasheet, and the `calibrate` command end to end on the CPU."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import statistics
from collections.abc import Callable

import fakes
import psutil
import pytest
import torch
from torch.overrides import TorchFunctionMode
from typer.testing import CliRunner

from devicebench import planning
from devicebench.cli import EXIT_USAGE, app
from devicebench.cli import calibrate as calibrate_command
from devicebench.engine import calibrate, calibration_store, run_to_run
from devicebench.engine.calibrate import (
    CPU_PLAN,
    GPU_PLAN,
    CalibrationPlan,
    DeviceCeilings,
    Measurement,
    default_plan,
    measure_ceilings,
)
from devicebench.engine.calibration_files import CALIBRATION_DIR_VARIABLE, calibration_path
from devicebench.engine.calibration_store import CalibrationError, load_calibration, peak_tflops, save_calibration
from devicebench.engine.timing import Stopwatch
from devicebench.environment import machine_fingerprint
from devicebench.results.datasheets import datasheet_for

cli = CliRunner()
MACHINE = "0123456789ab"
AVX2 = "avx2"  # the AMD EPYC this project met: bf16 only emulated
AMX = "avx2,avx512f,avx512_bf16,amx_bf16,amx_tile"  # a Sapphire Rapids Xeon: bf16 in hardware
# Real work in milliseconds: forced AMX on an AVX2 machine runs bf16 emulated, slowly, so it must stay this small
TINY_PLAN = CalibrationPlan(
    matmul_size=64,
    memory_copy_bytes=2**20,
    host_to_device_bytes=2**20,
    warmup_s=0.01,
    stretch_s=0.02,
    stretches=2,
    cap_s=0.5,
)


@pytest.fixture(autouse=True)
def processes_of_known_rates(monkeypatch):
    """calibrate's run-to-run measurement with each fresh process replaced by known epochs: a second, not half a
    minute (tests/test_run_to_run.py starts real ones)."""
    monkeypatch.setattr(
        calibrate_command,
        "measure_run_to_run",
        lambda device: run_to_run.measure_run_to_run(device, launch=lambda name: [100.0, 102.0, 98.0]),
    )


@pytest.fixture
def calibration_folder(no_stored_calibration):
    """The empty calibration folder every test gets (conftest.py): none touches the user's real one."""
    return no_stored_calibration


class FakeDevice(TorchFunctionMode):
    """A device of known speed on a fake clock. A product costs its 2 n^3 FLOPs at `tflops[precision]`, an
    on-device copy its bytes at `copy_gb_s`, a host-to-device copy its bytes at `host_gb_s`, each scaled by
    `speed(now)` (2.0: twice as fast). Nothing is computed and every new tensor lives on the meta device, so a
    GPU's sizes cost neither time nor memory."""

    def __init__(
        self,
        tflops: dict[str, float],
        copy_gb_s: float,
        host_gb_s: float = 25.0,
        speed: Callable[[float], float] = lambda now: 1.0,
    ) -> None:
        super().__init__()
        self.tflops, self.copy_gb_s, self.host_gb_s, self.speed = tflops, copy_gb_s, host_gb_s, speed
        self.seconds = 0.0
        self.products: collections.Counter[str] = collections.Counter()  # precision → products run

    def watch(self, device: torch.device) -> Stopwatch:
        def host_clock() -> float:
            raise AssertionError("a calibration read the clock without synchronizing the device")

        return Stopwatch(device, clock=lambda: self.seconds, synchronize=lambda device: None, host_clock=host_clock)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.matmul:
            n = args[0].shape[0]
            precision = (
                "bf16"
                if args[0].dtype == torch.bfloat16
                else "tf32"
                if torch.backends.cuda.matmul.allow_tf32
                else "fp32"
            )
            self.products[precision] += 1
            self._spend(2 * n**3 / (self.tflops[precision] * 1e12))
            return kwargs["out"]
        if func is torch.Tensor.copy_:
            host_to_device = "non_blocking" in kwargs
            self._spend(args[1].nbytes / ((self.host_gb_s if host_to_device else self.copy_gb_s) * 1e9))
            return args[0]
        if func is torch.Tensor.pin_memory:
            return args[0]
        if func in (torch.randn, torch.ones, torch.empty):
            kwargs["device"] = "meta"
            kwargs.pop("generator", None)
        return func(*args, **kwargs)

    def _spend(self, seconds: float) -> None:
        self.seconds += seconds / self.speed(self.seconds)


@pytest.fixture
def fake_cuda(monkeypatch) -> Callable[[tuple[int, int], str], torch.device]:
    """cuda:0 of a given compute capability and name on this CPU-only build, as far as calibrate can tell (with
    FakeDevice for its tensors)."""

    def install(capability: tuple[int, int], name: str) -> torch.device:
        gpu = dataclasses.replace(fakes.H100, name=name, compute_capability=capability)
        fakes.install_machine(monkeypatch, fakes.cuda_build(devices=1), [gpu])
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: capability >= (8, 0))
        monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())  # no current device here
        cpu_generator = torch.Generator
        monkeypatch.setattr(torch, "Generator", lambda device=None: cpu_generator())  # a CUDA one needs CUDA
        return torch.device("cuda", 0)

    return install


def measured(rate: float, size: int = 64) -> Measurement:
    return Measurement(rate=rate, size=size, stretch_s=(1.0, 1.25, 1.5), stretch_rates=(rate * 1.1, rate, rate * 0.9))


def ceilings(device: str = "cpu", fp32: float = 0.5, **fields) -> DeviceCeilings:
    values = {
        "device": device,
        "device_name": f"{device} model",
        "matmul": {"fp32": measured(fp32), "bf16": measured(2.0)},
        "not_native": (),
        "memory_copy": measured(20.0, 2**20),
        "host_to_device": {},
        "plan": TINY_PLAN,
    } | fields
    return DeviceCeilings(**values)


def test_a_cpu_figure_is_the_median_of_stretches_of_a_second_of_sustained_work(force_cpu_isa):
    force_cpu_isa(AVX2)
    fake = FakeDevice({"fp32": 0.5}, copy_gb_s=10.0)
    steps = []
    with fake:
        result = measure_ceilings(torch.device("cpu"), watch=fake.watch(torch.device("cpu")), progress=steps.append)
    assert result.plan == CPU_PLAN == default_plan(torch.device("cpu"))
    assert CPU_PLAN.stretch_s >= 1.0 and CPU_PLAN.stretches >= 3
    product, copy = result.matmul["fp32"], result.memory_copy
    assert product.size == 2048 and copy.size == 256 * 2**20  # 34 ms and 27 ms an operation: the largest sizes
    for figure in (product, copy):
        assert len(figure.stretch_s) == CPU_PLAN.stretches and min(figure.stretch_s) >= CPU_PLAN.stretch_s
        assert figure.rate == statistics.median(figure.stretch_rates)
    assert product.rate == pytest.approx(0.5) and product.stretch_rates == pytest.approx([0.5] * 3)
    assert copy.rate == pytest.approx(20.0)  # 10 GB/s of copying: each byte read and written
    assert result.host_to_device == {}  # nothing crosses to the CPU
    assert steps == ["fp32 matmul, up to 2048x2048", "memory copy, up to 256 MiB"]


@pytest.mark.parametrize("isa, not_native, bf16_products", [(AVX2, ("bf16",), 0), (AMX, (), "some")])
def test_bf16_is_measured_only_on_a_cpu_that_computes_it_natively(isa, not_native, bf16_products, force_cpu_isa):
    force_cpu_isa(isa)
    fake = FakeDevice({"fp32": 0.5, "bf16": 4.0}, copy_gb_s=10.0)
    with fake:
        result = measure_ceilings(torch.device("cpu"), watch=fake.watch(torch.device("cpu")))
    assert result.not_native == not_native
    assert (fake.products["bf16"] > 0) == (bf16_products == "some")  # an emulated bf16 product is never run
    save_calibration(MACHINE, "laptop", [result])
    assert peak_tflops(MACHINE, "cpu", "fp32") == pytest.approx(0.5)
    assert peak_tflops(MACHINE, "cpu", "bf16") == (None if not_native else pytest.approx(4.0))
    assert peak_tflops(MACHINE, "cpu", "tf32") is None  # NVIDIA's alone: neither measured nor "not native"


@pytest.mark.parametrize(
    "tflops, gb_s",
    [
        (4.5e-6, 0.01),  # a 128x128 product takes 0.93 s: two stretches of two products fit in the cap, not three
        (1e-5, 0.01),  # a thousand times slower than emulated bf16 here: products of 128x128
        (1e-3, 1.0),
        (0.5, 20.0),
        (100.0, 300.0),  # a GPU's speed on the CPU's plan
    ],
)
def test_the_time_cap_holds_whatever_the_devices_speed(tflops, gb_s, force_cpu_isa):
    force_cpu_isa(AMX)  # every CPU figure: fp32, bf16 and the copy
    fake = FakeDevice({"fp32": tflops, "bf16": tflops}, copy_gb_s=gb_s)
    started = []
    with fake:
        result = measure_ceilings(
            torch.device("cpu"),
            watch=fake.watch(torch.device("cpu")),
            progress=lambda step: started.append(fake.seconds),
        )
    durations = [end - start for start, end in zip(started, [*started[1:], fake.seconds])]
    assert len(durations) == 3 and max(durations) <= CPU_PLAN.cap_s
    assert fake.seconds <= 3 * CPU_PLAN.cap_s < 60  # the whole CPU calibration, start-up aside
    for figure in (*result.matmul.values(), result.memory_copy):
        assert min(figure.stretch_s) >= CPU_PLAN.stretch_s  # however slow, a figure is sustained work
    assert result.matmul["fp32"].rate == pytest.approx(tflops) and result.memory_copy.rate == pytest.approx(2 * gb_s)


def test_a_gpu_figure_is_sustained_work_not_a_boost_clock_burst(fake_cuda):
    device = fake_cuda((9, 0), "NVIDIA H100 80GB HBM3")
    assert default_plan(device) == GPU_PLAN and GPU_PLAN.stretch_s >= 1.0 and GPU_PLAN.stretches >= 3

    def speed(now: float) -> float:  # boost clocks for half a second, and a neighbour's hiccup in the 2nd stretch
        return 2.0 if now < 0.5 else 0.25 if 2.6 <= now < 3.0 else 1.0

    fake = FakeDevice({"fp32": 50.0, "tf32": 400.0, "bf16": 800.0}, copy_gb_s=1500.0, host_gb_s=25.0, speed=speed)
    torch.backends.cuda.matmul.allow_tf32 = True  # as a user may have set it; fp32 must still be measured as fp32
    try:
        with fake:
            result = measure_ceilings(device, watch=fake.watch(device))
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    assert result.device == "cuda:0" and result.device_name == "NVIDIA H100 80GB HBM3" and result.not_native == ()
    figures = [*result.matmul.values(), result.memory_copy, *result.host_to_device.values()]
    assert len(figures) == 6
    for figure in figures:
        assert len(figure.stretch_s) == GPU_PLAN.stretches and min(figure.stretch_s) >= 1.0
    assert {precision: product.size for precision, product in result.matmul.items()} == {
        "fp32": 8192,
        "tf32": 8192,
        "bf16": 8192,
    }
    fp32 = result.matmul["fp32"]
    assert fp32.rate == pytest.approx(50.0)  # the sustained rate: neither the boost (100) nor the hiccup
    assert min(fp32.stretch_rates) < 45.0 and sorted(fp32.stretch_rates)[1:] == pytest.approx([50.0] * 4)
    assert {precision: product.rate for precision, product in result.matmul.items()} == pytest.approx(
        {"fp32": 50.0, "tf32": 400.0, "bf16": 800.0}
    )
    assert result.memory_copy.rate == pytest.approx(3000.0)  # bytes read + written
    assert {kind: transfer.rate for kind, transfer in result.host_to_device.items()} == pytest.approx(
        {"pinned": 25.0, "pageable": 25.0}
    )


def test_a_gpu_before_ampere_has_neither_tf32_nor_bf16_measured(fake_cuda):
    device = fake_cuda((7, 5), "Tesla T4")
    fake = FakeDevice({"fp32": 8.0}, copy_gb_s=150.0)
    with fake:
        result = measure_ceilings(device, watch=fake.watch(device))
    assert set(result.matmul) == {"fp32"} and result.not_native == ("tf32", "bf16")
    assert set(fake.products) == {"fp32"}


def test_bf16_forced_native_is_measured_for_real_at_a_tiny_size(force_cpu_isa):
    force_cpu_isa(AMX)  # on a CPU without AMX this bf16 runs emulated: TINY_PLAN keeps it to milliseconds
    result = measure_ceilings(torch.device("cpu"), plan=TINY_PLAN)
    assert set(result.matmul) == {"fp32", "bf16"} and result.not_native == ()
    for figure in (*result.matmul.values(), result.memory_copy):
        assert figure.rate > 0 and figure.size == (2**20 if figure is result.memory_copy else 64)
        assert min(figure.stretch_s) >= TINY_PLAN.stretch_s


def test_ceilings_survive_a_round_trip_through_json():
    original = ceilings(not_native=("bf16",), host_to_device={"pinned": measured(24.5), "pageable": measured(9.0)})
    assert DeviceCeilings.from_dict(json.loads(json.dumps(original.to_dict()))) == original


def test_calibration_path_comes_from_the_folder_the_environment_or_the_user_data_folder(
    tmp_path, monkeypatch, calibration_folder
):
    assert calibration_path(MACHINE, tmp_path) == tmp_path / f"{MACHINE}.json"
    assert calibration_path(MACHINE) == calibration_folder / f"{MACHINE}.json"
    monkeypatch.delenv(CALIBRATION_DIR_VARIABLE)
    default = calibration_path(MACHINE)
    assert default.parent.name == "calibration" and default.parent.parent.name == "devicebench"


def test_a_later_save_keeps_the_devices_stored_before():
    save_calibration(MACHINE, "laptop", [ceilings("cpu", fp32=0.5)])
    gpu = ceilings(
        "cuda:1",
        matmul={"fp32": measured(60.0), "tf32": measured(400.0), "bf16": measured(800.0)},
        host_to_device={"pinned": measured(24.5), "pageable": measured(9.0)},
    )
    path = save_calibration(MACHINE, "laptop", [gpu])
    stored = load_calibration(MACHINE)
    assert json.loads(path.read_text()) == stored
    assert stored["schema"] == 2 and stored["machine_id"] == MACHINE and stored["machine_name"] == "laptop"
    assert stored["torch_version"] == torch.__version__
    assert sorted(stored["devices"]) == ["cpu", "cuda:1"]
    assert DeviceCeilings.from_dict(stored["devices"]["cuda:1"]) == gpu
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.5
    assert peak_tflops(MACHINE, "cuda:1", "tf32") == 400.0
    assert peak_tflops(MACHINE, "cpu", "tf32") is None  # measured only on CUDA
    assert peak_tflops(MACHINE, "cuda:0", "fp32") is None  # never calibrated
    avx2_cpu = ceilings("cpu", fp32=0.75, matmul={"fp32": measured(0.75)}, not_native=("bf16",))
    save_calibration(MACHINE, "laptop", [avx2_cpu])  # calibrating again replaces that device
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.75 and peak_tflops(MACHINE, "cuda:1", "bf16") == 800.0
    assert peak_tflops(MACHINE, "cpu", "bf16") is None  # not native: no peak to take an MFU against
    assert [file.name for file in path.parent.iterdir()] == [f"{MACHINE}.json"]  # no temporary file left behind


def test_a_machine_never_calibrated_has_no_calibration():
    assert load_calibration(MACHINE) is None
    assert peak_tflops(MACHINE, "cpu", "fp32") is None
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        peak_tflops(MACHINE, "cpu", "fp16")


SCHEMA_1_FILE = json.dumps(
    {
        "schema": 1,
        "machine_id": MACHINE,
        "devices": {
            "cpu": {
                "device": "cpu",
                "device_name": "AMD EPYC",
                "matmul_tflops": {"fp32": 0.035, "bf16": 0.0001},
                "memory_gb_s": 9.5,
                "host_to_device_gb_s": {},
                "sizes": {
                    "matmul_size": 2048,
                    "memory_copy_bytes": 268435456,
                    "host_to_device_bytes": 268435456,
                    "warmup_rounds": 2,
                    "operations_per_repeat": 5,
                    "repeats": 3,
                },
            }
        },
    }
)  # as devicebench wrote it before figures were sustained


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "Expecting property name"),
        ('{"schema": 2, "machine_id": "fedcba987654", "devices": {}}', "belongs to machine 'fedcba987654'"),
        ('{"schema": 7, "machine_id": "0123456789ab", "devices": {}}', "not a devicebench calibration of schema 2"),
        (SCHEMA_1_FILE, "not a devicebench calibration of schema 2 (schema 1)"),  # bursts and emulated bf16
        ('{"schema": 2, "machine_id": "0123456789ab", "devices": {"cpu": {"device": "cpu"}}}', "entry for 'cpu'"),
    ],
)
def test_a_corrupt_old_or_foreign_file_names_itself_and_the_fix(content, reason, caplog):
    path = calibration_path(MACHINE)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(CalibrationError) as raised:
        load_calibration(MACHINE)
    message = str(raised.value)
    assert str(path) in message and reason in message
    assert "Run `devicebench calibrate` again: it will overwrite the file" in message
    with caplog.at_level(logging.WARNING, logger=calibration_store.__name__):
        assert peak_tflops(MACHINE, "cpu", "fp32") is None  # a run goes on without its calibration
    assert str(path) in caplog.text
    save_calibration(MACHINE, "laptop", [ceilings("cpu", fp32=0.5)])  # calibrating again replaces the file
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.5


@pytest.mark.parametrize(
    "device_name, product",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", None),  # neither the SXM part nor the PCIe card
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", None),  # AWS's part: not the A10, and certainly not an A100
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", None),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", None),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 4090 D", None),  # the cut-down Chinese model
        ("Intel(R) Xeon(R) Platinum 8480+", None),
        ("AMD Instinct MI300X", None),
    ],
)
def test_datasheets_match_torch_names_word_for_word(device_name, product):
    datasheet = datasheet_for(device_name)
    assert (datasheet.product if datasheet else None) == product


def test_datasheet_figures_are_dense_peaks():
    h100 = datasheet_for("NVIDIA H100 80GB HBM3")
    assert (h100.tflops("fp32"), h100.tflops("tf32"), h100.tflops("bf16"), h100.memory_gb_s) == (
        67.0,
        494.7,
        989.4,
        3350.0,
    )  # 989 and 1,979 on the datasheet are with sparsity
    assert datasheet_for("NVIDIA H200").memory_gb_s == 4800.0
    assert datasheet_for("NVIDIA A100-SXM4-80GB").memory_gb_s == 2039.0
    t4 = datasheet_for("Tesla T4")
    assert (t4.tflops("tf32"), t4.tflops("bf16")) == (None, None)  # Turing has neither


def test_calibrate_on_an_avx2_cpu_stores_sustained_ceilings_and_shows_bf16_not_native(
    calibration_folder, force_cpu_isa, monkeypatch
):
    force_cpu_isa(AVX2)
    small = dataclasses.replace(calibrate.QUICK_PLAN, stretch_s=0.11)  # seconds, yet not --quick's plan
    monkeypatch.setattr(calibrate_command, "default_plan", lambda device: small)
    result = cli.invoke(app, ["calibrate", "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    machine = machine_fingerprint()["machine_id"]
    path = calibration_folder / f"{machine}.json"
    assert f"Calibration stored in {path}" in result.stderr
    assert "cpu (" in result.stdout and "TFLOP/s" in result.stdout and "GB/s" in result.stdout
    assert "Matmul fp32 (" in result.stdout and "No datasheet known" in result.stdout
    assert [line.split("│")[2].strip() for line in result.stdout.splitlines() if line.startswith("│ Matmul bf16")] == [
        "not native"
    ]
    caption = " ".join(result.stdout.split())
    assert "bf16: not native" in caption and "at least 0.11 s of sustained work" in caption
    stored = json.loads(path.read_text())
    cpu = DeviceCeilings.from_dict(stored["devices"]["cpu"])
    assert set(cpu.matmul) == {"fp32"} and cpu.not_native == ("bf16",) and stored["devices"]["cpu"]["not_native"]
    assert cpu.matmul["fp32"].rate > 0 and cpu.memory_copy.rate > 0
    assert cpu.host_to_device == {} and cpu.plan == small
    assert peak_tflops(machine, "cpu", "fp32") == cpu.matmul["fp32"].rate
    assert peak_tflops(machine, "cpu", "bf16") is None

    again = cli.invoke(app, ["calibrate", "--devices", "cpu", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == json.loads(path.read_text())  # --json prints exactly what was stored


def test_a_quick_calibration_is_shown_but_never_stored_nor_taken_for_mfu(calibration_folder, caplog):
    result = cli.invoke(app, ["calibrate", "--devices", "cpu", "--quick", "--json"])
    assert result.exit_code == 0, result.output
    shown = DeviceCeilings.from_dict(json.loads(result.stdout)["devices"]["cpu"])
    assert shown.plan == calibrate.QUICK_PLAN and shown.matmul["fp32"].rate > 0
    assert "Not stored: --quick understates the ceilings" in " ".join(result.stderr.split())
    assert not calibration_folder.exists()
    # a file an older devicebench stored after --quick: its peak is not used, and the run's log says why
    save_calibration(MACHINE, "test machine", [shown])
    assert peak_tflops(MACHINE, "cpu", "fp32") is None
    assert "taken with --quick, which understates its ceilings: MFU is left out" in caplog.text


@pytest.mark.parametrize(
    "spec, message",
    [
        ("tpu", "unknown device 'tpu'"),
        ("cpu,", "has an empty name"),
    ],
)
def test_calibrate_refuses_a_device_it_cannot_use(spec, message, calibration_folder):
    result = cli.invoke(app, ["calibrate", "--devices", spec, "--quick"])
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr and "Devices present: cpu" in result.stderr
    assert not calibration_folder.exists()  # nothing measured, nothing stored


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_a_gpu_is_measured_in_every_native_precision_and_the_tf32_setting_is_put_back():
    torch.backends.cuda.matmul.allow_tf32 = True  # as a user may have set it; fp32 must still be measured as fp32
    try:
        result = measure_ceilings(torch.device("cuda", 0), plan=TINY_PLAN)
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    tensor_core_precisions = {"tf32", "bf16"} if torch.cuda.get_device_capability(0) >= (8, 0) else set()
    assert set(result.matmul) == {"fp32", *tensor_core_precisions}
    assert set(result.host_to_device) == {"pinned", "pageable"}
    assert all(figure.rate > 0 for figure in [*result.matmul.values(), *result.host_to_device.values()])
    assert result.device == "cuda:0" and result.device_name == torch.cuda.get_device_name(0)


# --- MFU: a run measured against its device's calibrated peak -------------------------------------------------


def test_a_run_on_a_calibrated_device_reports_its_mfu():
    from devicebench import RunConfig, runner
    from devicebench.report.text import tflops_text
    from devicebench.results.compare import compare

    fingerprint = machine_fingerprint()
    save_calibration(fingerprint["machine_id"], fingerprint["machine_name"], [ceilings("cpu", fp32=0.5)])
    config = RunConfig(
        workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=3, max_eval_steps=1
    )
    result = runner.run(planning.plan(config))
    record = result.runs[0]
    assert record.peak_tflops == 0.5  # the fp32 peak: seed mode computes in fp32
    (row,) = compare([result])["mnist-cnn2"]
    achieved = record.flops_per_sample * record.epochs[1].samples_per_s / 1e12
    assert row.mfu.median == pytest.approx(achieved / 0.5)
    assert tflops_text(row) == f"{achieved:.3g} ({achieved / 0.5:.0%} MFU)"


def test_an_uncalibrated_device_has_no_mfu():
    from devicebench import RunConfig, runner
    from devicebench.results.compare import compare

    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1
            )
        )
    )
    assert result.runs[0].peak_tflops is None
    assert compare([result])["mnist-cnn2"][0].mfu is None


@pytest.mark.parametrize("busy", [True, False])
def test_ceilings_measured_on_a_busy_machine_are_stored_with_a_warning(busy, calibration_folder, monkeypatch):
    """The load before measuring, by `check`'s rule (more than half the logical cores kept busy by others): warned
    before measuring and beside where they were stored, with what to do; never silent, never refused."""
    cores = psutil.cpu_count(logical=True)
    load = 2.0 * cores if busy else 0.0
    monkeypatch.setattr(psutil, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(
        calibrate_command,
        "default_plan",
        lambda device: dataclasses.replace(calibrate.QUICK_PLAN, stretch_s=0.05, stretches=1),
    )
    result = cli.invoke(app, ["calibrate", "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert (calibration_folder / f"{machine_fingerprint()['machine_id']}.json").is_file()  # stored either way
    warning = (
        f"This machine is busy: 1-minute load average {load:.2f} on {cores} logical cores: other processes "
        f"keep about {cores} of them busy. Stop other work (top shows it) before benchmarking the CPU"
    )
    assert (warning in said) == busy
    assert ("stored all the same: run `devicebench calibrate` again once the machine is quiet" in said) == busy
    assert ("measured while the machine was busy (see above)" in said) == busy
    if busy:
        assert said.index(warning) < said.index("Calibration stored in")


def test_a_quick_calibration_on_a_busy_machine_warns_without_speaking_of_storing(calibration_folder, monkeypatch):
    cores = psutil.cpu_count(logical=True)
    monkeypatch.setattr(psutil, "getloadavg", lambda: (2.0 * cores, 1.0, 1.0))
    result = cli.invoke(app, ["calibrate", "--devices", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "This machine is busy: 1-minute load average" in said and "stored all the same" not in said
    assert not calibration_folder.exists()
