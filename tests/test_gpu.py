"""The GPU path, end to end: skipped without a CUDA device, run as-is on any machine that has one."""

from __future__ import annotations

import pytest
import torch

from devicebench import RunConfig, planning, runner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none"),
]


def test_cpu_and_gpu_train_the_same_model_and_the_speedup_is_computed():
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu,cuda", data="synthetic", epochs=3, max_steps=20,
                       max_eval_steps=2)
    result = runner.run(planning.plan(config))
    cpu, gpu = result.runs
    assert (cpu.device, gpu.device) == ("cpu", "cuda:0")
    assert cpu.status == gpu.status == "ok"
    assert gpu.peak_device_memory_mib > 0  # the model, its gradients and Adam's state live on the GPU
    assert cpu.peak_device_memory_mib is None
    assert gpu.device_name == torch.cuda.get_device_name(0)
    # the same weights and batches: the first step's loss agrees across devices to float tolerance
    assert gpu.epochs[0].train_loss == pytest.approx(cpu.epochs[0].train_loss, rel=0.05)


def test_synchronize_waits_for_queued_gpu_work():
    from devicebench.devices import synchronize

    device = torch.device("cuda")
    matrix = torch.randn(4096, 4096, device=device)
    for _ in range(20):
        matrix = matrix @ matrix / 4096  # queued, not finished, when the loop returns
    synchronize(device)
    assert torch.cuda.current_stream(device).query()  # nothing left in the queue


def test_tuned_mode_on_the_gpu_holds_the_data_there_and_records_every_choice():
    config = RunConfig(workloads=("mnist-cnn2",), devices="cuda", data="synthetic", epochs=2, max_steps=20,
                       max_eval_steps=2, mode="tuned", compile="off")
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    settings = run.settings
    assert settings.mode == "tuned" and settings.device_resident and settings.tf32_matmul
    assert settings.cudnn_benchmark and settings.channels_last and settings.fused_optimizer
    assert not settings.allocator_keeps_memory  # a CPU choice
    assert settings.precision in ("fp32", "bf16") and run.tuning_note.startswith("trial samples/s: fp32 ")
    assert not torch.backends.cuda.matmul.allow_tf32  # put back after the run


def test_auto_batch_size_on_the_gpu_grows_past_the_seed_s():
    config = RunConfig(workloads=("cifar10-mlp",), devices="cuda", data="synthetic", epochs=2, max_steps=20,
                       max_eval_steps=1, batch_size_auto=True)
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    assert run.settings.batch_size_auto and run.settings.batch_size > 32  # a GPU is starved at 32
    assert run.tuning_note.startswith("batch sizes tried, samples/s: 32 ")


# --- what a review of the GPU paths found (issue 15), confirmed on hardware -------------------------------------


def test_seed_mode_trains_a_conv_net_in_strict_fp32_with_both_tf32_switches_off(monkeypatch):
    seen = []
    real_train = runner.train

    def train_and_look(*arguments, **keywords):
        seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
        return real_train(*arguments, **keywords)

    monkeypatch.setattr(runner, "train", train_and_look)
    config = RunConfig(workloads=("cifar10-cnn",), devices="cuda", data="synthetic", epochs=2, max_steps=20,
                       max_eval_steps=1)
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    assert seen == [(False, False)] and not (run.settings.tf32_matmul or run.settings.tf32_cudnn)


def test_out_of_memory_on_the_gpu_is_recognised():
    from devicebench.devices import out_of_memory

    with pytest.raises(Exception) as raised:
        torch.empty(2**50, dtype=torch.uint8, device="cuda")  # a petabyte
    assert out_of_memory(raised.value) == "device"


def test_nvml_watches_the_gpu_cuda_calls_cuda_0_and_sees_it_busy():
    pytest.importorskip("pynvml")
    from devicebench.engine.monitor import Monitor
    from devicebench.nvml import _cuda_uuid, open_nvml

    device = torch.device("cuda", 0)
    nvml, handle = open_nvml(device)
    try:
        assert nvml.nvmlDeviceGetUUID(handle) in (f"GPU-{_cuda_uuid(device)}", f"MIG-{_cuda_uuid(device)}")
    finally:
        nvml.nvmlShutdown()
    matrix = torch.randn(8192, 8192, device=device)
    with Monitor(device) as monitor:
        monitor.window()
        for _ in range(400):  # about 2 s of matmuls on an H100
            matrix = matrix @ matrix / 8192
        torch.cuda.synchronize(device)
        busy = monitor.window()
    assert busy.device_utilization_percent is not None and busy.device_utilization_percent > 50, busy
    assert busy.device_energy_j is not None and busy.device_energy_j > 0, busy


def test_each_calibrated_figure_is_a_second_of_sustained_work_below_the_datasheet():
    from devicebench.engine.calibrate import GPU_PLAN, measure_ceilings
    from devicebench.results.datasheets import datasheet_for

    ceilings = measure_ceilings(torch.device("cuda", 0))
    figures = [*ceilings.matmul.values(), ceilings.memory_copy, *ceilings.host_to_device.values()]
    assert all(min(figure.stretch_s) >= GPU_PLAN.stretch_s for figure in figures)
    datasheet = datasheet_for(ceilings.device_name)
    if datasheet is not None:  # above the datasheet is a timing defect, not a fast GPU
        for precision, figure in ceilings.matmul.items():
            assert figure.rate <= 1.05 * datasheet.tflops(precision), (precision, figure)
