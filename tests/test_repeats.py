"""`--repeats N`: each repeat after the first trains in a fresh process of its own (with its own warm-up), is
recorded with the process it ran in, stored and shown as if it had run in the session's; a stop signal reaches it
and the session exits as on any stop; repeats whose session chooses once for them all stay in one process.

    python -m pytest tests/test_repeats.py -q -m "slow or not slow"
"""

from __future__ import annotations

import dataclasses
import functools
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from devicebench import budget, planning, runner
from devicebench.cli import EXIT_TERMINATED
from devicebench.config import RunConfig
from devicebench.events import RunReporter
from devicebench.launch import repeat_in_fresh_process
from devicebench.results.schema import EpochRecord, RunRecord

TINY = dict(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1)
STARTUP_LIMIT_S = 180  # a deadline for the test on a loaded 2-core machine, not a measurement
POLL_INTERVAL_S = 0.2


class Heard(RunReporter):
    """The run events a reporter hears, as (event, repeat, epochs at that point)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def run_started(self, record):
        self.events.append(("started", record.repeat, len(record.epochs)))

    def epoch_finished(self, record, epoch):
        self.events.append(("epoch", record.repeat, epoch.epoch))

    def run_finished(self, record):
        self.events.append(("finished", record.repeat, len(record.epochs)))

    def preparing(self, what):
        self.events.append(("preparing", what, 0))


def refused_probe(job):
    raise AssertionError("a sized job's first steps are timed again")


def elsewhere(status: str = "ok"):
    """A stand-in for a fresh process: the record it was handed, trained elsewhere (two epochs, a process of its
    own), with `status`; and the (job, repeat) of each call."""
    calls: list[tuple[planning.Job, int]] = []
    budgets: list[float | None] = []

    def train(job: planning.Job, placeholder: RunRecord, budget_s: float | None) -> RunRecord:
        calls.append((job, placeholder.repeat))
        budgets.append(budget_s)
        first = EpochRecord(1, "warmup", 2, 100, 1.0, 100.0, 500.0, 1.0, 0.5)
        second = dataclasses.replace(first, epoch=2, phase="steady")
        return dataclasses.replace(placeholder, status=status, epochs=[first, second], process_id="elsewhere")

    train.budgets = budgets  # type: ignore[attr-defined]
    return train, calls


def test_every_repeat_but_the_first_goes_to_a_fresh_process_and_is_told_as_if_it_ran_here():
    plan = planning.plan(RunConfig(**TINY, repeats=3))
    train, calls = elsewhere()
    heard = Heard()
    result = runner.run(plan, heard, fresh_repeat=train)
    assert [repeat for _, repeat in calls] == [1, 2] and calls[0][0].workload.name == "mnist-cnn2"
    assert [(run.repeat, run.process_id) for run in result.runs] == [
        (0, runner.PROCESS_ID),
        (1, "elsewhere"),
        (2, "elsewhere"),
    ]
    assert [event for event in heard.events if event[0] != "preparing"][-8:] == [
        *[("started", 1, 2), ("epoch", 1, 1), ("epoch", 1, 2), ("finished", 1, 2)],
        *[("started", 2, 2), ("epoch", 2, 1), ("epoch", 2, 2), ("finished", 2, 2)],
    ]  # stored and shown as a run of this process is
    # while a repeat trains elsewhere (quiet there: its epochs show when it ends), a spinner says what is going on
    waiting = ("preparing", "training mnist-cnn2 in a fresh process, whose epochs show when it ends", 0)
    assert heard.events.count(waiting) == 2  # for repeats 1 and 2, not for the first, which trains here
    assert heard.events.index(waiting) < heard.events.index(("started", 1, 2))


@pytest.mark.slow
def test_a_repeat_in_its_process_gets_its_share_of_what_the_budget_has_left():
    plan = planning.plan(RunConfig(**TINY, repeats=2, budget_s=60.0))
    train, calls = elsewhere()
    runner.run(plan, fresh_repeat=train)
    (share_s,) = train.budgets
    assert 0 < share_s < 60.0  # the first repeat spent some; the one still to come gets the rest, less finishing
    # the job it is handed was sized by this process's budget, and says so: its process keeps those sizes
    ((job, _),) = calls
    assert job.sized and not plan.jobs[0].sized
    assert planning.Plan.from_dict(dataclasses.replace(plan, jobs=(job,)).to_dict()).jobs[0].sized
    no_time = budget.BudgetShares.for_plan(dataclasses.replace(plan, budget_s=0.001), 0.0)  # nothing fits in it
    assert budget.fit_to_share(job, no_time, refused_probe, Heard()) is job
    with pytest.raises(AssertionError, match="timed again"):  # an unsized one would be sized afresh
        budget.fit_to_share(dataclasses.replace(job, sized=False), no_time, refused_probe, Heard())
    train, _ = elsewhere()
    runner.run(planning.plan(RunConfig(**TINY, repeats=2)), fresh_repeat=train)
    assert train.budgets == [None]


@pytest.mark.slow
def test_a_repeat_interrupted_in_its_process_stops_the_session():
    plan = planning.plan(RunConfig(**TINY, repeats=3))
    train, calls = elsewhere("interrupted")
    result = runner.run(plan, fresh_repeat=train)
    assert result.interrupted and [run.status for run in result.runs] == ["ok", "interrupted"]
    assert [repeat for _, repeat in calls] == [1]  # no repeat starts after it


def test_repeats_share_one_process_where_the_session_chooses_once_for_them_all():
    seed, tuned, auto = (
        planning.plan(RunConfig(**TINY, repeats=2, **settings)).jobs[0]
        for settings in ({}, {"mode": "tuned"}, {"batch_size_auto": True})
    )
    assert runner.repeats_apart(seed) and not runner.repeats_apart(tuned) and not runner.repeats_apart(auto)


@pytest.mark.slow
def test_a_repeat_in_a_fresh_process_has_its_own_process_and_warm_up():
    plan = planning.plan(RunConfig(**TINY, repeats=2))
    result = runner.run(plan, fresh_repeat=functools.partial(repeat_in_fresh_process, plan))
    first, second = result.runs
    assert (first.status, second.status, second.repeat) == ("ok", "ok", 1)
    assert first.process_id == runner.PROCESS_ID and second.process_id not in (None, runner.PROCESS_ID)
    assert [epoch.phase for epoch in second.epochs] == ["warmup", "steady"]  # its own warm-up


@pytest.mark.slow
def test_sigterm_while_a_repeat_trains_in_its_process_stops_both_and_keeps_the_first_repeat(tmp_path):
    database = tmp_path / "results.sqlite"
    command = [sys.executable, "-m", "devicebench", "run", "mnist-cnn2", "--devices", "cpu", "--data", "synthetic"]
    command += ["--epochs", "3", "--max-steps", "2", "--max-eval-steps", "1", "--repeats", "2", "--quiet"]
    process = subprocess.Popen([*command, "--db", str(database)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        started = time.monotonic()
        while not (children := _repeat_processes(process.pid)):
            if process.poll() is not None or time.monotonic() - started > STARTUP_LIMIT_S:
                pytest.fail(f"no repeat process started:\n{process.communicate()}")
            time.sleep(POLL_INTERVAL_S)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=STARTUP_LIMIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == EXIT_TERMINATED
    assert not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in children)
    with sqlite3.connect(database) as connection:
        runs = connection.execute("SELECT repeat, status FROM runs ORDER BY repeat").fetchall()
    assert runs == [(0, "ok"), (1, "interrupted")]


def _repeat_processes(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "--repeat" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_on_a_gpu_a_repeat_in_a_fresh_process_trains_on_the_gpu():
    config = dict(TINY, devices="cuda", max_steps=5)
    plan = planning.plan(RunConfig(**config, repeats=2))
    result = runner.run(plan, fresh_repeat=functools.partial(repeat_in_fresh_process, plan))
    first, second = result.runs
    assert (first.status, second.status, second.device) == ("ok", "ok", "cuda:0")
    assert second.process_id != first.process_id and second.peak_device_memory_mib > 0


def test_a_fresh_repeat_trains_with_the_threads_of_the_process_that_started_it(monkeypatch, tmp_path):
    """No --threads: the first repeat trains with this process's thread count, which a caller may have changed from
    torch's default; the fresh process is told it, or its repeat would form a row of its own (seen in the full
    suite, where an earlier test had left one thread)."""
    plan = planning.plan(RunConfig(**TINY, repeats=2))
    (job,) = plan.jobs
    told = []

    class Interpreter:
        def __init__(self, command, **kwargs):
            told.append(json.loads(Path(command[-2]).read_text())["plan"]["threads"])
            self.returncode = 1

        def wait(self):
            return 1

    monkeypatch.setattr(subprocess, "Popen", Interpreter)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        record = repeat_in_fresh_process(plan, job, runner.new_record(job, runner.load_data(job), 1), None)
    finally:
        torch.set_num_threads(threads)
    assert told == [1] and record.status == "failed"
