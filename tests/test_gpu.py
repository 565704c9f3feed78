"""The GPU path, end to end: skipped without a CUDA device, run as-is on any machine that has one.

python -m pytest -m gpu      # or benchmarks/gpu_validation.py, which runs these and the rest of a GPU's checks
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from devicebench import RunConfig, planning, runner
from devicebench.launch import Launch, run_distributed

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none"),
]


def test_cpu_and_gpu_train_the_same_model_and_the_speedup_is_computed():
    config = RunConfig(
        workloads=("mnist-cnn2",), devices="cpu,cuda", data="synthetic", epochs=3, max_steps=20, max_eval_steps=2
    )
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


@pytest.mark.parametrize("workload", ["mnist-cnn2", "imdb-bilstm"])  # a conv net; the LSTMs of the text workloads
def test_tuned_mode_on_the_gpu_holds_the_data_there_and_records_every_choice(workload):
    switches = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    config = RunConfig(
        workloads=(workload,),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_steps=20,
        max_eval_steps=2,
        mode="tuned",
        compile="off",
    )
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    settings = run.settings
    assert settings.mode == "tuned" and settings.device_resident and settings.tf32_matmul and settings.tf32_cudnn
    assert settings.cudnn_benchmark and settings.fused_optimizer and not settings.compiled  # --compile off
    assert settings.channels_last == (workload == "mnist-cnn2")  # a convolution's layout; an LSTM has none
    assert not settings.allocator_keeps_memory  # a CPU choice
    assert settings.precision in ("fp32", "bf16") and run.tuning_note.startswith("trial samples/s: fp32 ")
    untried = "channels_last and the fused optimizer step" if workload == "mnist-cnn2" else "the fused optimizer step"
    assert f"; {untried} applied without a trial: on an H200" in run.tuning_note  # the record says what was not tried
    if workload == "imdb-bilstm" and settings.precision == "bf16":  # the LSTMs stay fp32, and the record says so
        assert "bf16 autocast left out the recurrent layers (2 LSTM)" in run.tuning_note
    assert [epoch.samples for epoch in run.epochs] == [20 * settings.batch_size] * 2
    assert switches == (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )  # put back as they were after the run


def test_auto_batch_size_on_the_gpu_grows_past_the_seed_s():
    config = RunConfig(
        workloads=("cifar10-mlp",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_steps=20,
        max_eval_steps=1,
        batch_size_auto=True,
    )
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
    config = RunConfig(
        workloads=("cifar10-cnn",), devices="cuda", data="synthetic", epochs=2, max_steps=20, max_eval_steps=1
    )
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


# --- each GPU path of benchmarks/gpu_validation.py, as a test ---------------------------------------------------


def test_torch_compile_on_the_gpu_compiles_a_conv_net_under_bf16_and_records_what_dynamo_did():
    """tests/test_compile.py compiles cifar10-mlp in fp32; this is the other path tuned mode keeps on an H100: a
    convolutional net, channels_last, under bf16 autocast, compiled by inductor."""
    config = RunConfig(
        workloads=("mnist-cnn2",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_steps=20,
        max_eval_steps=2,
        mode="tuned",
        precision="bf16",
        compile="on",
    )
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    settings = run.settings
    assert settings.compiled and settings.precision == "bf16" and settings.channels_last  # nothing ran eagerly
    assert (run.compile_recompiles, run.compile_graph_breaks) == (1, 0)  # training's graph, evaluation's
    assert all(epoch.samples_per_s > 0 for epoch in run.epochs) and run.epochs[-1].train_loss is not None


def test_a_run_on_the_gpu_records_nvml_s_utilisation_power_and_energy_for_each_long_enough_epoch():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed: pip install 'devicebench[gpu]'")
    from devicebench.engine.monitor import POWER_AVERAGING_S

    # 64 convolutions, about 14 GFLOP a training image in strict fp32: an epoch of 250 batches lasts seconds
    config = RunConfig(
        workloads=("catdog-deep",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_eval_steps=1,
        overrides=("augment=false", "depth=64"),
    )
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    long_enough = [epoch for epoch in run.epochs if epoch.train_time_s >= POWER_AVERAGING_S]
    assert long_enough, [epoch.train_time_s for epoch in run.epochs]  # shorter windows are rightly unknown
    for epoch in long_enough:
        assert 0 < epoch.device_utilization_percent <= 100, (epoch, run.monitor_note)
        assert 20 < epoch.device_power_mean_w < 1500, epoch  # watts: above idle, below any GPU's limit
        # the energy counter over the epoch agrees with the mean power over it (power is a 1 s moving mean)
        assert epoch.device_energy_j == pytest.approx(epoch.device_power_mean_w * epoch.train_time_s, rel=0.5)
    if len(long_enough) == len(run.epochs):
        assert run.energy_j == pytest.approx(sum(epoch.device_energy_j for epoch in run.epochs))


def test_xgboost_boosts_on_the_gpu_when_the_run_asks_for_cuda(monkeypatch):
    xgboost = pytest.importorskip("xgboost", reason="the gbdt extra is not installed: pip install 'devicebench[gbdt]'")
    if not xgboost.build_info().get("USE_CUDA"):
        pytest.skip("this XGBoost was built without CUDA")
    devices: list[str] = []
    real_update = xgboost.Booster.update

    def update_and_look(booster, *arguments, **keywords):
        # where XGBoost itself says it boosts: the record names only the torch device the run asked for
        devices.append(json.loads(booster.save_config())["learner"]["generic_param"]["device"])
        return real_update(booster, *arguments, **keywords)

    monkeypatch.setattr(xgboost.Booster, "update", update_and_look)
    config = RunConfig(
        workloads=("gbdt-synthetic",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        overrides=("rows=200000", "rounds_per_epoch=5"),
    )
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    assert run.device == "cuda:0" and run.device_name == torch.cuda.get_device_name(0)
    assert devices == ["cuda:0"] * 10  # every round of both epochs
    assert [(epoch.steps, epoch.samples) for epoch in run.epochs] == [(5, 5 * 160_000)] * 2
    assert run.epochs[-1].test_accuracy > 0.7  # 0.83 on the CPU with these settings: the same booster learns


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs; this machine has fewer")
def test_two_gpus_over_nccl_learn_exactly_what_one_gpu_learns():
    """As tests/test_distributed.py shows for 2 CPU processes over gloo: cifar10-mlp has no dropout, so only where
    each half batch's gradient is computed differs."""
    config = RunConfig(
        workloads=("cifar10-mlp",), devices="cuda", data="synthetic", epochs=2, max_steps=6, max_eval_steps=1
    )
    one = runner.run(planning.plan(config)).runs[0]
    two = run_distributed(planning.plan(dataclasses.replace(config, nproc=2)), Launch(nproc=2)).runs[0]
    assert one.status == two.status == "ok", two.error
    assert two.settings.world_size == 2 and two.settings.batch_size == 32 and two.peak_device_memory_mib > 0
    assert [epoch.samples for epoch in two.epochs] == [epoch.samples for epoch in one.epochs] == [192, 192]
    # strict fp32 on both (seed mode: TF32 off); half batches may pick other cuBLAS kernels, hence not 1e-5
    assert [epoch.train_loss for epoch in two.epochs] == pytest.approx(
        [epoch.train_loss for epoch in one.epochs], rel=1e-4
    )
    assert all(epoch.fastest_rank_train_time_s <= epoch.train_time_s for epoch in two.epochs)
