"""Results survive a round trip through JSON, in strict JSON, with units in the names."""

from __future__ import annotations

import json
import math

import pytest

from devicebench.results.schema import (
    SCHEMA_VERSION,
    EpochRecord,
    Result,
    RunRecord,
    RunSettings,
)


def epoch(number: int, seconds: float, loss: float = 1.0) -> EpochRecord:
    return EpochRecord(
        epoch=number,
        phase="warmup" if number == 1 else "steady",
        steps=10,
        samples=320,
        train_time_s=seconds,
        samples_per_s=320 / seconds,
        step_time_ms=seconds * 100,
        train_loss=loss,
        train_accuracy=0.5,
        eval_time_s=0.1,
        eval_samples=64,
        test_loss=1.0,
        test_accuracy=0.25 * number,
    )


def sample_result() -> Result:
    settings = RunSettings(
        batch_size=32,
        epochs=3,
        max_steps=10,
        max_eval_steps=2,
        seed=0,
        threads=2,
        data_source="synthetic",
        hyperparameters={"learning_rate": 0.01},
    )
    run = RunRecord(
        "cifar10-mlp",
        "S2",
        "cpu",
        "Some CPU",
        0,
        settings,
        "2026-01-01T00:00:00Z",
        status="ok",
        epochs=[epoch(1, 4.0), epoch(2, 1.0), epoch(3, 2.0)],
        end_to_end_s=7.5,
    )
    return Result(
        machine={"machine_id": "abc"},
        config={"devices": "cpu"},
        created_utc="2026-01-01T00:00:00Z",
        devicebench_version="0.1.0",
        runs=[run],
    )


def test_summary_takes_medians_over_steady_epochs_only():
    summary = sample_result().runs[0].summary()
    assert summary.warmup_epoch_time_s == 4.0
    assert (summary.steady_epochs, summary.steady_epoch_time_s) == (2, 1.5)
    assert summary.steady_samples_per_s == pytest.approx((320 / 1.0 + 320 / 2.0) / 2)
    assert (summary.final_test_accuracy, summary.best_test_accuracy) == (0.75, 0.75)


def test_json_round_trip_keeps_everything(tmp_path):
    path = tmp_path / "result.json"
    original = sample_result()
    original.write_json(path)
    loaded = Result.read_json(path)
    assert loaded.to_dict() == original.to_dict()
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["runs"][0]["summary"]["steady_epoch_time_s"] == 1.5  # per-repeat summaries are stored
    assert not list(tmp_path.glob("*.partial"))


def test_every_measured_field_names_its_unit():
    run = sample_result().to_dict()["runs"][0]
    timed = [key for key in [*run, *run["epochs"][0], *run["summary"]] if "time" in key or key.endswith("_s")]
    assert timed and all(key.endswith(("_s", "_ms")) for key in timed), timed


def test_a_nan_loss_is_written_as_strict_json_null(tmp_path):
    result = sample_result()
    result.runs[0].epochs[2].train_loss = math.nan
    result.runs[0].status = "diverged"
    path = tmp_path / "result.json"
    result.write_json(path)
    assert "NaN" not in path.read_text()
    assert json.loads(path.read_text())["runs"][0]["epochs"][2]["train_loss"] is None


def test_results_of_another_schema_version_are_refused(tmp_path):
    data = sample_result().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema version"):
        Result.from_dict(data)


def test_a_schema_6_result_without_thread_cpu_time_reads_as_not_recorded():
    data = sample_result().to_dict()
    data["schema_version"] = 6
    for epoch in data["runs"][0]["epochs"]:
        del epoch["train_thread_cpu_s"]
    assert [epoch.train_thread_cpu_s for epoch in Result.from_dict(data).runs[0].epochs] == [None] * 3
