"""The plan `devicebench run --dry-run` shows: every job resolved, before anything is loaded or trained, and the
notes under it (how a time budget sizes the epochs, which workloads will train on synthetic data and why).

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 30 --dry-run
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeGuard

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from devicebench.choices import DATA_CHOICES, DataChoice
from devicebench.report.fitting import FittedTable, fitted
from devicebench.report.text import duration_text

if TYPE_CHECKING:  # planning imports torch: the report's other modules must load without it
    from devicebench.planning import Job, Plan


def plan_table(plan: Plan) -> FittedTable:
    """What `devicebench run --dry-run` shows: every job, resolved, before anything is loaded or trained. Runs and
    Settings come only when some job repeats, or is tuned or changed with --set."""
    from devicebench.budget import MEASURABLE_EPOCHS  # torch: the dry run has it already

    runs = sum(job.repeats for job in plan.jobs)
    table = Table(title=f"The plan: {runs} run{'' if runs == 1 else 's'}; nothing is loaded or trained")
    repeated = any(job.repeats > 1 for job in plan.jobs)
    changed = any(job.mode != "seed" or job.overrides for job in plan.jobs)
    for column, shown in (
        ("Workload", True),
        ("Device", True),
        ("Runs", repeated),
        ("Batch", True),
        ("Epochs", True),
        ("Steps", True),
        ("Eval", True),
        ("Data", True),
        ("Settings", changed),
    ):
        if shown:
            table.add_column(
                column, justify="right" if column in ("Runs", "Batch", "Epochs", "Steps", "Eval") else "left"
            )
    for job in plan.jobs:
        if job.batch_size_auto:
            batch = "auto"
        else:
            batch = f"{job.batch_size:,}" if job.batch_size else "every row"  # 0: boosted trees read every row
        source, _ = _expected_source(job)
        settings = [job.mode, *(f"{name}={value}" for name, value in job.overrides.items())]
        table.add_row(
            escape(job.workload.name),
            str(job.device),
            *([str(job.repeats)] if repeated else []),
            batch,
            # a budget ends a run when its share is spent, after a warm-up and two steady epochs at least
            f"≤ {job.training.epochs:,}"
            if _sized(plan, job) and job.training.epochs > MEASURABLE_EPOCHS
            else str(job.training.epochs),
            _steps_text(plan, job),
            _cap_text(job.training.max_eval_steps),
            escape(job.data.dataset) + " " + (f"[bold yellow]{source.upper()}[/]" if source == "synthetic" else source),
            *([escape(", ".join(settings))] if changed else []),
        )
    return fitted(table)


def _sized(plan: Plan, job: Job) -> bool:
    """Whether the runner sizes `job`'s epochs to the plan's time budget (its own trainer's runs are not)."""
    return plan.budget_s is not None and job.workload.trainer is None


def _steps_text(plan: Plan, job: Job) -> str:
    """Steps an epoch: `40`, `all`, `sized` to the budget (`sized ≤ 40` under a cap), `2 rounds` for trees."""
    cap = job.training.max_steps
    if _sized(plan, job):
        return "sized" + ("" if cap is None else f" ≤ {cap:,}")
    return _cap_text(cap) + (" rounds" if job.batch_size == 0 and cap is not None else "")


def _cap_text(cap: int | None) -> str:
    """A per-epoch cap on steps or evaluation batches; "all" when there is none."""
    return "all" if cap is None else f"{cap:,}"


def _expected_source(job: Job) -> tuple[str, str | None]:
    from devicebench.data import (
        expected_source,  # imports numpy and the readers: only the dry run needs it
    )

    data = job.data
    if not _is_data_choice(data.source):  # --data MODULE:FUNCTION: your own data, whatever name it gives itself
        return "yours", None
    return expected_source(
        data.dataset, data.source, data_dir=data.data_dir, largest_download_bytes=data.largest_download_bytes
    )


def _is_data_choice(source: str) -> TypeGuard[DataChoice]:
    """Whether `source` is one of --data's choices for devicebench's datasets (auto, real, synthetic), rather than
    the MODULE:FUNCTION of data of your own."""
    return source in DATA_CHOICES


def plan_notes(plan: Plan) -> list[Text]:
    """Under the plan: how a budget sizes the epochs, and which workloads will train on synthetic data and why,
    with how to get the real data."""
    from devicebench.budget import FEWEST_BUDGETED_STEPS, MEASURABLE_EPOCHS  # torch: the dry run has it already

    notes = [Text("Steps: training steps an epoch; eval: evaluation batches after each epoch; all: the whole set.")]
    if plan.budget_s is not None and any(_sized(plan, job) for job in plan.jobs):
        notes.append(
            Text(
                f"Sized: a time budget of {duration_text(plan.budget_s)}, start-up included: each run times its first "
                f"steps and an evaluation batch on a throwaway model, and its epochs get the steps that fit its share, "
                f"at least {FEWEST_BUDGETED_STEPS} an epoch; it ends when its share is spent (≤ in Epochs), after "
                f"{MEASURABLE_EPOCHS} at least, a warm-up and two steady ones (--budget changes it; --max-steps alone "
                "runs fixed steps)."
            )
        )
    by_source: dict[tuple[str, str | None, str], list[str]] = {}
    for job in plan.jobs:
        source, why = _expected_source(job)
        if why is not None and source != "real":
            by_source.setdefault((source, why, job.data.dataset), []).append(job.workload.name)
    for (source, why, dataset), names in by_source.items():
        listed = ", ".join(dict.fromkeys(names))
        if source == "synthetic":
            notes.append(Text(f"{listed} will train on SYNTHETIC data: {why}.", style="yellow"))
        else:
            notes.append(Text(f"{listed}: {dataset} {why}."))
    if any(source == "synthetic" for source, _, _ in by_source):
        notes.append(
            Text(
                "On synthetic data speeds are real; accuracies cannot be compared with the published ones.",
                style="yellow",
            )
        )
    return notes
