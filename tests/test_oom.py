"""Running out of memory is told apart from other failures in every form PyTorch and its GPU libraries raise it.

python -m pytest tests/test_oom.py -q
"""

from __future__ import annotations

import pytest
import torch
from test_runner import broken_workload

from devicebench import RunConfig, planning, runner
from devicebench.devices import is_out_of_memory, out_of_memory


def wrapped(outer: Exception, inner: BaseException) -> Exception:
    """`outer` raised from `inner`, as torch.compile raises BackendCompilerFailed from the error it hit."""
    try:
        try:
            raise inner
        except BaseException as error:
            raise outer from error
    except Exception as raised:
        return raised


class BackendCompilerFailed(RuntimeError):
    """Dynamo's wrapper, whose own message need not repeat the cause's words."""


@pytest.mark.parametrize(
    ("error", "where"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "device"),
        (RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"), "device"),
        (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), "device"),
        (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "device"),
        (RuntimeError("HIP out of memory. Tried to allocate 20.00 MiB"), "device"),
        (RuntimeError("MPS backend out of memory (MPS allocated: 9.01 GB)"), "device"),
        (
            wrapped(BackendCompilerFailed("backend='inductor' raised an error"), torch.OutOfMemoryError("CUDA OOM")),
            "device",
        ),
        (
            wrapped(
                ValueError("while compiling"),
                wrapped(BackendCompilerFailed("inner"), RuntimeError("CUBLAS_STATUS_ALLOC_FAILED")),
            ),
            "device",
        ),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9437184000 bytes"), "host"),
        (
            RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory: you tried to "
                "allocate 9437184000 bytes"
            ),
            "host",
        ),
        (RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`"), None),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3 and 4x5)"), None),
        (wrapped(BackendCompilerFailed("backend='inductor' raised"), TypeError("unsupported operand")), None),
    ],
)
def test_every_form_of_running_out_of_memory_is_recognised_and_nothing_else(error, where):
    assert out_of_memory(error) == where
    assert is_out_of_memory(error) == (where is not None)


def test_a_cause_chain_that_loops_back_on_itself_ends(monkeypatch):
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert out_of_memory(first) is None


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        wrapped(BackendCompilerFailed("backend='inductor' raised"), torch.OutOfMemoryError("CUDA out of memory")),
    ],
)
def test_a_run_that_runs_out_of_device_memory_in_any_form_is_oom_not_failed(monkeypatch, error):
    broken_workload(monkeypatch, "mnist-cnn2", error)  # raised as the model is built
    result = runner.run(
        planning.plan(
            RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=1, max_steps=2, batch_size=64)
        )
    )
    record = result.runs[0]
    assert record.status == "oom"
    assert record.error.startswith("out of memory at batch size 64 on cpu: try a smaller --batch-size")
