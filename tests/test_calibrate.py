"""Calibration: ceilings computed exactly from known times, stored per machine and merged, read back safely, set
against the right datasheet, and the `calibrate` command end to end on the CPU."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
import torch
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.engine import calibrate
from devicebench.engine.calibrate import (
    CALIBRATION_DIR_VARIABLE,
    CalibrationError,
    CalibrationSizes,
    DeviceCeilings,
    calibration_path,
    load_calibration,
    measure_ceilings,
    peak_tflops,
    save_calibration,
)
from devicebench.engine.timing import Stopwatch
from devicebench.environment import machine_fingerprint
from devicebench.results.datasheets import datasheet_for

cli = CliRunner()
MACHINE = "0123456789ab"
TINY = CalibrationSizes(matmul_size=64, memory_copy_bytes=2**20, host_to_device_bytes=2**20, warmup_rounds=1,
                        operations_per_repeat=4, repeats=3)


@pytest.fixture
def calibration_folder(no_stored_calibration):
    """The empty calibration folder every test gets (conftest.py): none touches the user's real one."""
    return no_stored_calibration


class SteppingClock:
    """A fake clock that moves on by the next of `steps` (over and over) each time it is read."""

    def __init__(self, steps: list[float]) -> None:
        self.steps = itertools.cycle(steps)
        self.time = 0.0
        self.readings = 0

    def __call__(self) -> float:
        self.time += next(self.steps)
        self.readings += 1
        return self.time


def ceilings(device: str = "cpu", fp32: float = 0.5, **fields) -> DeviceCeilings:
    values = {"device": device, "device_name": f"{device} model", "matmul_tflops": {"fp32": fp32, "bf16": 2.0},
              "memory_gb_s": 20.0, "host_to_device_gb_s": {}, "sizes": TINY} | fields
    return DeviceCeilings(**values)


def test_ceilings_are_the_best_repeat_computed_exactly_from_known_times():
    # Each measurement reads the clock 6 times (3 repeats): the timed repeats take 0.5 s, 0.25 s and 1 s, and
    # 9 s pass between them; the best, 0.25 s, counts
    clock = SteppingClock([9.0, 0.5, 9.0, 0.25, 9.0, 1.0])
    synchronized = []

    def host_clock() -> float:
        raise AssertionError("a calibration read the clock without synchronizing the device")

    watch = Stopwatch(torch.device("cpu"), clock=clock, synchronize=synchronized.append, host_clock=host_clock)
    steps = []
    result = measure_ceilings(torch.device("cpu"), sizes=TINY, watch=watch, progress=steps.append)
    # 4 products of 2 * 64^3 FLOPs in 0.25 s = 8,388,608 FLOP/s
    assert result.matmul_tflops == {"fp32": 8.388608e-06, "bf16": 8.388608e-06}  # no tf32 off CUDA
    # 4 copies of 1 MiB, each byte read and written, in 0.25 s
    assert result.memory_gb_s == 0.033554432
    assert result.host_to_device_gb_s == {}  # nothing crosses to the CPU
    assert result.device == "cpu" and result.sizes == TINY
    assert clock.readings == 18 and len(synchronized) == 18  # 3 measurements; warm-up untimed; every read synced
    assert steps == ["fp32 matmul, 64x64", "bf16 matmul, 64x64", "memory copy, 1 MiB"]


def test_ceilings_survive_a_round_trip_through_json():
    original = ceilings(host_to_device_gb_s={"pinned": 24.5, "pageable": 9.0})
    assert DeviceCeilings.from_dict(json.loads(json.dumps(original.to_dict()))) == original


def test_calibration_path_comes_from_the_folder_the_environment_or_the_user_data_folder(tmp_path, monkeypatch,
                                                                                      calibration_folder):
    assert calibration_path(MACHINE, tmp_path) == tmp_path / f"{MACHINE}.json"
    assert calibration_path(MACHINE) == calibration_folder / f"{MACHINE}.json"
    monkeypatch.delenv(CALIBRATION_DIR_VARIABLE)
    default = calibration_path(MACHINE)
    assert default.parent.name == "calibration" and default.parent.parent.name == "devicebench"


def test_a_later_save_keeps_the_devices_stored_before():
    save_calibration(MACHINE, "laptop", [ceilings("cpu", fp32=0.5)])
    gpu = ceilings("cuda:1", fp32=60.0, matmul_tflops={"fp32": 60.0, "tf32": 400.0, "bf16": 800.0},
                   host_to_device_gb_s={"pinned": 24.5, "pageable": 9.0})
    path = save_calibration(MACHINE, "laptop", [gpu])
    stored = load_calibration(MACHINE)
    assert json.loads(path.read_text()) == stored
    assert stored["schema"] == 1 and stored["machine_id"] == MACHINE and stored["machine_name"] == "laptop"
    assert stored["torch_version"] == torch.__version__
    assert sorted(stored["devices"]) == ["cpu", "cuda:1"]
    assert DeviceCeilings.from_dict(stored["devices"]["cuda:1"]) == gpu
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.5
    assert peak_tflops(MACHINE, "cuda:1", "tf32") == 400.0
    assert peak_tflops(MACHINE, "cpu", "tf32") is None  # measured only on CUDA
    assert peak_tflops(MACHINE, "cuda:0", "fp32") is None  # never calibrated
    save_calibration(MACHINE, "laptop", [ceilings("cpu", fp32=0.75)])  # calibrating again replaces that device
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.75 and peak_tflops(MACHINE, "cuda:1", "bf16") == 800.0
    assert [file.name for file in path.parent.iterdir()] == [f"{MACHINE}.json"]  # no temporary file left behind


def test_a_machine_never_calibrated_has_no_calibration():
    assert load_calibration(MACHINE) is None
    assert peak_tflops(MACHINE, "cpu", "fp32") is None
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        peak_tflops(MACHINE, "cpu", "fp16")


@pytest.mark.parametrize("content, reason", [
    ("{not json", "Expecting property name"),
    ('{"schema": 1, "machine_id": "fedcba987654", "devices": {}}', "belongs to machine 'fedcba987654'"),
    ('{"schema": 7, "machine_id": "0123456789ab", "devices": {}}', "not a devicebench calibration"),
    ('{"schema": 1, "machine_id": "0123456789ab", "devices": {"cpu": {"device": "cpu"}}}', "entry for 'cpu'"),
])
def test_a_corrupt_or_foreign_file_names_itself_and_the_fix(content, reason, caplog):
    path = calibration_path(MACHINE)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(CalibrationError) as raised:
        load_calibration(MACHINE)
    message = str(raised.value)
    assert str(path) in message and reason in message
    assert "Run `devicebench calibrate` again: it will overwrite the file" in message
    with caplog.at_level(logging.WARNING, logger=calibrate.__name__):
        assert peak_tflops(MACHINE, "cpu", "fp32") is None  # a run goes on without its calibration
    assert str(path) in caplog.text
    save_calibration(MACHINE, "laptop", [ceilings("cpu", fp32=0.5)])  # calibrating again replaces the file
    assert peak_tflops(MACHINE, "cpu", "fp32") == 0.5


@pytest.mark.parametrize("device_name, product", [
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
])
def test_datasheets_match_torch_names_word_for_word(device_name, product):
    datasheet = datasheet_for(device_name)
    assert (datasheet.product if datasheet else None) == product


def test_datasheet_figures_are_dense_peaks():
    h100 = datasheet_for("NVIDIA H100 80GB HBM3")
    assert (h100.tflops("fp32"), h100.tflops("tf32"), h100.tflops("bf16"), h100.memory_gb_s) == (
        67.0, 494.7, 989.4, 3350.0)  # 989 and 1,979 on the datasheet are with sparsity
    assert datasheet_for("NVIDIA H200").memory_gb_s == 4800.0
    assert datasheet_for("NVIDIA A100-SXM4-80GB").memory_gb_s == 2039.0
    t4 = datasheet_for("Tesla T4")
    assert (t4.tflops("tf32"), t4.tflops("bf16")) == (None, None)  # Turing has neither


def test_calibrate_on_the_cpu_stores_positive_ceilings_and_shows_them(calibration_folder):
    result = cli.invoke(app, ["calibrate", "--devices", "cpu", "--quick"])
    assert result.exit_code == 0, result.output
    machine = machine_fingerprint()["machine_id"]
    path = calibration_folder / f"{machine}.json"
    assert f"Calibration stored in {path}" in result.stderr
    assert "cpu (" in result.stdout and "TFLOP/s" in result.stdout and "GB/s" in result.stdout
    assert "Matmul fp32 (512x512)" in result.stdout and "No datasheet known" in result.stdout
    stored = json.loads(path.read_text())
    cpu = DeviceCeilings.from_dict(stored["devices"]["cpu"])
    assert cpu.matmul_tflops["fp32"] > 0 and cpu.matmul_tflops["bf16"] > 0 and cpu.memory_gb_s > 0
    assert cpu.host_to_device_gb_s == {} and cpu.sizes == calibrate.QUICK_SIZES
    assert peak_tflops(machine, "cpu", "fp32") == cpu.matmul_tflops["fp32"]

    again = cli.invoke(app, ["calibrate", "--devices", "cpu", "--quick", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == json.loads(path.read_text())  # --json prints exactly what was stored


@pytest.mark.parametrize("spec, message", [
    ("tpu", "unknown device 'tpu'"),
    ("cpu,", "has an empty name"),
])
def test_calibrate_refuses_a_device_it_cannot_use(spec, message, calibration_folder):
    result = cli.invoke(app, ["calibrate", "--devices", spec, "--quick"])
    assert result.exit_code == EXIT_USAGE
    assert message in result.stderr and "Devices present: cpu" in result.stderr
    assert not calibration_folder.exists()  # nothing measured, nothing stored


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_a_gpu_is_measured_in_every_precision_and_the_tf32_setting_is_put_back():
    torch.backends.cuda.matmul.allow_tf32 = True  # as a user may have set it; fp32 must still be measured as fp32
    try:
        result = measure_ceilings(torch.device("cuda", 0), sizes=TINY)
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    tensor_core_precisions = {"tf32", "bf16"} if torch.cuda.get_device_capability(0) >= (8, 0) else set()
    assert set(result.matmul_tflops) == {"fp32", *tensor_core_precisions}
    assert set(result.host_to_device_gb_s) == {"pinned", "pageable"}
    assert all(rate > 0 for rate in [*result.matmul_tflops.values(), *result.host_to_device_gb_s.values()])
    assert result.device == "cuda:0" and result.device_name == torch.cuda.get_device_name(0)


# --- MFU: a run measured against its device's calibrated peak -------------------------------------------------


def test_a_run_on_a_calibrated_device_reports_its_mfu():
    from devicebench import RunConfig, runner
    from devicebench.report.tables import tflops_text
    from devicebench.results.compare import compare

    fingerprint = machine_fingerprint()
    save_calibration(fingerprint["machine_id"], fingerprint["machine_name"], [ceilings("cpu", fp32=0.5)])
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=3,
                       max_eval_steps=1)
    result = runner.run(config)
    record = result.runs[0]
    assert record.peak_tflops == 0.5  # the fp32 peak: seed mode computes in fp32
    (row,) = compare([result])["mnist-cnn2"]
    achieved = record.flops_per_sample * record.epochs[1].samples_per_s / 1e12
    assert row.mfu.median == pytest.approx(achieved / 0.5)
    assert tflops_text(row) == f"{achieved:.3g} ({achieved / 0.5:.0%} MFU)"


def test_an_uncalibrated_device_has_no_mfu():
    from devicebench import RunConfig, runner
    from devicebench.results.compare import compare

    result = runner.run(RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=2,
                                  max_eval_steps=1))
    assert result.runs[0].peak_tflops is None
    assert compare([result])["mnist-cnn2"][0].mfu is None
