"""The estimate's CPU baseline, which every speedup is over, made hard for other work on the machine to move: the
batch estimated kept on a slow machine, the fastest steady epoch as its rate, and a line when others took the CPU.

    python -m pytest -q tests/test_estimate_baseline.py
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections import namedtuple

import pytest
import result_fixtures
from rich.console import Console
from typer.testing import CliRunner

from devicebench import RunConfig, budget, planning, runner
from devicebench.check import cpu
from devicebench.cli import app, session
from devicebench.cli import estimate as estimate_command
from devicebench.engine.loop import StepTimes
from devicebench.engine.timing import Budget
from devicebench.estimate.targets import baseline_of
from devicebench.report.progress import RichReporter


def machine_slower_by(slower: float):
    """first steps timed as on a machine where a training step takes 0.1 s a sample and an evaluation batch 0.05 s
    a sample, times `slower`."""

    def timed(build, train_batches, test_batches, watch):
        batch = train_batches.batch_sizes(1)[0]
        return StepTimes(
            first_step_s=0.1 * batch * slower, step_s=0.1 * batch * slower, eval_step_s=0.05 * batch * slower
        )

    return timed


def baseline_batch(monkeypatch, slower: float, batch_slack: float) -> tuple[int, str]:
    """The batch a budgeted cifar100-mlp (planned at 32) trains at on a machine `slower` than usual, and what the
    screen said."""
    monkeypatch.setattr(budget, "time_first_steps", machine_slower_by(slower))
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))
    monkeypatch.setattr(budget, "ASSUMED_SLOW_FLOP_S", 1.0)  # any step may be slow: the probe decides
    config = RunConfig(
        workloads=("cifar100-mlp",), devices="cpu", data="synthetic", max_eval_steps=2, epochs=3, budget_s=60
    )
    plan = dataclasses.replace(planning.plan(config), batch_slack=batch_slack)
    screen = io.StringIO()
    (run,) = runner.run(plan, RichReporter(Console(file=screen, width=80))).runs
    return run.settings.batch_size, " ".join(screen.getvalue().split())


# At batch b the steps timed first and 3 epochs of the fewest steps take 1.45 b s on the usual machine (tests/
# test_budget.py): 46.4 s at the planned 32, within the 57 s of 60 that are the run's


def test_on_a_machine_twice_as_slow_the_baselines_batch_stays_where_a_runs_is_halved(monkeypatch):
    # twice as slow: 92.8 s, over the 57 s share, within twice it
    assert baseline_batch(monkeypatch, 2.0, batch_slack=1.0)[0] == 16  # `devicebench run`, as before
    batch, said = baseline_batch(monkeypatch, 2.0, batch_slack=estimate_command.BASELINE_BATCH_SLACK)
    assert batch == 32 and "trains at batch" not in said


def test_the_estimates_baseline_has_its_seconds_whatever_the_start_up_took_and_its_batch_slack(tmp_path, monkeypatch):
    budgeted = []

    def shares_of(plan, spent_before_s=0.0):
        budgeted.append((plan.budget_s, spent_before_s, plan.batch_slack))
        raise KeyboardInterrupt  # no need to train: the plan was read

    monkeypatch.setattr(budget.BudgetShares, "for_plan", shares_of)
    # a start-up that load slowed: 33 s before the baseline's first run, counted by the budget
    monkeypatch.setattr(estimate_command, "process_age_s", lambda: 33.0)
    monkeypatch.setattr(session, "process_age_s", lambda: 33.0)
    monkeypatch.setattr(estimate_command, "fit_roofline", lambda stored: None)  # seconds, and read after the baseline
    arguments = ["estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--db", str(tmp_path / "db.sqlite")]
    CliRunner().invoke(app, [*arguments, "--quiet"])
    assert budgeted == [(estimate_command.BASELINE_BUDGET_S + 33.0, 33.0, estimate_command.BASELINE_BATCH_SLACK)]
    assert estimate_command.BASELINE_BATCH_SLACK == 2.0


def test_a_machine_too_slow_even_for_the_fewest_steps_gets_a_smaller_batch_and_is_told(monkeypatch):
    # four times as slow: 185.6 s at 32, over twice the 57 s share; 92.8 s at 16, within it
    batch, said = baseline_batch(monkeypatch, 4.0, batch_slack=estimate_command.BASELINE_BATCH_SLACK)
    assert batch == 16 and "cifar100-mlp on cpu trains at batch 16 (planned: 32)" in said


def test_the_baselines_rate_is_its_fastest_steady_epoch_with_the_range_kept():
    # epoch 1 is the warm-up; the steady epochs took 0.5, 1.0 (slowed by other work) and 0.8 s for the same samples
    run = result_fixtures.run("cpu", [2.0, 0.5, 1.0, 0.8])
    rates = [epoch.samples_per_s for epoch in run.steady_epochs]
    found = baseline_of(run, "synthetic")
    assert found is not None
    assert found.samples_per_s == pytest.approx((max(rates), min(rates), max(rates)))
    assert found.samples_per_s[0] == pytest.approx(2 * min(rates))  # the 0.5 s epoch's, not the median's 0.8 s


def seconds(busy_s: float, total_s: float, own_s: float) -> cpu.CpuSeconds:
    return cpu.CpuSeconds(busy_s=busy_s, total_s=total_s, own_s=own_s)


def test_a_baseline_trained_while_others_kept_a_core_busy_is_said_to_be_under_load(monkeypatch):
    monkeypatch.setattr(cpu.psutil, "cpu_count", lambda logical=True: 2)
    monkeypatch.setattr(estimate_command.psutil, "cpu_count", lambda logical=True: 2)
    before = seconds(busy_s=100.0, total_s=1_000.0, own_s=10.0)
    # 20 s on 2 cores (40 core-seconds): this process took 19 of them, others 20: a core busy all along
    after = seconds(busy_s=139.0, total_s=1_040.0, own_s=29.0)
    assert cpu.others_busy_cores(before, after) == pytest.approx(1.0)
    note = estimate_command.others_load_note(before, after)
    assert note is not None
    assert note.startswith("Measured under load: other processes kept 1.0 of this machine's 2 logical cores busy")
    assert "GPU figures are not affected" in note and "Stop other work" in note
    # this process alone kept both cores busy: nobody else's load, nothing said
    assert estimate_command.others_load_note(before, seconds(busy_s=139.0, total_s=1_040.0, own_s=49.0)) is None
    # others took 0.2 of a core: 10% of the cores, under the 15% that would move a speedup by more than its aim
    assert estimate_command.others_load_note(before, seconds(busy_s=123.0, total_s=1_040.0, own_s=29.0)) is None


Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")
Own = namedtuple("Own", "user system children_user children_system")


def test_the_cpu_seconds_are_the_machines_busy_and_total_time_and_this_processs_own(monkeypatch):
    # a guest's time is counted in user time too (Linux): once in the total; waiting on the disk is idle
    monkeypatch.setattr(cpu.psutil, "cpu_times", lambda: Times(50.0, 1.0, 20.0, 900.0, 10.0, 2.0, 3.0, 4.0, 5.0, 0.0))
    monkeypatch.setattr(cpu.psutil, "Process", lambda: type("P", (), {"cpu_times": lambda self: Own(3, 1, 2, 0.5)})())
    assert cpu.cpu_seconds() == seconds(busy_s=80.0, total_s=990.0, own_s=6.5)
