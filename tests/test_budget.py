"""A time budget: each run's epochs are sized to its share, from its first steps timed, and a long run is foretold."""

from __future__ import annotations

import dataclasses
import functools
import io
import types

import pytest
from rich.console import Console

from devicebench import RunConfig, budget, planning, runner, session_choices, workloads
from devicebench.budget import FEWEST_BUDGETED_STEPS, MEASURABLE_EPOCHS, next_epoch_steps, steps_within
from devicebench.engine import loop
from devicebench.engine.loop import StepTimes
from devicebench.engine.timing import Budget, Stopwatch
from devicebench.events import BudgetAccount, RunReporter, RunSpent
from devicebench.report.progress import RichReporter
from devicebench.report.text import duration_text
from devicebench.workloads import _registry

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
    half_a_minute = Budget(30.0, clock=lambda: now[0])
    now[0] = 112.5
    assert half_a_minute.spent() == 12.5 and half_a_minute.left() == 17.5
    now[0] = 140.0
    assert half_a_minute.left() == -10.0


class Heard(RunReporter):
    def __init__(self) -> None:
        self.estimates: list[tuple[str, float]] = []
        self.spent: list[tuple[float, float]] = []

    def run_estimated(self, record, seconds):
        self.estimates.append((record.workload, seconds))

    def budget_spent(self, account):
        self.spent.append((account.spent_s, account.budget_s))


def test_each_run_gets_its_share_of_what_is_left_and_trains_the_steps_that_fit(monkeypatch):
    monkeypatch.setattr(budget, "time_first_steps", lambda *arguments: ONE_SECOND_STEPS)
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))  # the runs take no time
    heard = Heard()
    config = RunConfig(workloads=("cifar100-mlp",), devices="cpu", data="synthetic", epochs=3, repeats=2, budget_s=30)
    result = runner.run(planning.plan(config), heard)
    first, second = result.runs
    # of the 28.5 s planned (5% of 30 s is kept for what follows the runs), the first run is sure of 3 epochs of
    # 3 steps (13.5 s), the second's are estimated at 9 s, and the rest is halved: 16.5 s, 3 steps; the second gets
    # what the first left (28.5 s): 6 steps
    assert first.settings.max_steps == 3 and [epoch.steps for epoch in first.epochs] == [3, 3, 3]
    assert second.settings.max_steps == 6 and [epoch.steps for epoch in second.epochs] == [6, 6, 6]
    assert second.settings.max_eval_steps == 6  # evaluation never exceeds training's steps
    assert {epoch.eval_samples for epoch in second.epochs} == {6 * 32}
    assert heard.estimates == [("cifar100-mlp", 13.5), ("cifar100-mlp", 27.0)]
    ((spent, budget_s),) = heard.spent
    assert (spent, budget_s) == (0.0, 30)  # the fake clock stood still


def test_a_long_run_is_foretold_with_how_to_shorten_it(monkeypatch):
    monkeypatch.setattr(budget, "time_first_steps", lambda *arguments: ONE_SECOND_STEPS)
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=80))
    config = RunConfig(
        workloads=("cifar100-mlp",), devices="cpu", data="synthetic", epochs=1, max_steps=201, max_eval_steps=1
    )
    result = runner.run(planning.plan(config), reporter)
    assert result.runs[0].status == "ok" and result.runs[0].settings.max_steps == 201  # foretold, not cut
    text = " ".join(screen.getvalue().split())
    assert "cifar100-mlp on cpu should take about 3 min 22 s" in text  # 201 x 1 s + 1 x 0.5 s
    assert "--budget" in text and "--max-steps" in text


def test_a_short_run_is_not_timed_first(monkeypatch):
    def refuse(*arguments):
        raise AssertionError("a run of a few steps needs no estimate")

    monkeypatch.setattr(budget, "time_first_steps", refuse)
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("cifar100-mlp",), devices="cpu", data="synthetic", epochs=2, max_steps=3, max_eval_steps=1
            )
        )
    )
    assert result.runs[0].status == "ok"


def test_the_first_steps_are_timed_on_a_model_of_their_own():
    """The steps timed first (and those of a tiny batch, timed when the batch may not fit) change nothing the run
    measures: the same losses as a run without them, at the batch the budget kept."""
    tiny = {"workloads": ("cifar100-mlp",), "devices": "cpu", "data": "synthetic", "epochs": 3}
    budgeted = runner.run(planning.plan(RunConfig(**tiny, budget_s=1e-3)))  # sized to the fewest steps
    kept = budgeted.runs[0].settings.batch_size  # no batch fits 1 ms: the smallest a budget trains, 2
    assert kept == budget.PROBE_BATCH
    plain = runner.run(planning.plan(RunConfig(**tiny, batch_size=kept, max_steps=FEWEST_BUDGETED_STEPS)))
    assert budgeted.runs[0].settings.max_steps == FEWEST_BUDGETED_STEPS
    assert [e.train_loss for e in budgeted.runs[0].epochs] == [e.train_loss for e in plain.runs[0].epochs]


@pytest.mark.parametrize(("seconds", "text"), [(45.4, "45 s"), (125, "2 min 05 s"), (11_220, "3 h 07 min")])
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration_text(seconds) == text


def test_a_heavy_run_still_to_come_keeps_its_fewest_steps_from_the_light_ones_before_it():
    plan = planning.plan(
        RunConfig(workloads=("cifar100-mlp", "catdog-deep"), devices="cpu", data="synthetic", epochs=3, budget_s=60)
    )
    light, heavy = plan.jobs
    shares = budget.BudgetShares(Budget(60.0, clock=lambda: 0.0), list(plan.jobs))
    light_flops, heavy_flops = budget._flops_per_step(light), budget._flops_per_step(heavy)
    assert heavy_flops > 100 * light_flops
    steps = StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0)
    # the light run is sure of 3 epochs x 3 steps (9 s); the heavy one's 9 steps are estimated at the light one's
    # FLOP/s, and only what is left beyond both of the 57 s planned (5% is kept for what follows the runs) is
    # shared: far less than half of the 48 s beyond the light one's
    heavy_fewest = 3 * 3 * heavy_flops / light_flops
    assert shares.seconds_for(light, steps, 10, light_flops) == 9.0 + max(0.0, 57.0 - 9.0 - heavy_fewest) / 2
    assert shares.seconds_for(light, steps, 10, light_flops) < 9.0 + 48.0 / 2
    shares.run_done(runner.new_record(light, runner.load_data(light), 0))
    assert shares.seconds_for(heavy, steps, 10, heavy_flops) == 57.0  # the last run may take all that is left


@pytest.mark.parametrize("written", ["5x", "m", "", "0s"])
def test_a_budget_the_cli_cannot_read_is_refused_before_anything_runs(written, tmp_path):
    from typer.testing import CliRunner

    from devicebench.cli import EXIT_USAGE, app

    outcome = CliRunner().invoke(
        app,
        [
            "run",
            "cifar100-mlp",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--budget",
            written,
            "--db",
            str(tmp_path / "runs.sqlite"),
        ],
    )
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "--budget" in outcome.output and "90s, 5m" in outcome.output
    assert not (tmp_path / "runs.sqlite").exists()  # refused before the database was made


# --- keeping to the budget as the runs go ---------------------------------------------------------------------


class SlowingMachine:
    """One fake clock for the budget and every Stopwatch: a training step costs `step_s` (after `slows_after`
    steps, `slower` times that), an evaluation batch `eval_step_s` times the same factor; nothing else takes time."""

    def __init__(self, monkeypatch, *, step_s=1.0, eval_step_s=0.5, slower=3.0, slows_after=0):
        self.now, self.steps = 0.0, 0
        machine = self

        def factor():
            return slower if machine.steps >= slows_after else 1.0

        original_step, original_outputs = loop.TrainingSetup.train_step, loop.TrainingSetup.outputs

        def train_step(setup, inputs, labels):
            machine.now += step_s * factor()
            machine.steps += 1
            return original_step(setup, inputs, labels)

        def outputs(setup, inputs):
            if not setup.model.training:
                machine.now += eval_step_s * factor()
            return original_outputs(setup, inputs)

        monkeypatch.setattr(loop.TrainingSetup, "train_step", train_step)
        monkeypatch.setattr(loop.TrainingSetup, "outputs", outputs)
        monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=self.clock))
        monkeypatch.setattr(
            runner,
            "Stopwatch",
            lambda device: Stopwatch(device, clock=self.clock, synchronize=lambda device: None, host_clock=self.clock),
        )
        # what the first steps said: the machine before it slowed
        monkeypatch.setattr(budget, "time_first_steps", lambda *arguments: StepTimes(step_s, step_s, eval_step_s))

    def clock(self) -> float:
        return self.now


def budgeted_run(budget_s, heard=None, **settings):
    config = RunConfig(
        workloads=("cifar100-mlp",),
        devices="cpu",
        data="synthetic",
        max_eval_steps=2,
        budget_s=budget_s,
        **{"epochs": 3, **settings},
    )
    return runner.run(planning.plan(config), heard)


def test_a_machine_three_times_slower_than_its_first_steps_still_ends_within_the_budget(monkeypatch):
    machine = SlowingMachine(monkeypatch, slower=3.0)
    heard = PacedHeard()
    (run,) = budgeted_run(60, heard).runs
    # sized for 1 s steps: 3 x (18 + 2 x 0.5) = 57 s of the 60 (5% kept for what follows the runs); at 3 s a step
    # that is 171 s. Three steps into the warm-up epoch the pacer sees 3 s steps: 3 x (5 x 3 + 2 x 1.5) = 54 s;
    # the last epoch takes the 3 s still left: 6 steps
    assert [epoch.steps for epoch in run.epochs] == [5, 5, 6]
    assert run.status == "ok" and machine.now == 57.0 <= 60
    assert heard.paced == [(3, 18, 3.0)]  # told: sized to 18 steps, its steps took 3x what its first said
    assert run.settings.max_steps == 6  # the record holds the longest epoch that ran
    ((spent, budget),) = heard.spent
    assert spent == 57.0 and budget == 60


def test_load_arriving_mid_run_shortens_the_epochs_still_to_come(monkeypatch):
    machine = SlowingMachine(monkeypatch, slower=3.0, slows_after=18 + 3)  # after the warm-up and 3 more steps
    (run,) = budgeted_run(60).runs
    # epoch 1 as planned (18 x 1 s + 1 s); from its 4th step epoch 2's steps take 3 s, and once its average step
    # (2.25 s at 8 steps) leaves room for no more in the 38 s left it ends there; epoch 3, 3 s steps and slower
    # evaluation measured, fits 4 into the 17 s left: 19 + 21 + 15 s
    assert [epoch.steps for epoch in run.epochs] == [18, 8, 4]
    assert machine.now == 55.0


def test_a_run_too_long_for_its_budget_ends_after_a_warm_up_and_two_steady_epochs(monkeypatch):
    machine = SlowingMachine(monkeypatch, slower=1.0)
    heard = PacedHeard()
    (run,) = budgeted_run(20, heard, epochs=10).runs
    # 3 steps and 2 evaluation batches an epoch take 4 s; 19 s of the 20 fit 4 epochs
    assert [epoch.steps for epoch in run.epochs] == [3, 3, 3, 3] and run.settings.epochs == 4
    assert machine.now == 16.0 and heard.paced == [(10, 3, 1.0)]


def test_the_screen_says_what_a_paced_run_really_trained(monkeypatch):
    SlowingMachine(monkeypatch, slower=3.0)
    screen = io.StringIO()
    budgeted_run(60, RichReporter(Console(file=screen, width=80, soft_wrap=True)), epochs=10)
    said = screen.getvalue().split("kept to its share", 1)[1].splitlines()  # the message, and the budget line
    assert all(len(line) <= 80 for line in said)
    text = " ".join(screen.getvalue().split())
    # sized to 4 steps for 10 epochs at 1 s (10 x (4 + 2 x 0.5) = 50 s of 57); at 3 s a step, epochs of 3 steps
    # and 2 evaluation batches take 12 s: 4 of them fit
    assert (
        "cifar100-mlp on cpu kept to its share of the budget: its epochs had 3 of the 4 steps planned and it "
        "ended after 4 of 10 epochs; its steps took up to 3.0x what its first steps said. Trained in 48 s, within "
        "the 1 min 00 s budget."
    ) in text


def test_a_run_is_never_ended_before_its_warm_up_and_two_steady_epochs():
    times = StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0)
    assert next_epoch_steps(0.0, times, epochs_done=2, epochs_left=8, steps=30, eval_most=0) == FEWEST_BUDGETED_STEPS
    assert next_epoch_steps(0.0, times, epochs_done=MEASURABLE_EPOCHS, epochs_left=7, steps=30, eval_most=0) == 0
    assert next_epoch_steps(3.0, times, epochs_done=MEASURABLE_EPOCHS, epochs_left=7, steps=30, eval_most=0) == 3
    assert next_epoch_steps(100.0, times, epochs_done=MEASURABLE_EPOCHS, epochs_left=2, steps=30, eval_most=0) == 30


class PacedHeard(Heard):
    def __init__(self) -> None:
        super().__init__()
        self.paced: list[tuple] = []

    def run_paced(self, record, planned_epochs, planned_steps, slowdown):
        self.paced.append((planned_epochs, planned_steps, slowdown))


# --- why a session ran over, and what would fit it ------------------------------------------------------------


def account(*runs, workloads=1, budget_s=30.0):
    return BudgetAccount(
        budget_s,
        spent_s=sum(run.spent_s for run in runs) + 2.0,
        start_up_s=2.0,
        runs=runs,
        workloads=workloads,
        fewest_steps=FEWEST_BUDGETED_STEPS,
    )


def test_an_overrun_names_the_run_that_took_the_time_and_the_lever_that_fits_it():
    fewest = RunSpent("mnist-cnn2 on cpu", spent_s=52.0, share_s=20.0, set_up_s=16.0, fewest_epochs=3, slowdown=2.2)
    cause, lever = account(fewest).overrun()  # 2 s of start-up + 52 s = 54 s of a 30 s budget
    assert cause == (
        "mnist-cnn2 on cpu took 16 s for its data and first steps, then 36 s for its fewest epochs "
        "(3 of 3 steps): its share was 20 s after 2.0 s of start-up"
    )
    assert lever == "On this machine as loaded now, a --budget of at least 55 s fits it"
    evaluation = RunSpent(
        "catdog-deep on cpu", spent_s=70.0, share_s=30.0, set_up_s=5.0, evaluation_s=41.0, evaluation_share_s=12.0
    )
    cause, lever = account(evaluation).overrun()
    assert cause == "catdog-deep on cpu's evaluation took 41 s, its share was 12 s"
    assert lever == "--max-eval-steps caps it; a larger --budget fits it"
    slowed = RunSpent("cifar10-cnn on cpu", spent_s=50.0, share_s=30.0, set_up_s=5.0, slowdown=2.6)
    cause, lever = account(slowed).overrun()
    assert cause == (
        "the machine ran 2.6x slower than cifar10-cnn on cpu's first steps said: it took 45 s for "
        "training, its share was 30 s"
    )
    tuning = RunSpent("cifar10-cnn on cpu", spent_s=80.0, share_s=10.0, set_up_s=60.0, slowdown=1.1)
    assert (
        account(tuning)
        .overrun()[0]
        .startswith("cifar10-cnn on cpu took 60 s for its data, tuning and first steps before it trained")
    )
    trees = RunSpent("gbdt-covertype on cpu", spent_s=80.0, share_s=None)
    assert account(trees).overrun()[1].startswith("--max-steps caps their rounds")
    said = " ".join(account(run).overrun()[0] for run in (fewest, evaluation, slowed, tuning, trees))
    assert "at least 3 steps" not in said
    # a run trained in a process of its own (the estimate's baseline, a fresh repeat) was sized there, not here:
    # it is no "trainer of its own" (as resnet50's baseline was once said to be)
    apart = RunSpent("resnet50 on cpu", spent_s=28.0, share_s=None, elsewhere=True)
    assert account(apart).overrun() == (
        "resnet50 on cpu trained in a process of its own and took 28 s",
        "A larger --budget fits it",
    )


def test_a_suite_over_its_budget_blames_what_took_the_most_of_it():
    # the main job on a loaded machine: boosted trees no budget sizes first, then runs left only their fewest epochs
    suite = account(
        RunSpent("gbdt-covertype on cpu", 44.0, None),
        RunSpent("mnist-cnn2 on cpu", 9.0, 8.0),
        RunSpent("catdog-deep on cpu", 114.0, 20.0, set_up_s=30.0, fewest_epochs=3),
        RunSpent("imdb-bilstm on cpu", 200.0, 25.0, set_up_s=20.0, fewest_epochs=3),
        workloads=12,
        budget_s=120.0,
    )
    cause, lever = suite.overrun()
    assert cause == (
        "2 runs already at their fewest epochs (3 steps each) took 314 s (imdb-bilstm on cpu 200 s, "
        "catdog-deep on cpu 114 s)"
    )
    assert lever == "On this machine as loaded now, a --budget of at least 370 s or name fewer workloads fits it"
    trees_first = account(
        RunSpent("gbdt-covertype on cpu", 80.0, None),
        RunSpent("gbdt-synthetic on cpu", 30.0, None),
        RunSpent("mnist-cnn2 on cpu", 12.0, 10.0),
        workloads=3,
    )
    assert trees_first.overrun() == (
        "2 runs on trainers of their own, which no budget sizes, took 110 s "
        "(gbdt-covertype on cpu 80 s, gbdt-synthetic on cpu 30 s)",
        "--max-steps caps their rounds; a larger --budget or name fewer workloads fits it",
    )


def test_naming_fewer_workloads_is_a_lever_only_when_several_ran():
    slowed = RunSpent("cifar10-cnn on cpu", spent_s=45.0, share_s=30.0, slowdown=2.6)
    assert "fewer workloads" not in account(slowed, workloads=1).overrun()[1]
    assert "name fewer workloads" in account(slowed, workloads=5).overrun()[1]


@pytest.mark.parametrize("over", [False, True])
def test_the_budget_line_wraps_between_words_at_80_columns(over):
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=80, soft_wrap=True))  # the CLI's stderr soft-wraps
    evaluation = RunSpent(
        "catdog-deep on cpu", spent_s=70.0 if over else 50.0, share_s=30.0, evaluation_s=41.0, evaluation_share_s=12.0
    )
    said = account(evaluation, budget_s=60.0)
    reporter.budget_spent(said)
    lines = screen.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines) and (len(lines) > 1) == over
    cause, lever = said.overrun()
    expected = (
        f"Trained in {duration_text(said.spent_s)}, over the 1 min 00 s budget: {cause}. {lever}."
        if over
        else "Trained in 52 s, within the 1 min 00 s budget."
    )
    assert [word for line in lines for word in line.split()] == expected.split()  # no word cut in two


def steps_growing_with_the_batch(build, train_batches, test_batches, watch):
    """A machine on which a training step takes 0.1 s a sample and an evaluation batch 0.05 s a sample."""
    batch = train_batches.batch_sizes(1)[0]
    return StepTimes(first_step_s=0.1 * batch, step_s=0.1 * batch, eval_step_s=0.05 * batch)


def test_a_batch_whose_fewest_steps_cannot_fit_the_budget_is_halved_until_they_do(monkeypatch):
    monkeypatch.setattr(budget, "time_first_steps", steps_growing_with_the_batch)
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))
    monkeypatch.setattr(budget, "ASSUMED_SLOW_FLOP_S", 1.0)  # any step may be slow: the probe decides
    screen = io.StringIO()
    (run,) = budgeted_run(30, RichReporter(Console(file=screen, width=80))).runs
    # 28.5 s of the 30 are the run's. At batch b the steps timed first (a step, another, an evaluation batch) and
    # 3 epochs of 3 steps and 2 evaluation batches take 0.25 b + 3 x (0.3 b + 0.1 b) = 1.45 b s: 46.4 s at the
    # planned 32, 23.2 s at 16
    assert run.settings.batch_size == 16 and run.settings.hyperparameters["batch_size"] == 16
    assert {epoch.samples for epoch in run.epochs} == {16 * run.settings.max_steps}
    text = " ".join(screen.getvalue().split())
    assert "cifar100-mlp on cpu trains at batch 16 (planned: 32)" in text and "--batch-size" in text


def test_a_batch_whose_steps_fit_the_budget_is_kept(monkeypatch):
    monkeypatch.setattr(budget, "time_first_steps", steps_growing_with_the_batch)
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))
    monkeypatch.setattr(budget, "ASSUMED_SLOW_FLOP_S", 1.0)
    (run,) = budgeted_run(60).runs  # 46.4 s of 57 s
    assert run.settings.batch_size == 32


def test_a_light_model_is_not_probed(monkeypatch):
    probed = []
    monkeypatch.setattr(
        budget,
        "time_first_steps",
        lambda build, train, *rest: probed.append(train.batch_sizes(1)[0]) or ONE_SECOND_STEPS,
    )
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))
    budgeted_run(30)
    assert probed == [32]  # only the sizing's own first steps, at the planned batch


def test_a_batch_size_auto_grows_from_the_planned_batch_however_small_the_budget(monkeypatch):
    """--batch-size auto searches from the batch planned: a budget that could not fit it does not halve it first."""
    searched_from = []

    def stand_in_search(start, largest, setup, batches, watch):
        searched_from.append(start)
        return start, "batch sizes tried: stand-in"

    monkeypatch.setattr(session_choices, "choose_batch_size", stand_in_search)
    (run,) = budgeted_run(1e-3, batch_size_auto=True).runs
    assert run.status == "ok", run.error
    assert searched_from == [32] and run.settings.batch_size == 32 and run.settings.batch_size_auto


def test_a_sequence_is_halved_once_the_smallest_batch_cannot_fit(monkeypatch):
    def steps_growing_with_the_tokens(build, train_batches, test_batches, watch):
        inputs, _ = next(iter(train_batches.epoch(0, 1)))
        tokens = inputs.numel()  # batch x sequence length
        return StepTimes(first_step_s=0.01 * tokens, step_s=0.01 * tokens, eval_step_s=0.005 * tokens)

    transformer = dataclasses.replace(workloads.get_workload("imdb-transformer"), budget_lengths=("sequence_length",))
    monkeypatch.setitem(_registry._REGISTRY, "imdb-transformer", transformer)
    monkeypatch.setattr(budget, "time_first_steps", steps_growing_with_the_tokens)
    monkeypatch.setattr(budget, "Budget", functools.partial(Budget, clock=lambda: 0.0))
    monkeypatch.setattr(budget, "ASSUMED_SLOW_FLOP_S", 1.0)
    screen = io.StringIO()
    config = RunConfig(
        workloads=("imdb-transformer",), devices="cpu", data="synthetic", max_eval_steps=2, epochs=3, budget_s=30
    )
    (run,) = runner.run(planning.plan(config), RichReporter(Console(file=screen, width=80))).runs
    # at t tokens a step the fewest steps take 0.025 t + 3 x (0.03 t + 0.01 t) = 0.145 t s: within the 28.5 s at
    # 196 tokens a step, so batch 2 (from 32) and 50 tokens (from 200: 100 would be 200 a step)
    assert run.settings.batch_size == 2 and run.settings.hyperparameters["sequence_length"] == 50
    assert run.settings.overrides == {"sequence_length": 50}  # never pooled with runs of full-length reviews
    assert {epoch.samples for epoch in run.epochs} == {2 * run.settings.max_steps}
    text = " ".join(screen.getvalue().split())
    assert "imdb-transformer on cpu trains at batch 2 and sequence_length 50 (planned: 32 and 200)" in text


def probe_job(flops_per_step):
    """A stand-in for a Job: _step_times_model reads nothing but its FLOPs a step (patched below)."""
    return types.SimpleNamespace(flops=flops_per_step)


def test_a_step_is_estimated_as_a_fixed_cost_and_a_cost_per_flop_through_the_two_sizes_timed(monkeypatch):
    monkeypatch.setattr(budget, "_flops_per_step", lambda job: job.flops)
    # 2.1 s at 10 FLOPs, 2.8 s at 80: 2 s a step whatever its size (the optimizer's) and 0.01 s a FLOP
    at = budget._step_times_model([(10, StepTimes(2.5, 2.1, 0.1)), (80, StepTimes(3.2, 2.8, 0.4))])
    estimate = at(probe_job(1_000))
    assert estimate.step_s == pytest.approx(12.0) and estimate.first_step_s == pytest.approx(12.4)
    assert estimate.eval_step_s == pytest.approx(5.0)  # no optimizer: in proportion to the larger size's
    # a larger size timed faster than the smaller (noise): no fixed cost, the larger one's rate
    noisy = budget._step_times_model([(10, StepTimes(3.0, 3.0, 0.1)), (80, StepTimes(2.8, 2.8, 0.4))])
    assert noisy(probe_job(160)).step_s == pytest.approx(5.6)
    # one size timed: in proportion to the FLOPs
    assert budget._step_times_model([(10, StepTimes(1.0, 1.0, 0.5))])(probe_job(30)).step_s == pytest.approx(3.0)


# --- the Pacer's rules one by one, on a clock the test turns ------------------------------------------------------


class TurnedClock:
    """The budget's clock, moved by hand: each test says exactly what the steps so far took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pacer_on(clock: TurnedClock, planned: StepTimes, deadline_s: float = 100.0) -> budget.Pacer:
    return budget.Pacer(Budget(1_000.0, clock=clock), deadline_s, planned)


def run_of(epochs: int) -> types.SimpleNamespace:
    """What the Pacer reads of a run before its first epoch has ended: the epochs planned, none finished."""
    return types.SimpleNamespace(epochs=[], settings=types.SimpleNamespace(epochs=epochs))


def test_the_first_steps_one_time_cost_is_not_taken_for_a_slow_machine():
    """The warm-up epoch's first step took 10 s (allocation, kernel selection), the others the planned 1 s, as the
    first steps timed said: three steps in, the Pacer sees 1 s steps, not 12 s / 3 = 4 s ones."""
    clock, run = TurnedClock(), run_of(epochs=3)
    pacer = pacer_on(clock, StepTimes(first_step_s=10.0, step_s=1.0, eval_step_s=0.0))
    assert pacer.epoch_steps(run, steps_done=0, steps=20, eval_steps=0) == 20  # 9 s + 3 x 20 s fit in 100 s
    clock.now = 10.0 + 1.0 + 1.0
    assert pacer.epoch_steps(run, steps_done=3, steps=20, eval_steps=0) == 20
    assert pacer.slowdown == 1.0 and pacer.resized == []


def test_an_epoch_is_never_cut_below_the_steps_it_has_already_taken():
    """Ten steps of 10 s each leave no time for more: the epoch ends at the 10 taken, never at the fewest 3."""
    clock, run = TurnedClock(), run_of(epochs=3)
    pacer = pacer_on(clock, StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0))
    assert pacer.epoch_steps(run, steps_done=0, steps=20, eval_steps=0) == 20
    clock.now = 10 * 10.0
    assert pacer.epoch_steps(run, steps_done=10, steps=20, eval_steps=0) == 10
    assert pacer.resized == [(1, 10)] and pacer.slowdown == 10.0


@pytest.mark.parametrize("steps_done", [1, FEWEST_BUDGETED_STEPS - 1])
def test_fewer_steps_than_the_fewest_say_nothing_of_the_machine(steps_done):
    """One or two steps, the first of them slow, are too few to re-size an epoch by: it keeps its steps, and no
    slowdown is noted."""
    clock, run = TurnedClock(), run_of(epochs=3)
    pacer = pacer_on(clock, StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0))
    assert pacer.epoch_steps(run, steps_done=0, steps=20, eval_steps=0) == 20
    clock.now = 50.0 * steps_done
    assert pacer.epoch_steps(run, steps_done=steps_done, steps=20, eval_steps=0) == 20
    assert pacer.slowdown == 1.0 and pacer.resized == []


def test_the_slowdown_reported_is_the_largest_the_run_saw_not_the_last():
    """Steps 3x slower than planned for a burst of load, then back near the planned 1 s: the slowdown said on the
    screen is the 3x the run met, not the 1.25x its last look saw."""
    clock, run = TurnedClock(), run_of(epochs=3)
    pacer = pacer_on(clock, StepTimes(first_step_s=1.0, step_s=1.0, eval_step_s=0.0), deadline_s=1_000.0)
    assert pacer.epoch_steps(run, steps_done=0, steps=20, eval_steps=0) == 20
    clock.now = 3 * 3.0  # three steps of 3 s
    pacer.epoch_steps(run, steps_done=3, steps=20, eval_steps=0)
    assert pacer.slowdown == 3.0
    clock.now += 7 * 0.5  # seven of 0.5 s: 12.5 s for ten steps, 1.25 s a step
    pacer.epoch_steps(run, steps_done=10, steps=20, eval_steps=0)
    assert pacer.slowdown == 3.0


@pytest.mark.parametrize(("mode", "made_on_the_device"), [("tuned", True), ("seed", False)])
def test_the_time_probe_makes_its_batches_as_the_run_will(monkeypatch, mode, made_on_the_device):
    """A tuned cifar10-cnn run distorts its batches a batch at a time (data/device_augment.py): its budget's probe
    times those, not the seeds' image-by-image distortion, or the run is sized from steps it never takes."""
    from devicebench.data import load_dataset
    from devicebench.data.device_augment import DeviceAugmentedBatches

    config = RunConfig(workloads=("cifar10-cnn",), devices="cpu", data="synthetic", mode=mode, epochs=3)
    (job,) = planning.plan(config).jobs
    probed = []
    monkeypatch.setattr(budget, "time_first_steps", lambda build, train, test, watch: probed.append(train))
    budget.time_probe(job, load_dataset("cifar10", "synthetic"), lambda: None)
    assert isinstance(probed[0], DeviceAugmentedBatches) is made_on_the_device
