"""The GPU path, end to end: skipped without a CUDA device, run as-is on any machine that has one."""

from __future__ import annotations

import pytest
import torch

from devicebench import RunConfig, runner

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none"),
]


def test_cpu_and_gpu_train_the_same_model_and_the_speedup_is_computed():
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu,cuda", data="synthetic", epochs=3, max_steps=20,
                       max_eval_steps=2)
    result = runner.run(config)
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
