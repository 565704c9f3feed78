"""Rich tables for the terminal: the machine, the workloads, and a run's results with the speedup.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 30
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from devicebench.engine.tuning_choices import Tuning
from devicebench.results.compare import NOISY_EPOCH_TIME_CV, Row, compare
from devicebench.results.schema import Result, RunRecord
from devicebench.results.stats import Speedup, Spread

if TYPE_CHECKING:  # each imports torch: history and compare's tables must load without it
    from devicebench.planning import Job, Plan
    from devicebench.reproduce import RecordComparison, Reproduction
    from devicebench.workloads import Workload

BASELINE_DEVICE = "cpu"


def number_text(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def rate_text(value: float | None) -> str:
    """A throughput: whole numbers from 10 up (`1,732`), two significant figures below (`9.4`, `0.21`), so that a
    reference model on a laptop reads 0.21 samples/s, not 0."""
    if value is None:
        return "—"
    if value >= 10 or value == 0:
        return f"{value:,.0f}"
    return f"{value:.2g}" if value >= 1 else f"{value:.2g}".replace("e-0", "e-")


def percent_text(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def duration_text(seconds: float) -> str:
    """`45 s`, `2 min 05 s`, `3 h 07 min`: a duration as a person reads it."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


# --- a plan ------------------------------------------------------------------------------------------------


def plan_table(plan: Plan) -> FittedTable:
    """What `devicebench run --dry-run` shows: every job, resolved, before anything is loaded or trained. Runs and
    Settings come only when some job repeats, or is tuned or changed with --set."""
    runs = sum(job.repeats for job in plan.jobs)
    table = Table(title=f"The plan: {runs} run{'' if runs == 1 else 's'}; nothing is loaded or trained")
    repeated = any(job.repeats > 1 for job in plan.jobs)
    changed = any(job.mode != "seed" or job.overrides for job in plan.jobs)
    for column, shown in (("Workload", True), ("Device", True), ("Runs", repeated), ("Batch", True),
                          ("Epochs", True), ("Steps", True), ("Eval", True), ("Data", True), ("Settings", changed)):
        if shown:
            table.add_column(column, justify="right" if column in ("Runs", "Batch", "Epochs", "Steps", "Eval")
                             else "left")
    for job in plan.jobs:
        if job.batch_size_auto:
            batch = "auto"
        else:
            batch = f"{job.batch_size:,}" if job.batch_size else "every row"  # 0: boosted trees read every row
        source, _ = _expected_source(job)
        settings = [job.mode, *(f"{name}={value}" for name, value in job.overrides.items())]
        table.add_row(escape(job.workload.name), str(job.device), *([str(job.repeats)] if repeated else []), batch,
                      str(job.training.epochs), _steps_text(plan, job), _cap_text(job.training.max_eval_steps),
                      escape(job.data.dataset) + " " + (f"[bold yellow]{source.upper()}[/]" if source == "synthetic"
                                                        else source),
                      *([escape(", ".join(settings))] if changed else []))
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
    return expected_source(data.dataset, data.source, data_dir=data.data_dir,
                           largest_download_bytes=data.largest_download_bytes)


def plan_notes(plan: Plan) -> list[Text]:
    """Under the plan: how a budget sizes the epochs, and which workloads will train on synthetic data and why,
    with how to get the real data."""
    from devicebench.engine.loop import (
        FEWEST_BUDGETED_STEPS,  # torch: the dry run has it already
    )

    notes = [Text("Steps: training steps an epoch; eval: evaluation batches after each epoch; all: the whole set.")]
    if plan.budget_s is not None and any(_sized(plan, job) for job in plan.jobs):
        notes.append(Text(
            f"Sized: a time budget of {duration_text(plan.budget_s)}, start-up included: each run times its first "
            f"steps and an evaluation batch on a throwaway model, and its epochs get the steps that fit its share, "
            f"at least {FEWEST_BUDGETED_STEPS} an epoch (--budget changes it; --max-steps alone runs fixed steps)."))
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
        notes.append(Text("On synthetic data speeds are real; accuracies cannot be compared with the published ones.",
                          style="yellow"))
    return notes


# --- the machine -------------------------------------------------------------------------------------------


def machine_view(fingerprint: dict[str, Any]) -> RenderableType:
    """What `devicebench devices` shows: the CPU, every accelerator, and why there is none when there is none."""
    cpu = fingerprint["cpu"]
    isa = ", ".join(name.upper().replace("_", "-") for name, present in cpu["isa"].items() if present) or "none of note"
    host = Table(title="This machine", show_header=False, title_justify="left")
    host.add_column(style="bold")
    host.add_column()
    host.add_row("CPU", f"{cpu['model']} ({cpu['architecture']})")
    host.add_row("Cores", f"{cpu['physical_cores'] or '?'} physical, {cpu['logical_cores']} logical")
    host.add_row("Torch threads", f"{cpu['torch_threads']} intra-op, {cpu['torch_interop_threads']} inter-op")
    host.add_row("ISA", f"{isa} (torch kernels use {cpu['torch_cpu_capability']})")
    host.add_row("Memory", f"{fingerprint['memory_total_mib'] / 1024:,.1f} GiB")
    host.add_row("PyTorch", f"{fingerprint['torch']} (CUDA build: {fingerprint['torch_cuda_build'] or 'no'})")
    host.add_row("Python", fingerprint["python"])
    host.add_row("OS", fingerprint["os"])
    parts: list[RenderableType] = [fitted(host)]
    accelerators = fingerprint["accelerators"]
    if accelerators:
        table = Table(title="Accelerators", title_justify="left")
        for column in ("Device", "Name", "Memory", "Compute capability", "Driver", "CUDA", "cuDNN"):
            table.add_column(column)
        for entry in accelerators:
            memory = entry.get("memory_total_mib")
            table.add_row(
                entry["device"],
                entry.get("name") or "?",
                "?" if memory is None else f"{memory / 1024:,.1f} GiB",
                entry.get("compute_capability") or "—",
                entry.get("driver") or "—",
                entry.get("cuda_runtime") or "—",
                entry.get("cudnn") or "—",
            )
        parts.append(fitted(table))
    else:
        reason = fingerprint.get("no_accelerator_reason") or "no accelerator is visible to PyTorch"
        parts.append(Text(f"No GPU or other accelerator: {reason}", style="yellow"))
    return Group(*parts)


# --- the workloads -----------------------------------------------------------------------------------------


def workloads_table(workloads: Iterable[Workload]) -> FittedTable:
    """`devicebench list`: a row per workload, its name, seed experiment, dataset and size first (the label kept
    beside every part of a narrow screen), then the model, its default settings and the published figures."""
    table = Table(title="Workloads", title_justify="left", show_lines=True)
    for column in ("Workload", "Model", "Defaults", "Published"):
        table.add_column(column)
    for entry in workloads:
        defaults = ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                             for key, value in entry.defaults.items())
        missing = entry.requires()
        parameters = entry.parameter_count()
        origin = "" if entry.origin == "devicebench" else f"\nfrom {entry.origin}"
        kind = entry.seed or ("reference model, run when named" if not entry.in_suites else "no seed")
        table.add_row(
            f"[bold]{escape(entry.name)}[/]\n{escape(kind)}, {escape(entry.dataset)}\n"
            + ("trees" if parameters is None else f"{parameters:,} parameters")
            + (f"\n[yellow]unavailable: {escape(missing)}[/]" if missing else ""),
            escape(entry.summary + origin),
            defaults,
            published_text(entry) if entry.published is not None else record_text(entry.name),
        )
    return fitted(table)


def record_text(workload: str) -> str:
    """`devicebench list`'s Published cell for a reference model: what the public record holds of it."""
    from devicebench.results.record import (
        published_figures,  # read once, and only where a table asks
    )

    figures = published_figures(workload)
    if not figures:
        return "—"
    gpus = len({figure.gpu for figure in figures})
    return (f"the public record: {len(figures)} figures on {gpus} GPU{'s' if gpus > 1 else ''} "
            f"(devicebench reproduce {workload})")


def published_text(entry: Workload | None) -> str:
    published = entry.published if entry is not None else None
    if published is None:
        return "—"
    lines = []
    if published.speedup is not None:
        lines.append(f"GPU {published.speedup:g}x faster ({published.basis})")
    if published.accuracy is not None:
        lines.append(f"{published.accuracy_kind} accuracy {published.accuracy:.1%}")
    lines.append(published.hardware)
    return "\n".join(lines)


# --- results -----------------------------------------------------------------------------------------------
# A table fits the terminal: by default the figures most runs are read for, the rest with --wide (all are in the
# JSON either way). Numbers are never cut: a cell wraps at its spaces, never inside a word, and the row labels fold.
# What the columns hold is said once per command, under the last table, for the columns shown.


@dataclasses.dataclass(frozen=True)
class Column:
    """A figure of the results tables: its heading, the legend's words for it, and its cell for a row."""

    heading: str
    legend: str  # a clause of the legend printed once under the tables; "" when the heading says it all
    cell: Callable[[Row], str]
    compact: Callable[[list[Row]], bool] = lambda rows: True  # shown without --wide when this holds
    present: Callable[[list[Row]], bool] = lambda rows: True  # shown at all only when this holds


def _never(rows: list[Row]) -> bool:
    return False


def _above_peak(rows: list[Row]) -> bool:
    """A row flagged for TFLOP/s above the device's peak: the flagged figure is shown without --wide too."""
    return any(flag.code == "above-peak" for row in rows for flag in row.flags)


def _published_samples_text(row: Row) -> str:
    entry = known_workload(row.workload)  # only with --wide: the compact tables need no workload registry
    published = entry.published if entry is not None else None
    return "—" if published is None else number_text(published.samples_per_s.get(device_kind(row.device)), 0)


def _has_published(rows: list[Row]) -> bool:
    entry = known_workload(rows[0].workload)
    return entry is not None and entry.published is not None


def epoch_time_text(row: Row) -> str:
    epoch = row.epoch_time_s
    return "—" if epoch is None else f"{epoch.median:,.2f} [{epoch.low:,.2f}–{epoch.high:,.2f}]"


def target_text(row: Row) -> str:
    """`41.2`: median training seconds to --target-accuracy; `not reached`; `41.2 (1 of 2)` when some runs were
    not there by their last epoch; `—` without a target."""
    targeted = row.targeted_runs
    if not targeted:
        return "—"
    reached = [run for run in targeted if run.time_to_target_train_s is not None]
    if not reached:
        return "not reached"
    return number_text(row.time_to_target_s.median, 1) + ("" if len(reached) == len(targeted)
                                                          else f" ({len(reached)} of {len(targeted)})")


def cost_vs_baseline_text(row: Row) -> str:
    ratio = row.cost_vs_baseline
    return "—" if ratio is None else f"{ratio:.3g}x"


RESULT_COLUMNS = (
    Column("Samples/s", "samples/s: median over the steady epochs (after the warm-up one) of every repeat",
           lambda row: rate_text(row.samples_per_s.median if row.samples_per_s else None)),
    Column("Speedup", "speedup: ratio of median samples/s against the baseline [95% bootstrap interval]",
           lambda row: speedup_text(row)),
    Column("Test acc", "test acc: after the last epoch, median of the repeats",
           lambda row: percent_text(row.test_accuracy.median if row.test_accuracy else None)),
    Column("Waiting", "waiting: the share of training spent waiting for the next batch, and the verdict "
                      "(input-bound: faster input would pay; compute-bound: the device itself is the limit)",
           lambda row: waiting_text(row)),
    Column("To target s", "to target s: median seconds of training (evaluation left out) until the test accuracy "
                          "first reached --target-accuracy; (1 of 2): the runs that reached it",
           target_text, present=lambda rows: any(row.targeted_runs for row in rows)),
    Column("Epoch s", "epoch s: steady median [min–max]", epoch_time_text, compact=_never),
    Column("ms/step", "ms/step: median training step", lambda row: median_text(row.step_time_ms, 2),
           compact=_never),
    Column("TFLOP/s", "TFLOP/s: the matrix products and convolutions of forward and backward per sample "
                      "(engine/flops.py) x samples/s, and as a share of the calibrated matmul peak of every device "
                      "that trained, at the run's precision (MFU; `devicebench calibrate`)",
           lambda row: tflops_text(row), compact=_above_peak),
    Column("Busy", "busy: the device's utilisation (with several processes, their GPUs' mean and the least busy "
                   "one's) and the training processes' CPU use while training (100% CPU = one core)",
           lambda row: busy_text(row), compact=_never),
    Column("Warm-up s", "warm-up s: the first epoch, median", lambda row: median_text(row.warmup_epoch_s, 2),
           compact=_never),
    Column("End-to-end s", "end-to-end s: model creation to the end of the last epoch, evaluation included",
           lambda row: median_text(row.end_to_end_s, 1), compact=_never),
    Column("Published samples/s", "published samples/s: the seed's figure for that kind of device",
           _published_samples_text, compact=_never, present=_has_published),
    # --price asks for the cost: shown without --wide too
    Column("Cost/1M samples", "cost/1M samples: at the steady rate and the price per hour",
           lambda row: number_text(row.cost_per_million_samples, 3),
           present=lambda rows: any(row.price_per_hour is not None for row in rows)),
    Column("Cost vs baseline", "", cost_vs_baseline_text,
           present=lambda rows: any(row.price_per_hour is not None for row in rows)),
    Column("Energy Wh", "energy Wh: what the device drew while training, median per run",
           lambda row: median_text(row.energy_wh, 2), compact=_never,
           present=lambda rows: any(row.energy_wh is not None for row in rows)),
)


def shown_columns(rows: list[Row], wide: bool, columns: Iterable[Column] = RESULT_COLUMNS) -> list[Column]:
    """The columns of `rows`' table: without --wide the compact ones, and only those with something to show."""
    return [column for column in columns if (wide or column.compact(rows)) and column.present(rows)]


def comparison_tables(rows_by_workload: dict[str, list[Row]], *, wide: bool = False) -> list[RenderableType]:
    """One table per workload, a row per (machine, device, settings) with the speedup against its baseline, each
    followed by its notes; then, once, the legend of the columns shown and the name of every device."""
    parts: list[RenderableType] = []
    shown: dict[Column, None] = {}
    for name, rows in rows_by_workload.items():
        columns = shown_columns(rows, wide)
        shown.update(dict.fromkeys(columns))
        parts.append(_workload_table(name, rows, columns))
        parts += [Text(note, style="yellow") for note in row_notes(rows)]
    all_rows = [row for rows in rows_by_workload.values() for row in rows]
    published = [f"{name} published: {published_text(known_workload(name))}".replace("\n", "; ")
                 for name in rows_by_workload if wide and known_workload(name) is not None
                 and known_workload(name).published is not None]
    return parts + legend(list(shown), all_rows, published)


def legend(columns: list[Column], rows: list[Row], extra: Iterable[str] = ()) -> list[RenderableType]:
    """What the shown columns hold, in one paragraph, and each device's name: printed once, after the tables."""
    clauses = [column.legend for column in RESULT_COLUMNS if column in columns and column.legend]
    lines = ([clauses[0][0].upper() + "; ".join(clauses)[1:] + "."] if clauses else []) + [
        *dict.fromkeys(f"{row.machine_name}/{row.device}: {row.device_name}" for row in rows), *extra]
    return [Text(line, style="dim") for line in lines]


TEXT_WIDTH = 200  # columns of `comparison_text`: the widest table without folding its cells


def comparison_text(results: list[Result]) -> str:
    """The comparison tables of `results` as plain text (`Result.table()`), every column shown."""
    console = Console(width=TEXT_WIDTH, record=True, file=io.StringIO(), color_system=None)
    for table in comparison_tables(compare(results), wide=True):
        console.print(table)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def batch_text(batch_size: int) -> str:
    """`batch 32`, or what a batch size of 0 means: boosted trees read every row in every round."""
    return f"batch {batch_size}" if batch_size else "every row each round"


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"


def known_workload(name: str) -> Workload | None:
    """The workload called `name`, or None for one this devicebench does not have (an imported result, a
    plugin not installed here, a user's model of another session)."""
    from devicebench.workloads import (
        get_workload,  # the registry imports torch: only the tables that show it
    )

    try:
        return get_workload(name)
    except KeyError:
        return None


def span_text(values: Iterable[int]) -> str:
    """`60`, or `7–30` when the values differ."""
    ordered = sorted(set(values))
    return f"{ordered[0]:,}" if len(ordered) == 1 else f"{ordered[0]:,}–{ordered[-1]:,}"


def steps_label(row: Row) -> str:
    """The row's label, and how many steps its epochs had where the label does not say: for a chart or a line that
    sets rows whose epochs differ in length side by side. `laptop/cuda:0, 25-step epochs`."""
    if "max_steps" in row.differs_in or not row.epoch_steps:
        return row.label
    return f"{row.label}, {span_text(row.epoch_steps)}-step epochs"


def length_text(rows: list[Row]) -> str:
    """`3 epochs of 60 steps`: what the epochs really had (a cap above an epoch's length changes nothing); `7–30
    steps` when rows differ (a sweep over batch sizes); boosting rounds for trees, which read every row each round."""
    runs = [run for row in rows for run in row.runs]
    unit = "rounds" if all(run.settings.batch_size == 0 for run in runs) else "steps"
    steps = [steps for row in rows for steps in row.epoch_steps]
    if steps:
        length = f"{span_text(steps)} {unit}"
    else:  # no epoch finished: what was asked for
        caps = {run.settings.max_steps for run in runs}
        length = f"at most {span_text(caps)} {unit} (none finished)" if None not in caps else "full length"
    return f"{span_text(run.settings.epochs for run in runs)} epochs of {length}"


def _workload_title(name: str, rows: list[Row]) -> str:
    runs = [run for row in rows for run in row.runs]
    sources = {row.settings["data_source"] for row in rows}
    data = " and ".join(f"[bold yellow]{s} data[/]" if s == "synthetic" else f"{s} data" for s in sorted(sources))
    if any(row.settings["batch_size_auto"] for row in rows):
        batches = "batch auto (each device's fastest: a throughput setting, not the seed's)"
    else:
        sizes = sorted({run.settings.batch_size for run in runs})
        batches = batch_text(sizes[0]) if len(sizes) == 1 else "batch " + ", ".join(f"{size:,}" for size in sizes)
    seed = next((run.seed_experiment for run in runs if run.seed_experiment), "")  # stored: no registry needed
    return (f"[bold]{escape(name)}[/]: {batches}, {length_text(rows)}, {data}"
            + (f"; seed experiment {escape(seed)}" if seed else ""))


def _workload_table(name: str, rows: list[Row], columns: list[Column]) -> FittedTable:
    one_machine = len({row.machine_id for row in rows}) == 1
    return figure_table(_workload_title(name, rows), {"Device" if one_machine else "Machine/device":
                                                      [row_label(row, one_machine) for row in rows]}, rows, columns)


def figure_table(title: str, leading: dict[str, list[str]], rows: list[Row], columns: list[Column]) -> FittedTable:
    """A table of `rows`: the `leading` columns (heading: a cell per row), then `columns`, right-aligned figures."""
    cells = [[column.cell(row) for row in rows] for column in columns]
    return FittedTable(title, [label_column(heading, values) for heading, values in leading.items()], [
        FittedColumn(column.heading, values, options={"justify": "right"}) for column, values in zip(columns, cells)])


@dataclasses.dataclass
class FittedColumn:
    """A column of a `FittedTable`: its heading, its cells, and the narrowest it may be without cutting a word."""

    heading: str
    cells: list[RenderableType]
    min_width: int | None = None  # None: its longest word, heading included (no_wrap: its widest cell)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # for Table.add_column: justify, style

    def narrowest(self) -> int:
        texts = [self.heading, *self.cells]
        if self.min_width is not None:
            return self.min_width
        if self.options.get("no_wrap"):
            return max(plain_text(text).cell_len for text in texts)
        return longest_word(texts)


@dataclasses.dataclass
class FittedTable:
    """A table that fits whatever prints it, every word whole: identifiers and numbers are never cut. A cell wraps
    only at its spaces (each column is at least as wide as its longest word); when the columns cannot stand side by
    side at their narrowest, the ones that do not fit follow in another table, the leading columns repeated. The
    title and the caption are paragraphs of the screen's width, wrapped between words (a rich title wraps at the
    table's). Only a word wider than the screen itself is folded."""

    title: str
    leading: list[FittedColumn]  # the labels that say which row is which: in every part
    columns: list[FittedColumn]
    table_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # for Table(): box, caption...
    padding: int = 2  # columns of padding per table column: (0, 1) on each side
    edges: bool = True  # a border at both ends: one more rule than there are columns, else one fewer
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # for Table.add_row: style, end_section

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        parts = self.parts(width)
        table_options = {name: value for name, value in self.table_options.items()
                         if name not in ("caption", "caption_justify", "title", "title_justify")}
        for part, columns in enumerate(parts):
            if self.title:
                yield Text.from_markup(self.title + (" (continued)" if part else ""), style="table.title")
            yield self.table(columns, widths=self.widths(columns, width), options=table_options)
        caption = self.table_options.get("caption")
        if caption:
            yield Text.from_markup(caption, style="table.caption") if isinstance(caption, str) else caption

    def narrowest(self, width: int) -> dict[int, int]:
        """Each column's narrowest (by id): its longest word, the labels leaving FIGURE_ROOM beside them."""
        room = width - self.overhead(len(self.leading) + 1)
        label_room = max(LABEL_MIN_WIDTH, (room - FIGURE_ROOM) // max(1, len(self.leading)))
        floors = {id(column): min(column.narrowest(), label_room) for column in self.leading}
        labels = sum(floors.values())
        floors |= {id(column): max(1, min(column.narrowest(), room - labels)) for column in self.columns}
        return floors

    def parts(self, width: int) -> list[list[FittedColumn]]:
        """The columns of each table, in order: as many as fit at their narrowest, the leading ones in each."""
        floors = self.narrowest(width)
        parts: list[list[FittedColumn]] = []
        for column in self.columns:
            if parts and sum(floors[id(item)] for item in [*parts[-1], column]) + self.overhead(len(parts[-1]) + 1) \
                    <= width:
                parts[-1].append(column)
            else:
                parts.append([*self.leading, column])
        return parts or [list(self.leading)]

    def overhead(self, count: int) -> int:
        """Columns of `count` table columns that are not their content: padding and rules."""
        rules = 0 if self.table_options.get("box", True) is None else count + (1 if self.edges else -1)
        return count * self.padding + rules

    def widths(self, columns: list[FittedColumn], width: int) -> list[int | None]:
        """Each column's width: its widest cell while all fit, else narrowed, the column with the most room to spare
        first, never below its narrowest (rich's own narrowing cuts words, and can leave a table wider than the
        screen), its heading kept on one line while others can give; below its narrowest only when even the
        narrowest do not fit (a word wider than the screen)."""
        widths = [max(plain_text(cell).cell_len for cell in [column.heading, *column.cells]) for column in columns]
        excess = sum(widths) + self.overhead(len(columns)) - width
        if excess <= 0:
            return [None] * len(columns)  # rich's own layout
        words = [self.narrowest(width)[id(column)] for column in columns]
        headings = [max(floor, plain_text(column.heading).cell_len) for floor, column in zip(words, columns)]
        for floor in (headings, words, [1] * len(columns)):  # headings whole while they can be, then words whole
            while excess > 0:
                spare, index = max((widths[index] - floor[index], index) for index in range(len(columns)))
                if spare <= 0:
                    break
                widths[index] -= 1
                excess -= 1
        return widths

    def table(self, columns: list[FittedColumn], *, widths: list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> Table:
        table = Table(padding=(0, self.padding // 2), **(options or {}))
        for column, column_width in zip(columns, widths or [None] * len(columns)):
            table.add_column(column.heading, **{"overflow": "fold", **column.options, "width": column_width,
                                                "no_wrap": column.options.get("no_wrap", False) and not column_width})
        for index in range(len(columns[0].cells) if columns else 0):
            table.add_row(*(column.cells[index] for column in columns),
                          **(self.rows[index] if index < len(self.rows) else {}))
        return table


def fitted(table: Table, *, leading: int = 1) -> FittedTable:
    """`table` as a FittedTable: its first `leading` columns label the rows (repeated in a continuation); its title,
    caption, box, styles and row sections kept. Every table devicebench prints goes through here or FittedTable."""
    columns = [FittedColumn(column.header if isinstance(column.header, str) else str(column.header),
                            list(column.cells), options={
                                "justify": column.justify, "style": column.style, "header_style": column.header_style,
                                "vertical": column.vertical, "no_wrap": column.no_wrap})
               for column in table.columns]
    _, right, _, left = table.padding
    return FittedTable(
        str(table.title or ""), columns[:leading], columns[leading:],
        {"box": table.box, "show_header": table.show_header, "show_lines": table.show_lines,
         "show_edge": table.show_edge, "pad_edge": table.pad_edge, "header_style": table.header_style,
         "style": table.style, "caption": table.caption},
        padding=left + right, edges=table.show_edge,
        rows=[{"style": row.style, "end_section": row.end_section} for row in table.rows])


def plain_text(text: str | RenderableType) -> Text:
    """A cell as the text it shows, markup left out."""
    return text if isinstance(text, Text) else Text.from_markup(str(text))


def longest_word(texts: Iterable[str | Text]) -> int:
    """The widest word (run of characters without a space) of `texts`, markup left out: the narrowest a column of
    them can be without cutting one."""
    return max((len(word) for text in texts for word in plain_text(text).plain.split()), default=1)


LABEL_MIN_WIDTH = 10  # a label longer than the screen allows folds, down to this width
FIGURE_ROOM = 12  # columns the labels leave for at least one figure beside them


def label_column(heading: str, cells: list[str]) -> FittedColumn:
    return FittedColumn(heading, list(cells))


def median_text(value: Spread | None, digits: int) -> str:
    return number_text(value.median if value else None, digits)


def row_label(row: Row, one_machine: bool) -> str:
    """The row's label cell: the device (with its machine when several), what sets it apart, its problems."""
    # names come from other machines' files: markup in them is text (what is added below is ours)
    label = escape((f"{row.device} ({row.differs_by})" if row.differs_by else row.device) if one_machine else row.label)
    if row.settings["batch_size_auto"] and "batch_size" not in row.differs_in:
        label += f" (batch {row.settings['batch_size']}, auto)"
    if row.settings["world_size"] > 1 and "world_size" not in row.differs_in:
        label += f" ({row.settings['world_size']} processes)"
    problems = sorted(set(row.statuses) - {"ok"})
    if problems:
        label += " [red](" + ", ".join(problems) + ")[/]"
    if row.flags:
        label += f" [bold red]({escape(flagged_text(row))})[/]"
    return label


def busy_text(row: Row) -> str:
    """How busy the device was while training: `73% GPU, 98% CPU`, or `190% CPU` (100% = one core); with several
    processes, their GPUs' mean and the least busy one's, and the CPU use of them all: `71% GPU (low 40%), 390% CPU`."""
    parts = []
    if row.device_utilization_percent is not None:
        lowest = row.lowest_rank_utilization_percent
        low = "" if lowest is None else f" (low {lowest.median:.0f}%)"
        parts.append(f"{row.device_utilization_percent.median:.0f}% GPU{low}")
    if row.process_cpu_percent is not None:
        parts.append(f"{row.process_cpu_percent.median:.0f}% CPU")
    return ", ".join(parts) or "—"


def tflops_text(row: Row) -> str:
    """Achieved TFLOP/s, to three significant digits (CPUs reach hundredths, GPUs hundreds), and the MFU where the
    device is calibrated: `0.23 (31% MFU)`; `implausible` beside a figure above the device's peak."""
    value, mfu = row.tflops, row.mfu
    if value is None:
        return "—"
    text = f"{value.median:.3g}" + (f" ({mfu.median:.0%} MFU)" if mfu is not None else "")
    return text + (" implausible" if any(flag.code == "above-peak" for flag in row.flags) else "")


def flagged_text(row: Row) -> str:
    """`flagged: above-peak, device-idle`: what the notes under the table explain; "" when nothing is flagged."""
    return "flagged: " + ", ".join(flag.code for flag in row.flags) if row.flags else ""


def waiting_text(row: Row) -> str:
    """`72% input-bound`: the median share of training spent waiting for batches, and the runs' verdict."""
    share, verdict = row.input_wait_share, row.input_verdict
    if share is None:
        return "—"
    text = f"{share.median:.0%}"
    if verdict == "input-bound":
        return f"[bold red]{text} input-bound[/]"
    return f"{text} {verdict}" if verdict else text


def speedup_text(row: Row) -> str:
    if row.baseline is row:
        return "1.00x (baseline)"
    if row.speedup is None:
        return "—"
    return ratio_text(row.speedup, " vs seed" if row.against_seed_mode else "")  # tuned mode's gain on its device


def ratio_text(value: Speedup, after: str = "") -> str:
    """`2.10x [1.90–2.31]`: a ratio of samples/s with its 95% interval, or `2.10x` where one sample gave none;
    `after` follows the ratio (` vs seed`)."""
    text = f"{value.ratio:.2f}x{after}"
    if value.low is None or value.high is None:
        return text
    return f"{text} [{value.low:.2f}–{value.high:.2f}]"


def row_notes(rows: list[Row]) -> list[str]:
    notes = []
    if any(row.settings["data_source"] == "synthetic" for row in rows):
        notes.append("SYNTHETIC DATA: speeds are real; accuracies cannot be compared with the published ones.")
    if all(run.settings.epochs < 2 for row in rows for run in row.runs):
        notes.append("No steady-state figures: epoch 1 is warm-up, so run at least 2 epochs (--epochs 2).")
    for note in dict.fromkeys(run.monitor_note for row in rows for run in row.runs if run.monitor_note):
        notes.append(f"Device utilisation and energy unknown: {note}")
    for row in rows:
        if row.speedup is None and row.baseline is not row and row.speedup_note:
            notes.append(f"{row.label}: no speedup: {row.speedup_note}")
        for run in row.runs:
            if run.error:
                notes.append(f"{row.label} repeat {run.repeat + 1}: {run.status}: {run.error}")
        for diagnosis in dict.fromkeys(run.input_diagnosis for run in row.runs if run.input_verdict == "input-bound"):
            notes.append(f"{row.label}: input-bound: {diagnosis}")
        cv = row.epoch_time_cv
        if cv is not None and cv > NOISY_EPOCH_TIME_CV:
            notes.append(f"{row.label}: noisy: steady epoch time varies {cv:.1%} across {row.epoch_time_cv_basis} "
                         f"(more than {NOISY_EPOCH_TIME_CV:.0%}): close other programs or use more repeats before "
                         f"trusting this row")
        if row.scaling_efficiency is not None:
            world = row.settings["world_size"]
            notes.append(f"{row.label}: scaling efficiency {row.scaling_efficiency:.0%}: {world} processes gave "
                         f"{row.speedup.ratio:.2f}x the throughput of one ({world:.0f}x would be perfect)"
                         + (": above 100%, so check that both rows were measured alike before trusting it"
                            if row.scaling_efficiency > 1 else ""))
        elif row.scaling_note:
            notes.append(f"{row.label}: no scaling efficiency against one process: {row.scaling_note}")
        if row.speedup is not None and "capped at" in row.speedup_note:
            notes.append(f"{row.label}: speedup {row.speedup_note.partition('; ')[2]}")
        for flag in row.flags:
            notes.append(f"{row.label}: FLAGGED {flag.code}: {flag.text}")
        for choices in dict.fromkeys(tuning_text(run) for run in row.runs if run.settings.mode == "tuned"):
            notes.append(f"{row.label}: tuned: {choices}")
        choosing_s = sum(run.tuning_s or 0.0 for run in row.runs)
        if choosing_s > 0:  # time that is in no figure of the table: say how much there was
            notes.append(f"{row.label}: {choosing_s:.1f} s choosing before training (tuned trial, --batch-size auto "
                         "search), in none of the times above")
    return notes


def tuning_text(run: RunRecord) -> str:
    """What tuned mode chose for a run, and what its trial measured: 'bf16, channels last, fused optimizer
    (trial samples/s: fp32 1,953, bf16 2,810; kept bf16)'."""
    settings = run.settings
    chosen = [settings.precision] + [name.replace("_", " ") for name in TUNING_CHOICES if getattr(settings, name)]
    return ", ".join(chosen) + (f" ({run.tuning_note})" if run.tuning_note else "")


TUNING_CHOICES = tuple(field.name for field in dataclasses.fields(Tuning) if field.name != "precision")  # on/off


# --- sweeps ------------------------------------------------------------------------------------------------


def swept_value(row: Row, name: str) -> str:
    """The value of a swept setting (batch_size, workers, or a --set parameter) in `row`."""
    if name in ("batch_size", "workers", "mode"):
        return str(row.settings[name])
    overrides = row.settings["overrides"]
    if name in overrides:
        return str(overrides[name])
    entry = known_workload(row.workload)
    return "—" if entry is None else str(entry.defaults.get(name, "—"))  # the point kept the workload's default


def sweep_tables(rows_by_workload: dict[str, list[Row]], swept: list[str], *, wide: bool = False
                 ) -> list[RenderableType]:
    """Per workload and device, one line per grid point: throughput, waiting, verdict, and the ratio to the
    baseline device at the same point; then, once, the legend of the columns shown."""
    tables: list[RenderableType] = []
    shown: dict[Column, None] = {}
    for name, rows in rows_by_workload.items():
        for device in dict.fromkeys(row.device for row in rows):
            own = [row for row in rows if row.device == device]
            columns = shown_columns(own, wide)
            shown.update(dict.fromkeys(columns))
            points = {setting.replace("_", " "): [swept_value(row, setting) for row in own] for setting in swept}
            problems = [sorted(set(row.statuses) - {"ok"}) for row in own]
            if len({tuple(row.epoch_steps) for row in own}) > 1:  # batch sizes swept: epochs of other lengths
                points["Steps"] = [span_text(row.epoch_steps) if row.epoch_steps else "—" for row in own]
            if any(problems):  # a point that failed says so beside its values
                points["Runs"] = ["[red]" + ", ".join(found) + "[/]" if found else "ok" for found in problems]
            title = (f"[bold]{escape(name)}[/] on {escape(device)} ({escape(own[0].device_name)}): "
                     f"{length_text(own)}, a row per grid point")
            tables.append(figure_table(title, points, own, columns))
        tables += [Text(note, style="yellow") for note in row_notes(rows)]
    all_rows = [row for rows in rows_by_workload.values() for row in rows]
    return tables + legend(list(shown), all_rows)


# --- history -----------------------------------------------------------------------------------------------

STATUS_STYLES = {"ok": "green", "running": "yellow", "interrupted": "yellow"}  # the failures are red


def history_table(results: list[Result], path: Path, *, wide: bool = False) -> FittedTable:
    """`devicebench history`: one line per stored run; epochs, epoch time, data and batch with --wide. Too wide for
    the terminal, the columns that do not fit follow under the run ids."""
    runs = [(result, run, run.summary()) for result in results for run in result.runs]
    text = {"justify": "left", "no_wrap": True}
    number = {"justify": "right", "no_wrap": True}
    words = {"justify": "left"}  # names wrap at their spaces; in a narrow terminal the time goes under the date
    wanted: list[tuple[str, dict[str, Any], bool, Callable[[Result, RunRecord, Any], str | Text]]] = [
        ("Started (UTC)", words, True, lambda result, run, summary: run.started_utc[:16].replace("T", " ")),
        ("Machine", words, True, lambda result, run, summary: escape(result.machine["machine_name"])),
        ("Workload", words, True, lambda result, run, summary: escape(run.workload)),
        ("Device", words, True, lambda result, run, summary: escape(run.device)),
        ("Status", text, True, lambda result, run, summary: Text(run.status, style=STATUS_STYLES.get(run.status,
                                                                                                     "red"))),
        ("Epochs", text, wide, lambda result, run, summary: f"{summary.epochs_completed}/{run.settings.epochs}"),
        ("Samples/s", number, True, lambda result, run, summary: rate_text(summary.steady_samples_per_s)),
        ("Epoch s", number, wide, lambda result, run, summary: number_text(summary.steady_epoch_time_s, 2)),
        ("Test acc", number, True, lambda result, run, summary: percent_text(summary.final_test_accuracy)),
        ("Data", text, wide, lambda result, run, summary: run.settings.data_source),
        ("Batch", number, wide, lambda result, run, summary: str(run.settings.batch_size)),
    ]
    columns = [FittedColumn(heading, [cell(result, run, summary) for result, run, summary in runs], options=options)
               for heading, options, shown, cell in wanted if shown]
    run_ids = FittedColumn("Run id", [run.run_id[:8] for _, run, _ in runs], options=text)  # to the minute above: the
    count = len(runs)                                                                  # id tells runs apart
    return FittedTable(
        f"{count} run{'' if count == 1 else 's'} in {escape(str(path))}", [run_ids], columns,
        # a rule under the header and a single space between columns
        {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False,
         "caption": ("Samples/s and epoch s: medians" if wide else "Samples/s: median")
         + " of the steady epochs, warm-up left out. Test acc: after the last epoch."
         + ("" if wide else " --wide adds the epochs, epoch time, data and batch."), "caption_justify": "left"},
        padding=0, edges=False)


# --- reproduce ---------------------------------------------------------------------------------------------


def reproduction_table(reproductions: list[Reproduction]) -> FittedTable:
    """Published against measured here, a pair of lines per workload."""
    table = Table(title="Published vs measured here", title_justify="left", show_lines=True)
    for column in ("Workload", "", "Hardware", "CPU samples/s", "GPU samples/s", "Speedup", "Accuracy"):
        table.add_column(column, justify="left" if column in ("Workload", "", "Hardware") else "right",
                         overflow="fold")
    for entry in reproductions:
        published = entry.published
        table.add_row(
            f"[bold]{entry.workload.name}[/] ({entry.workload.seed})",
            "published",
            published.hardware,
            number_text(published.samples_per_s.get("cpu"), 0),
            number_text(published.samples_per_s.get("gpu"), 0),
            "—" if published.speedup is None else f"{published.speedup:g}x ({published.basis})",
            percent_text(published.accuracy) + (f" {published.accuracy_kind}" if published.accuracy else ""),
        )
        measured_speedup = "— (no GPU here)" if entry.measured_speedup is None else (
            f"{entry.measured_speedup:.2f}x (steady samples/s)"
            + (f"; end to end {entry.measured_end_to_end_ratio:.2f}x" if entry.measured_end_to_end_ratio else ""))
        data = f"[bold yellow]{entry.data_sources} data[/]" if "synthetic" in entry.data_sources else "real data"
        table.add_row(
            "",
            "measured here",
            f"{entry.measured_hardware}; {data}",
            rate_text(entry.measured_cpu_samples_per_s),
            rate_text(entry.measured_gpu_samples_per_s),
            measured_speedup,
            percent_text(entry.measured_accuracy) + (f" {published.accuracy_kind}" if entry.measured_accuracy else ""),
        )
    return fitted(table)


def batch_and_length(batch: int, length: int | None) -> str:
    """`256`, or `32 x 384` for a batch of 32 sequences of 384 tokens."""
    return f"{batch:,}" if length is None else f"{batch:,} x {length:,}"


def record_table(comparison: RecordComparison) -> Group:
    """A reference model's published figures (the record) beside what each device measured here, each in the unit
    it was published in; the sources numbered beneath, and what was measured here."""
    from devicebench.reproduce import (  # imports torch: only where a reproduction is shown
        factor_text,
        in_unit,
    )

    workload, measured = comparison.workload, comparison.measured
    table = Table(title=f"{workload.name}: the public record beside this machine", title_justify="left")
    units = sorted({figure.unit for figure in comparison.figures})
    one_unit = units[0] if len(units) == 1 else None  # then said once, in the heading
    for column in ("GPU", "Precision", "Batch", "Software, data", f"Published {one_unit or ''}".strip()):
        table.add_column(column, justify="right" if column.startswith(("Batch", "Published")) else "left")
    for row in measured:
        table.add_column(f"÷ {row.device}", justify="right")
    sources: dict[str, int] = {}
    for figure in comparison.figures:
        number = sources.setdefault(figure.source, len(sources) + 1)
        gpus = f" x{figure.gpus}" if figure.gpus > 1 else ""
        ratios = []
        for row in measured:
            here = in_unit(workload, row, figure.unit)
            ratios.append("—" if not here else factor_text(figure.per_gpu_throughput / here))
        table.add_row(f"{figure.gpu}{gpus} [{number}]",
                      figure.precision + (" (TF32)" if figure.tf32 == "on" and figure.precision == "fp32" else ""),
                      batch_and_length(figure.batch_per_gpu, figure.sequence_length),
                      f"{figure.framework} {figure.framework_version}".strip() + f"; {figure.data}",
                      f"{figure.throughput:,.0f}" + ("" if one_unit else f" {figure.unit}"), *ratios)
    lines: list[RenderableType] = [fitted(table)]
    for row in measured:
        settings = row.runs[0].settings if row.runs else None
        shown = [f"{value:,.1f} {unit}" for unit in units
                 if (value := in_unit(workload, row, unit)) is not None]
        batch = f" at batch {batch_and_length(settings.batch_size, comparison.length)}" if settings else ""
        lines.append(Text(f"Measured here: {row.device_name} ({row.device}): {', '.join(shown)}{batch}, "
                          f"{row.settings['data_source']} data, {row.settings['mode']} mode.", style="bold"))
    if not comparison.figures:
        lines.append(Text(f"The record has no figures of {workload.name} at the sequence length trained here."))
    lengths = sorted({figure.sequence_length for figure in comparison.figures
                      if figure.sequence_length not in (None, comparison.length)})
    if lengths:
        lines.append(Text(f"Rows at {' and '.join(f'{length:,}' for length in lengths)} tokens a sequence, this run "
                          f"at {comparison.length:,}: their tokens/s compare only roughly (attention's share of the "
                          "work grows with the length)."))
    for length, count in comparison.other_lengths.items():
        lines.append(Text(f"Left out: {count} published row{'s' if count > 1 else ''} at sequence length {length}, "
                          f"a different amount of work a sample: --set sequence_length={length} compares with "
                          f"{'them' if count > 1 else 'it'}."))
    if comparison.not_shown:
        lines.append(Text(f"Shown: the fastest single-GPU figure of each GPU and precision; {comparison.not_shown} "
                          "more rows (several GPUs, other frameworks, batches or years): --every-row."))
    lines.append(Text("Published figures are other people's measurements, on other machines and software; ÷ says "
                      "how much faster that GPU ran this model (per GPU) than this device, at the batch each used."))
    lines += [Text(f"[{number}] {source}") for source, number in sources.items()]
    return Group(*lines)
