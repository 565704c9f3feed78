"""Results with chosen timings, for tests whose answers are known in advance."""

from __future__ import annotations

import uuid

from devicebench.results.schema import EpochRecord, Result, RunRecord, RunSettings

SAMPLES_PER_EPOCH = 1000
FRESH = "a fresh process"  # a run's process_id: one of its own, as each repeat gets


def machine(name: str, machine_id: str) -> dict:
    return {
        "machine_id": machine_id,
        "machine_name": name,
        "hostname": f"{name}-host",
        "cpu": {"model": "Test CPU"},
        "accelerators": [],
        "torch": "2.13.0",
        "devicebench": "0.1.0",
    }


def run(
    device: str,
    epoch_times: list[float],
    *,
    workload: str = "mnist-cnn2",
    repeat: int = 0,
    batch_size: int = 50,
    threads: int = 2,
    data_source: str = "synthetic",
    status: str = "ok",
    end_to_end_s: float | None = None,
    energy_j: float | None = None,
    steps: int = 10,
    process_id: str | None = FRESH,
    run_to_run_cv: float | None = None,
    run_to_run_freedom: float | None = None,
) -> RunRecord:
    """A run whose epoch i took epoch_times[i] seconds for `steps` steps of SAMPLES_PER_EPOCH / 10 samples each
    (SAMPLES_PER_EPOCH samples at the default 10 steps, the run's --max-steps); epoch 1 is warm-up. It ran in a
    fresh process of its own unless `process_id` names one (None: stored before processes were recorded)."""
    samples = SAMPLES_PER_EPOCH * steps // 10
    epochs = [
        EpochRecord(
            epoch=index + 1,
            phase="warmup" if index == 0 else "steady",
            steps=steps,
            samples=samples,
            train_time_s=seconds,
            samples_per_s=samples / seconds,
            step_time_ms=seconds * 1000 / steps,
            train_loss=1.0 / (index + 1),
            train_accuracy=0.5,
            eval_time_s=0.1,
            eval_samples=100,
            test_loss=1.0,
            test_accuracy=0.6 + 0.1 * index,
        )
        for index, seconds in enumerate(epoch_times)
    ]
    settings = RunSettings(
        batch_size=batch_size,
        epochs=len(epoch_times),
        max_steps=steps,
        max_eval_steps=1,
        seed=0,
        threads=threads,
        data_source=data_source,
    )
    return RunRecord(
        workload,
        "S1",
        device,
        f"{device} model",
        repeat,
        settings,
        "2026-01-01T00:00:00Z",
        status=status,
        epochs=epochs,
        end_to_end_s=end_to_end_s or sum(epoch_times) + 1.0,
        energy_j=energy_j,
        process_id=uuid.uuid4().hex[:12] if process_id == FRESH else process_id,
        run_to_run_cv=run_to_run_cv,
        run_to_run_freedom=run_to_run_freedom,
    )


def tuned(record: RunRecord, *choices: str) -> RunRecord:
    """`record` in tuned mode, with the tuned-mode `choices` (channels_last, fused_optimizer, ...) switched on."""
    record.settings.mode = "tuned"
    for choice in choices:
        setattr(record.settings, choice, True)
    return record


def session(machine_fingerprint: dict, runs: list[RunRecord]) -> Result:
    return Result(
        machine=machine_fingerprint,
        config={},
        created_utc="2026-01-01T00:00:00Z",
        devicebench_version="0.1.0",
        runs=runs,
    )
