"""A run is planned before it is executed: `planning.plan` resolves a request into complete jobs without loading
data, `devicebench run --dry-run` and `devicebench.plan` show them, and a plan survives the trip to another process."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

import devicebench as db
from devicebench import RunConfig, planning
from devicebench.cli import EXIT_USAGE, app
from devicebench.config import ConfigError
from devicebench.devices import DeviceError
from devicebench.planning import Plan

CPU = torch.device("cpu")


def no_loading(monkeypatch) -> None:
    """Planning must not touch data or train: any attempt fails the test."""
    monkeypatch.setattr("devicebench.runner.load_dataset", lambda *a, **k: pytest.fail("data was loaded"))
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))


@pytest.mark.slow
def test_a_plan_holds_every_job_resolved_before_anything_is_loaded(monkeypatch):
    no_loading(monkeypatch)
    config = RunConfig(
        workloads=("mnist-*",),
        devices="cpu",
        repeats=2,
        epochs=4,
        max_steps=7,
        overrides=("learning_rate=0.01",),
        data="synthetic",
        data_dir=None,
        seed=3,
    )
    plan = planning.plan(config)
    assert [(job.workload.name, job.device, job.repeats) for job in plan.jobs] == [
        ("mnist-cnn2", CPU, 2),
        ("mnist-cnn4", CPU, 2),
    ]
    job = plan.jobs[0]
    assert job.hyperparameters == {"batch_size": 50, "epochs": 17, "learning_rate": 0.01, "adam_epsilon": 1e-08}
    assert job.overrides == {"learning_rate": 0.01} and job.batch_size == 50
    # --max-steps caps evaluation too
    assert (job.training.epochs, job.training.max_steps, job.training.max_eval_steps) == (4, 7, 7)
    assert job.data == planning.DataRequest(
        dataset="mnist", source="synthetic", data_dir=None, seed=3, shape=(("image_shape", (1, 28, 28)),)
    )
    assert (job.mode, job.seed, job.workers) == ("seed", 3, None)
    assert plan.request == config.to_dict() and plan.threads is None


def test_a_sweep_is_one_plan_whose_points_keep_their_order():
    points = [RunConfig(workloads=("cifar10-mlp",), devices="cpu", batch_size=size, suite="quick") for size in (16, 64)]
    plan = planning.plan(points)
    assert [job.batch_size for job in plan.jobs] == [16, 64]
    assert plan.request == {"sweep": [point.to_dict() for point in points]}
    assert [entry.name for entry in plan.workloads] == ["cifar10-mlp"]  # each workload once


def test_a_per_device_batch_becomes_the_global_batch_in_the_plan():
    (job,) = planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cpu", nproc=3, per_device_batch=True)).jobs
    assert job.batch_size == 150 and job.hyperparameters["batch_size"] == 150 and job.per_device_batch


def test_what_cannot_run_fails_before_anything_is_loaded(monkeypatch):
    no_loading(monkeypatch)
    with pytest.raises(DeviceError, match="cuda:7"):
        planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cuda:7"))
    with pytest.raises(ConfigError, match=re.escape("no workload matches 'nothing-*'")):
        planning.plan(RunConfig(workloads=("nothing-*",), devices="cpu"))


def test_a_plan_survives_json_and_each_rank_gets_its_own_device():
    plan = planning.plan(RunConfig(workloads=("imdb-bilstm", "mnist-cnn2"), devices="cpu", threads=1))
    again = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.jobs == plan.jobs  # the same registered workloads, and tuples stay tuples: equal requests share a load
    assert (again.threads, again.skipped, again.request) == (1, plan.skipped, json.loads(json.dumps(plan.request)))
    rank = plan.for_rank(torch.device("cuda", 1), threads=4)
    assert {str(job.device) for job in rank.jobs} == {"cuda:1"}
    assert rank.threads == 4 and rank.request["devices"] == "cuda:1" and rank.request["threads"] == 4
    assert {str(job.device) for job in plan.jobs} == {"cpu"}  # the plan itself is left as it was


def test_the_python_plan_takes_run_s_arguments(monkeypatch):
    no_loading(monkeypatch)
    plan = db.plan("cifar10-mlp", devices="cpu", epochs=2, batch_size=64, repeats=3)
    (job,) = plan.jobs
    assert (job.batch_size, job.training.epochs, job.repeats) == (64, 2, 3)
    assert db.plan("cifar10-mlp", devices="cpu", batch_size="auto").jobs[0].batch_size_auto
    with pytest.raises(TypeError, match="unexpected keyword argument 'epoch'"):
        db.plan("cifar10-mlp", epoch=2)  # a misspelt argument, as run() would refuse it


def test_dry_run_prints_the_plan_and_trains_nothing(monkeypatch, tmp_path):
    no_loading(monkeypatch)
    out = tmp_path / "plan.json"
    outcome = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "cifar10-mlp",
            "--devices",
            "cpu",
            "--repeats",
            "2",
            "--epochs",
            "3",
            "--max-steps",
            "40",
            "--dry-run",
            "--json",
            str(out),
            "--db",
            str(tmp_path / "never.sqlite"),
        ],
        terminal_width=200,
    )
    assert outcome.exit_code == 0, outcome.output
    assert "The plan: 4 runs; nothing is loaded or trained" in outcome.stdout
    rows = [line for line in outcome.stdout.splitlines() if "│ mnist-cnn2" in line or "│ cifar10-mlp" in line]
    assert [[cell.strip() for cell in line.split("│")[1:8]] for line in rows] == [
        ["mnist-cnn2", "cpu", "2", "50", "3", "40", "40"],
        ["cifar10-mlp", "cpu", "2", "32", "3", "40", "40"],
    ]
    written = json.loads(out.read_text())
    assert [(job["workload"], job["device"], job["repeats"]) for job in written["jobs"]] == [
        ("mnist-cnn2", "cpu", 2),
        ("cifar10-mlp", "cpu", 2),
    ]
    assert not (tmp_path / "never.sqlite").exists()  # nothing stored: nothing ran


def test_dry_run_refuses_what_a_run_would(monkeypatch):
    no_loading(monkeypatch)
    outcome = CliRunner().invoke(app, ["run", "mnist-cnn2", "--devices", "cpu", "--set", "depth=3", "--dry-run"])
    assert outcome.exit_code == EXIT_USAGE
    assert "mnist-cnn2 has no parameter 'depth'" in outcome.output


def test_dry_run_refuses_a_json_path_it_cannot_write_before_showing_anything(monkeypatch, tmp_path):
    no_loading(monkeypatch)
    outcome = CliRunner().invoke(
        app, ["run", "mnist-cnn2", "--devices", "cpu", "--dry-run", "--json", str(tmp_path / "missing" / "plan.json")]
    )
    assert outcome.exit_code == EXIT_USAGE
    assert "folder" in outcome.output and "does not exist; create it first" in outcome.output
    assert "The plan" not in outcome.stdout
