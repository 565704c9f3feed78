"""The estimate's CPU baseline and input pipeline on CPU time, which another busy process hardly moves (issue 41):
the baseline's rate is samples over its training thread's CPU seconds of its fastest steady epoch, trained in a fresh
process whose idle OpenMP threads sleep (that process's environment only), falling back to the wall clock, and said
so, where no such process could run; the pipeline's seconds a batch are its threads' and workers' CPU seconds.
Every clock here is a fake one: no test asserts a measured time.

    python -m pytest -q tests/test_estimate_cpu_clock.py
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import result_fixtures
import torch
from typer.testing import CliRunner

from devicebench import RunConfig, launch, planning, runner
from devicebench.check import cpu
from devicebench.cli import app
from devicebench.cli import estimate as estimate_command
from devicebench.engine.timing import Stopwatch
from devicebench.estimate import targets
from devicebench.estimate.targets import baseline_of, baseline_seconds, input_seconds_per_batch, pipeline_seconds
from devicebench.results.schema import Result
from devicebench.results.store import Store

TINY = dict(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1)


def run_with_cpu_times(wall_s: list[float], thread_s: list[float], waits_s: list[float] | None = None, workers=0):
    """A CPU run whose epochs took `wall_s` on the wall clock and `thread_s` of its training thread's CPU time."""
    run = result_fixtures.run("cpu", wall_s)
    run.settings.workers = workers
    for epoch, cpu_s, wait_s in zip(run.epochs, thread_s, waits_s or [None] * len(wall_s)):
        epoch.train_thread_cpu_s, epoch.input_wait_s = cpu_s, wait_s
    return run


# --- the baseline's rate -------------------------------------------------------------------------------------------


def test_the_baselines_rate_is_samples_over_the_thread_cpu_seconds_of_its_fastest_steady_epoch_with_the_wall_beside():
    # steady epochs: 0.5, 1.0 and 0.8 s on the wall clock; 0.45, 0.4 and 0.7 s of the thread's CPU time: the epoch
    # fastest on the CPU's own time (the second, which load slowed on the wall clock) is not the wall's fastest
    run = run_with_cpu_times([2.0, 0.5, 1.0, 0.8], [1.5, 0.45, 0.4, 0.7])
    samples = run.epochs[1].samples
    found = baseline_of(run, "synthetic")
    assert found is not None and found.wall_reason is None
    assert found.samples_per_s == pytest.approx((samples / 0.4, samples / 0.7, samples / 0.4))
    assert found.wall_samples_per_s == pytest.approx((samples / 0.5, samples / 1.0, samples / 0.5))


def test_the_waits_for_loader_workers_count_on_top_of_the_thread_cpu_time_and_never_past_the_wall_clock():
    workers = run_with_cpu_times([2.0, 0.5, 0.8], [1.0, 0.3, 0.6], [0.5, 0.1, 0.3], workers=2)
    assert [baseline_seconds(epoch, 2) for epoch in workers.steady_epochs] == pytest.approx([0.4, 0.8])
    samples = workers.epochs[1].samples
    assert baseline_of(workers, "real").samples_per_s == pytest.approx((samples / 0.4, samples / 0.8, samples / 0.4))
    # without workers the loop made its batches itself: the wait is inside its CPU time already
    alone = run_with_cpu_times([2.0, 0.5, 0.8], [1.0, 0.3, 0.6], [0.5, 0.1, 0.3], workers=0)
    assert [baseline_seconds(epoch, 0) for epoch in alone.steady_epochs] == pytest.approx([0.3, 0.6])


def test_a_baseline_without_cpu_time_or_with_a_reason_is_on_the_wall_clock_and_says_why():
    stored_before = result_fixtures.run("cpu", [2.0, 0.5, 1.0])  # no CPU time: an epoch stored before schema 7
    samples = stored_before.epochs[1].samples
    found = baseline_of(stored_before, "synthetic")
    assert found.samples_per_s == pytest.approx((samples / 0.5, samples / 1.0, samples / 0.5))
    assert found.wall_reason == "its epochs' CPU time was not recorded"
    here = baseline_of(run_with_cpu_times([2.0, 0.5, 1.0], [1.0, 0.25, 0.3]), "synthetic", "it trained here")
    assert here.samples_per_s == pytest.approx((samples / 0.5, samples / 1.0, samples / 0.5))
    assert here.wall_reason == "it trained here"


# --- the baseline's process ----------------------------------------------------------------------------------------


class FakeChild:
    """subprocess.Popen for the baseline's process: keeps what it was given and hands in `record`, if any."""

    started: list[tuple[dict[str, str], dict]] = []
    start_up_counts: list[bool] = []
    record = None

    def __init__(self, command, stderr, start_new_session, env) -> None:
        request = json.loads(Path(command[-2]).read_text())
        FakeChild.started.append((env, request["plan"]))
        FakeChild.start_up_counts.append(request["start_up_counts"])
        self.returncode = 1
        if FakeChild.record is None:
            stderr.write("ImportError: libgomp.so.1: cannot open shared object file\n")
        else:
            Result({}, {}, "2026-01-01T00:00:00Z", "0", runs=[FakeChild.record]).write_json(Path(command[-1]))
            self.returncode = 0

    def wait(self) -> int:
        return self.returncode


REAL_POPEN = subprocess.Popen


def launching(stand_in):
    """subprocess.Popen where a devicebench.launch process is started as `stand_in` starts it; any other as ever."""

    def popen(command, **keywords):
        if command[1:3] != ["-m", "devicebench.launch"]:
            return REAL_POPEN(command, **keywords)
        return stand_in(command, **keywords)

    return popen


@pytest.fixture
def child(monkeypatch):
    monkeypatch.setattr("devicebench.launch.subprocess.Popen", launching(FakeChild))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    FakeChild.started, FakeChild.start_up_counts, FakeChild.record = [], [], None
    return FakeChild


def a_job_and_its_record():
    job_plan = planning.plan(RunConfig(**TINY))
    (job,) = job_plan.jobs
    return job_plan, job, runner.new_record(job, runner.load_data(job), 0)


def test_the_baseline_trains_in_a_fresh_process_with_passive_openmp_threads_in_its_environment_only(child):
    job_plan, job, placeholder = a_job_and_its_record()
    child.record = result_fixtures.run("cpu", [2.0, 0.5, 1.0])
    fell_back: dict[str, str] = {}
    record = estimate_command.baseline_apart(job_plan, fell_back)(job, placeholder, 20.0)
    assert record is not None and record.run_id == child.record.run_id and fell_back == {}
    ((environment, plan),) = child.started
    assert environment["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in os.environ  # this process's own threads are left as they were
    assert plan["threads"] == torch.get_num_threads() and plan["budget_s"] == 20.0  # the caller's threads
    assert child.start_up_counts == [False]  # its 20 s of training come on top of its interpreter's start-up


def test_a_fresh_process_counts_its_start_up_against_its_budget_unless_told_not_to(child, monkeypatch, tmp_path):
    """A repeat's share of a budget counts the start of its interpreter; the estimate's baseline, whose seconds of
    training come on top of any start-up, does not (counted, the start-up cut ResNet-50's baseline to batch 8)."""
    job_plan, job, placeholder = a_job_and_its_record()
    launch.repeat_in_fresh_process(job_plan, job, placeholder, 20.0)
    assert child.start_up_counts == [True]
    spent: list[float] = []
    monkeypatch.setattr(launch, "process_age_s", lambda: 7.0)
    monkeypatch.setattr(launch, "_stop_when_orphaned", lambda pid, folder: None)
    # the repeat's process takes the stopping signals over and ignores them at its end: not this test's process,
    # whose later tests (and the processes they start, which inherit an ignored signal) need them as they were
    monkeypatch.setattr(launch.signal, "signal", lambda number, handler: None)
    monkeypatch.setattr(
        launch.runner, "run", lambda plan, spent_before_s: spent.append(spent_before_s) or Result({}, {}, "", "0")
    )
    for counts in (True, False):
        request = tmp_path / f"plan-{counts}.json"
        request.write_text(json.dumps({"plan": job_plan.to_dict(), "quiet": True, "start_up_counts": counts}))
        launch._repeat_main(str(request), str(tmp_path / f"result-{counts}.json"))
    assert spent == [7.0, 0.0]


def test_a_baseline_whose_process_hands_in_nothing_falls_back_to_this_process_and_says_why(child):
    job_plan, job, placeholder = a_job_and_its_record()
    fell_back: dict[str, str] = {}
    assert estimate_command.baseline_apart(job_plan, fell_back)(job, placeholder, None) is None
    assert fell_back == {
        placeholder.run_id: "the repeat's process ended without a result: ImportError: libgomp.so.1: cannot open "
        "shared object file"
    }


def test_a_baseline_whose_process_cannot_start_falls_back_to_this_process(monkeypatch):
    def cannot(*arguments, **keywords):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr("devicebench.launch.subprocess.Popen", launching(cannot))
    job_plan, job, placeholder = a_job_and_its_record()
    fell_back: dict[str, str] = {}
    assert estimate_command.baseline_apart(job_plan, fell_back)(job, placeholder, None) is None
    assert fell_back == {placeholder.run_id: "no process could start: [Errno 11] Resource temporarily unavailable"}


def test_a_run_whose_fresh_process_could_not_run_trains_in_this_one():
    asked = []

    def nowhere(job, placeholder, budget_s):
        asked.append(placeholder.repeat)
        return None

    (run,) = runner.run(planning.plan(RunConfig(**TINY)), fresh_repeat=nowhere, fresh_from=0).runs
    assert asked == [0]  # every run, the first too, was offered to a fresh process
    assert run.status == "ok" and run.process_id == runner.PROCESS_ID and len(run.epochs) == 2


# --- the input pipeline --------------------------------------------------------------------------------------------


class ClockedBatches:
    """Batches whose every batch costs the loop's thread `thread_s` and the workers `workers_s` of CPU time, the
    first epoch's (which starts the workers) `start_s` more of theirs; on no wall clock."""

    def __init__(self, clocks: dict[str, float], thread_s: float, workers_s: float, start_s: float) -> None:
        self.clocks, self.costs, self.start_s = clocks, (thread_s, workers_s), start_s

    def __len__(self) -> int:
        return 100

    def epoch(self, epoch: int, steps: int):
        for _ in range(steps):
            self.clocks["thread"] += self.costs[0]
            self.clocks["workers"] += self.costs[1] + (self.start_s if epoch == 0 else 0.0)
            yield None


def pipeline_time(monkeypatch, workers: int, thread_s: float, workers_s: float) -> tuple[float, int]:
    clocks = {"thread": 0.0, "workers": 0.0}
    batches = ClockedBatches(clocks, thread_s, workers_s, start_s=5.0)
    monkeypatch.setattr(targets, "load_data", lambda job: object())
    monkeypatch.setattr(targets, "batches_for", lambda *arguments, **keywords: (batches, batches))
    monkeypatch.setattr(targets.os, "cpu_count", lambda: 2)
    (job,) = planning.plan(RunConfig(workloads=("cifar10-mlp",), devices="cpu", data="synthetic")).jobs
    run = result_fixtures.run("cpu", [1.0, 0.5], workload="cifar10-mlp")
    run.settings.workers = workers

    def no_wall_clock() -> float:
        raise AssertionError("the pipeline's time is not read on the wall clock")

    watch = Stopwatch(
        torch.device("cpu"),
        clock=no_wall_clock,
        host_clock=no_wall_clock,
        thread_clock=lambda: clocks["thread"],
        children_clock=lambda: clocks["workers"],
    )
    return input_seconds_per_batch(job, run, watch=watch)


def test_the_pipeline_s_time_a_batch_is_its_cpu_time_the_workers_shared_among_the_cores_they_run_on(monkeypatch):
    # no workers: the loop's thread made each batch, 0.02 s of its CPU time
    assert pipeline_time(monkeypatch, 0, thread_s=0.02, workers_s=0.0) == (pytest.approx(0.02), 100)
    # 3 workers on 2 cores: 0.1 s of theirs a batch, two at once; the workers' start (5 s) is not a batch's
    assert pipeline_time(monkeypatch, 3, thread_s=0.01, workers_s=0.1) == (pytest.approx(0.05), 100)
    # workers faster than the thread that receives their batches: the thread's time it is
    assert pipeline_time(monkeypatch, 3, thread_s=0.03, workers_s=0.02) == (pytest.approx(0.03), 100)


def test_pipeline_seconds_take_the_workers_cpu_over_the_cores_they_share_and_the_thread_s_alone_without():
    assert pipeline_seconds(thread_s=0.6, workers_s=4.0, workers=0, cores=2) == 0.6
    assert pipeline_seconds(thread_s=0.6, workers_s=4.0, workers=4, cores=2) == 2.0  # two cores: two at once
    assert pipeline_seconds(thread_s=0.6, workers_s=4.0, workers=8, cores=16) == 0.6  # 0.5 each, under the thread's


# --- the line under load -------------------------------------------------------------------------------------------


def test_the_line_under_load_says_what_the_cpu_time_rate_leaves_out_and_what_it_does_not(monkeypatch):
    monkeypatch.setattr(cpu.psutil, "cpu_count", lambda logical=True: 2)
    monkeypatch.setattr(estimate_command.psutil, "cpu_count", lambda logical=True: 2)
    before = cpu.CpuSeconds(busy_s=100.0, total_s=1_000.0, own_s=10.0)
    after = cpu.CpuSeconds(busy_s=139.0, total_s=1_040.0, own_s=29.0)  # others kept one core of two busy
    note = " ".join(estimate_command.others_load_note(before, after).split())
    assert "Its rate is on its training thread's CPU time, which the waits load causes leave out" in note
    assert "caches and memory bandwidth" in note and "wall-clock rate shown beside it, which is low" in note
    on_the_wall = estimate_command.others_load_note(before, after, on_the_wall_clock=True)
    assert "A baseline on the wall clock is low, and its speedups high" in on_the_wall


def test_an_estimate_whose_baseline_process_cannot_start_trains_it_here_on_the_wall_clock_and_says_so(
    tmp_path, monkeypatch
):
    def cannot(*arguments, **keywords):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr("devicebench.launch.subprocess.Popen", launching(cannot))
    monkeypatch.setattr(estimate_command, "BASELINE_BUDGET_S", 1.0)  # the fewest steps: seconds, not 20
    db, out = tmp_path / "db.sqlite", tmp_path / "estimates.json"
    arguments = ["estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--db", str(db), "--json", str(out)]
    outcome = CliRunner().invoke(app, [*arguments, "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    said = " ".join(outcome.output.split())
    assert (
        "cifar10-mlp's CPU baseline trained in this process, as no process of its own could (no process could "
        "start: [Errno 12] Cannot allocate memory): its rate is on the wall clock" in said
    )
    (estimate,) = json.loads(out.read_text())["estimates"]
    baseline = estimate["baseline"]
    assert baseline["clock"] == "wall" and baseline["samples_per_s"] == baseline["wall_samples_per_s"]
    assert baseline["wall_reason"] == "it trained in this process, its OpenMP threads spinning"
    (run,) = [run for result in Store(db).results() for run in result.runs]
    assert run.process_id == runner.PROCESS_ID and run.status == "ok"  # trained here
    assert baseline["samples_per_s"] == pytest.approx(max(epoch.samples_per_s for epoch in run.steady_epochs))
