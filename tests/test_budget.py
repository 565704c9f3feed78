"""A time budget: each run's epochs are sized to its share, from its first steps timed, and a long run is foretold."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from devicebench import RunConfig, planning, runner
from devicebench.config import QUICK_BUDGET_S, ConfigError
from devicebench.engine.loop import FEWEST_BUDGETED_STEPS, StepTimes, steps_within
from devicebench.engine.timing import Budget
from devicebench.events import RunReporter
from devicebench.report.progress import RichReporter, duration_text

ONE_SECOND_STEPS = StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.5)


def test_the_steps_that_fit_count_evaluation_and_the_first_steps_one_time_cost():
    # 3 epochs x (s steps x 1 s + min(s, 10) batches x 0.5 s) within 30 s: s = 6 (27 s); 7 would take 31.5 s
    assert steps_within(30.0, ONE_SECOND_STEPS, epochs=3, most=1_000, eval_most=10) == 6
    # evaluation capped at 2 batches an epoch: 3 x (s + 1) <= 30, s = 9
    assert steps_within(30.0, ONE_SECOND_STEPS, epochs=3, most=1_000, eval_most=2) == 9
    # a first step 6 s slower than the rest is paid once: 3 x 1.5 s <= 24, s = 5
    slow_start = StepTimes(first_step_s=7.0, step_s=1.0, eval_step_s=0.5)
    assert steps_within(30.0, slow_start, epochs=3, most=1_000, eval_most=10) == 5
    assert steps_within(1e9, ONE_SECOND_STEPS, epochs=3, most=40, eval_most=10) == 40  # never past the epoch


def test_a_run_that_cannot_fit_still_trains_the_fewest_steps():
    assert steps_within(0.01, ONE_SECOND_STEPS, epochs=3, most=1_000, eval_most=10) == FEWEST_BUDGETED_STEPS
    assert steps_within(0.01, ONE_SECOND_STEPS, epochs=3, most=2, eval_most=10) == 2  # an epoch of two steps


def test_a_budget_counts_down_on_its_clock():
    now = [100.0]
    budget = Budget(30.0, clock=lambda: now[0])
    now[0] = 112.5
    assert budget.spent() == 12.5 and budget.left() == 17.5
    now[0] = 140.0
    assert budget.left() == -10.0


def test_the_quick_suite_has_a_budget_unless_its_steps_are_given():
    quick = RunConfig(devices="cpu")
    assert quick.effective_budget_s == QUICK_BUDGET_S
    plan = planning.plan(quick)
    assert plan.budget_s == QUICK_BUDGET_S
    sized = {job.workload.name: job.training for job in plan.jobs}
    assert sized["mnist-cnn2"].max_steps is None  # the runner sizes it
    assert sized["mnist-cnn2"].max_eval_steps == 10  # the quick suite's evaluation cap stays
    if "gbdt-synthetic" in sized:  # a trainer of its own keeps the quick suite's rounds: it is not sized
        assert sized["gbdt-synthetic"].max_steps is not None
    assert RunConfig(devices="cpu", max_steps=5).effective_budget_s is None
    assert RunConfig(workloads=("mnist-cnn2",), devices="cpu").effective_budget_s is None
    assert RunConfig(workloads=("mnist-cnn2",), devices="cpu", budget_s=300).effective_budget_s == 300
    assert planning.Plan.from_dict(planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cpu",
                                                           budget_s=300)).to_dict()).budget_s == 300


def test_max_steps_caps_evaluation_unless_max_eval_steps_is_given():
    assert RunConfig(devices="cpu", workloads=("mnist-cnn2",), max_steps=7).plan_for("mnist-cnn2").max_eval_steps == 7
    given = RunConfig(devices="cpu", workloads=("mnist-cnn2",), max_steps=7, max_eval_steps=50)
    assert given.plan_for("mnist-cnn2").max_eval_steps == 50


@pytest.mark.parametrize("seconds", [0.0, -5.0, float("nan"), float("inf")])
def test_an_impossible_budget_is_refused(seconds):
    with pytest.raises(ConfigError, match="--budget"):
        RunConfig(devices="cpu", budget_s=seconds)


def test_a_budget_is_refused_with_several_processes():
    with pytest.raises(ConfigError, match="--budget.*--nproc"):
        RunConfig(workloads=("mnist-cnn2",), devices="cpu", budget_s=60, nproc=2)


class Heard(RunReporter):
    def __init__(self) -> None:
        self.estimates: list[tuple[str, float]] = []
        self.spent: list[tuple[float, float]] = []

    def run_estimated(self, record, seconds):
        self.estimates.append((record.workload, seconds))

    def budget_spent(self, spent_s, budget_s):
        self.spent.append((spent_s, budget_s))


def test_each_run_gets_its_share_of_what_is_left_and_trains_the_steps_that_fit(monkeypatch):
    monkeypatch.setattr(runner, "time_first_steps", lambda *arguments: ONE_SECOND_STEPS)
    heard = Heard()
    config = RunConfig(workloads=("cifar100-mlp",), devices="cpu", data="synthetic", epochs=3, repeats=2,
                       budget_s=30)
    result = runner.run(planning.plan(config), heard)
    first, second = result.runs
    # the first run's share is half of 30 s: 3 x 1.5 s x 3 steps; the second gets what the first left (~29 s)
    assert first.settings.max_steps == 3 and [epoch.steps for epoch in first.epochs] == [3, 3, 3]
    assert second.settings.max_steps == 6 and [epoch.steps for epoch in second.epochs] == [6, 6, 6]
    assert second.settings.max_eval_steps == 6  # evaluation never exceeds training's steps
    assert {epoch.eval_samples for epoch in second.epochs} == {6 * 32}
    assert heard.estimates == [("cifar100-mlp", 13.5), ("cifar100-mlp", 27.0)]
    (spent, budget), = heard.spent
    assert budget == 30 and 0 < spent < 30


def test_a_long_run_is_foretold_with_how_to_shorten_it(monkeypatch):
    monkeypatch.setattr(runner, "time_first_steps", lambda *arguments: ONE_SECOND_STEPS)
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=80))
    config = RunConfig(workloads=("cifar100-mlp",), devices="cpu", data="synthetic", epochs=1, max_steps=201,
                       max_eval_steps=1)
    result = runner.run(planning.plan(config), reporter)
    assert result.runs[0].status == "ok" and result.runs[0].settings.max_steps == 201  # foretold, not cut
    text = " ".join(screen.getvalue().split())
    assert "cifar100-mlp on cpu should take about 3 min 22 s" in text  # 201 x 1 s + 1 x 0.5 s
    assert "--budget" in text and "--max-steps" in text


def test_a_short_run_is_not_timed_first(monkeypatch):
    def refuse(*arguments):
        raise AssertionError("a run of a few steps needs no estimate")

    monkeypatch.setattr(runner, "time_first_steps", refuse)
    result = runner.run(planning.plan(RunConfig(workloads=("cifar100-mlp",), devices="cpu", data="synthetic",
                                                epochs=2, max_steps=3, max_eval_steps=1)))
    assert result.runs[0].status == "ok"


def test_the_first_steps_are_timed_on_a_model_of_their_own():
    """The two steps timed first change nothing the run measures: the same losses as a run without them."""
    tiny = {"workloads": ("cifar100-mlp",), "devices": "cpu", "data": "synthetic", "epochs": 3}
    budgeted = runner.run(planning.plan(RunConfig(**tiny, budget_s=1e-3)))  # sized to the fewest steps
    plain = runner.run(planning.plan(RunConfig(**tiny, max_steps=FEWEST_BUDGETED_STEPS)))
    assert budgeted.runs[0].settings.max_steps == FEWEST_BUDGETED_STEPS
    assert [e.train_loss for e in budgeted.runs[0].epochs] == [e.train_loss for e in plain.runs[0].epochs]


def test_the_budget_line_says_within_or_over():
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=80))
    reporter.budget_spent(95.0, 120.0)
    reporter.budget_spent(150.0, 120.0)
    text = " ".join(screen.getvalue().split())
    assert "Trained in 1 min 35 s, within the 2 min 00 s budget." in text
    assert "Trained in 2 min 30 s, over the 2 min 00 s budget" in text


@pytest.mark.parametrize(("seconds", "text"), [(45.4, "45 s"), (125, "2 min 05 s"), (11_220, "3 h 07 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration_text(seconds) == text


def test_a_heavy_run_still_to_come_keeps_its_fewest_steps_from_the_light_ones_before_it():
    plan = planning.plan(RunConfig(workloads=("cifar100-mlp", "catdog-deep"), devices="cpu", data="synthetic",
                                   epochs=3, budget_s=60))
    light, heavy = plan.jobs
    shares = runner.BudgetShares(Budget(60.0, clock=lambda: 0.0), list(plan.jobs))
    light_flops, heavy_flops = runner._flops_per_step(light), runner._flops_per_step(heavy)
    assert heavy_flops > 100 * light_flops
    steps = StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0)
    # the light run is sure of 3 epochs x 3 steps (9 s); the heavy one's 9 steps are estimated at the light one's
    # FLOP/s, and only what is left beyond both is shared: far less than half of the 51 s beyond the light one's
    heavy_fewest = 3 * 3 * heavy_flops / light_flops
    assert shares.seconds_for(light, steps, 10, light_flops) == 9.0 + max(0.0, 60.0 - 9.0 - heavy_fewest) / 2
    assert shares.seconds_for(light, steps, 10, light_flops) < 9.0 + 51.0 / 2
    shares.run_done()
    assert shares.seconds_for(heavy, steps, 10, heavy_flops) == 60.0  # the last run may take all that is left


@pytest.mark.parametrize("written", ["5x", "m", "", "0s"])
def test_a_budget_the_cli_cannot_read_is_refused_before_anything_runs(written, tmp_path):
    from typer.testing import CliRunner

    from devicebench.cli import EXIT_USAGE, app

    outcome = CliRunner().invoke(app, ["run", "cifar100-mlp", "--devices", "cpu", "--data", "synthetic",
                                       "--epochs", "1", "--max-steps", "1", "--budget", written,
                                       "--db", str(tmp_path / "runs.sqlite")])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "--budget" in outcome.output and "90s, 5m" in outcome.output
    assert not (tmp_path / "runs.sqlite").exists()  # refused before the database was made
