"""Rich tables for the terminal: the machine, the workloads, a run's results with the speedup, the sweeps and the
history. Each fits the screen through fitting.py and writes its figures through text.py; the plan a dry run shows
is plan.py's, and the tables of `devicebench reproduce` are reproduction.py's.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 30
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from devicebench.report.fitting import FittedColumn, FittedTable, fitted, label_column
from devicebench.report.text import (
    batch_text,
    busy_text,
    cost_vs_baseline_text,
    device_kind,
    epoch_time_text,
    flagged_text,
    known_workload,
    length_text,
    median_text,
    number_text,
    percent_text,
    rate_text,
    row_notes,
    span_text,
    speedup_text,
    swept_value,
    target_text,
    tflops_text,
    waiting_text,
)
from devicebench.results.compare import Row, compare
from devicebench.results.pooling import own_choices
from devicebench.results.schema import Result
from devicebench.results.stats import INTERVAL_NOTE

if TYPE_CHECKING:  # it imports torch: history and compare's tables must load without it
    from devicebench.workloads import Workload

BASELINE_DEVICE = "cpu"


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
        defaults = ", ".join(
            f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
            for key, value in entry.defaults.items()
        )
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
    return (
        f"the public record: {len(figures)} figures on {gpus} GPU{'s' if gpus > 1 else ''} "
        f"(devicebench reproduce {workload})"
    )


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


RESULT_COLUMNS = (
    Column(
        "Samples/s",
        "samples/s: median over the steady epochs (after the warm-up one) of every repeat",
        lambda row: rate_text(row.samples_per_s.median if row.samples_per_s else None),
    ),
    Column(
        "Speedup",
        f"speedup: ratio of median samples/s against the baseline [{INTERVAL_NOTE}]",
        lambda row: speedup_text(row),
    ),
    Column(
        "Test acc",
        "test acc: after the last epoch, median of the repeats",
        lambda row: percent_text(row.test_accuracy.median if row.test_accuracy else None),
    ),
    Column(
        "Waiting",
        "waiting: the share of training spent waiting for the next batch, and the verdict "
        "(input-bound: faster input would pay; compute-bound: the device itself is the limit)",
        lambda row: waiting_text(row),
    ),
    Column(
        "To target s",
        "to target s: median seconds of training (evaluation left out) until the test accuracy "
        "first reached --target-accuracy; (1 of 2): the runs that reached it",
        target_text,
        present=lambda rows: any(row.targeted_runs for row in rows),
    ),
    Column("Epoch s", "epoch s: steady median [min–max]", epoch_time_text, compact=_never),
    Column("ms/step", "ms/step: median training step", lambda row: median_text(row.step_time_ms, 2), compact=_never),
    Column(
        "TFLOP/s",
        "TFLOP/s: the matrix products and convolutions of forward and backward per sample "
        "(engine/flops.py) x samples/s, and as a share of the calibrated matmul peak of every device "
        "that trained, at the run's precision (MFU; `devicebench calibrate`)",
        lambda row: tflops_text(row),
        compact=_above_peak,
    ),
    Column(
        "Busy",
        "busy: the device's utilisation (with several processes, their GPUs' mean and the least busy "
        "one's) and the training processes' CPU use while training (100% CPU = one core)",
        lambda row: busy_text(row),
        compact=_never,
    ),
    Column(
        "Warm-up s",
        "warm-up s: the first epoch, median",
        lambda row: median_text(row.warmup_epoch_s, 2),
        compact=_never,
    ),
    Column(
        "End-to-end s",
        "end-to-end s: model creation to the end of the last epoch, evaluation included",
        lambda row: median_text(row.end_to_end_s, 1),
        compact=_never,
    ),
    Column(
        "Published samples/s",
        "published samples/s: the seed's figure for that kind of device",
        _published_samples_text,
        compact=_never,
        present=_has_published,
    ),
    # --price asks for the cost: shown without --wide too
    Column(
        "Cost/1M samples",
        "cost/1M samples: at the steady rate and the price per hour",
        lambda row: number_text(row.cost_per_million_samples, 3),
        present=lambda rows: any(row.price_per_hour is not None for row in rows),
    ),
    Column(
        "Cost vs baseline",
        "",
        cost_vs_baseline_text,
        present=lambda rows: any(row.price_per_hour is not None for row in rows),
    ),
    Column(
        "Energy Wh",
        "energy Wh: what the device drew while training, median per run",
        lambda row: median_text(row.energy_wh, 2),
        compact=_never,
        present=lambda rows: any(row.energy_wh is not None for row in rows),
    ),
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
    known = {name: known_workload(name) for name in rows_by_workload} if wide else {}  # the registry imports torch
    published = [
        f"{name} published: {published_text(workload)}".replace("\n", "; ")
        for name, workload in known.items()
        if workload is not None and workload.published is not None
    ]
    return parts + legend(list(shown), all_rows, published)


def one_device(rows_by_workload: dict[str, list[Row]]) -> bool:
    """Whether every row is of one machine's one device (a session on a machine with only a CPU): then no row has a
    speedup to show, and one table holds every workload (`one_device_tables`)."""
    return len({(row.machine_id, row.device) for rows in rows_by_workload.values() for row in rows}) == 1


def one_device_tables(rows_by_workload: dict[str, list[Row]], *, wide: bool = False) -> list[RenderableType]:
    """Every workload of one device in one table, a row each (not a one-row table each reading `1.00x (baseline)`),
    then the rows' notes and, once, the legend."""
    rows = [row for workload_rows in rows_by_workload.values() for row in workload_rows]
    columns = [column for column in shown_columns(rows, wide) if column.heading not in ("Speedup", "Cost vs baseline")]
    labels = [escape(row.workload) + row_label(row, True).removeprefix(escape(row.device)) for row in rows]
    # what each workload's own table would have had as its title: its batch, epochs and data (the data once, in the
    # title, where every workload had the same: a line less a row)
    lengths = [_workload_title(row.workload, [row]).partition(": ")[2].partition("; seed")[0] for row in rows]
    one_source = len({row.settings["data_source"] for row in rows}) == 1
    if one_source:
        lengths = [length.rpartition(", ")[0] for length in lengths]
    data = f" on {_workload_title(rows[0].workload, rows[:1]).partition('; seed')[0].rpartition(', ')[2]}"
    title = (
        f"[bold]Every workload on {escape(rows[0].device)}[/] ({escape(rows[0].device_name)})"
        + (data if one_source else "")
        + ": the only device here, so no speedup is measured"
    )
    table = figure_table(
        title, {"Workload": labels, "Batch, epochs" + ("" if one_source else ", data"): lengths}, rows, columns
    )
    notes = dict.fromkeys(  # a row's notes name its device: here, its workload too; a note of every one, once
        f"{name}: {note}" if note.startswith(tuple(row.label for row in workload_rows)) else note
        for name, workload_rows in rows_by_workload.items()
        for note in row_notes(workload_rows)
    )
    return [table, *(Text(note, style="yellow") for note in notes), *legend(columns, rows)]


def legend(columns: list[Column], rows: list[Row], extra: Iterable[str] = ()) -> list[RenderableType]:
    """What the shown columns hold, in one paragraph, and each device's name: printed once, after the tables."""
    clauses = [column.legend for column in RESULT_COLUMNS if column in columns and column.legend]
    lines = ([clauses[0][0].upper() + "; ".join(clauses)[1:] + "."] if clauses else []) + [
        *dict.fromkeys(f"{row.machine_name}/{row.device}: {row.device_name}" for row in rows),
        *extra,
    ]
    return [Text(line, style="dim") for line in lines]


TEXT_WIDTH = 200  # columns of `comparison_text`: the widest table without folding its cells


def comparison_text(results: list[Result]) -> str:
    """The comparison tables of `results` as plain text (`Result.table()`), every column shown."""
    console = Console(width=TEXT_WIDTH, record=True, file=io.StringIO(), color_system=None)
    for table in comparison_tables(compare(results), wide=True):
        console.print(table)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


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
    return f"[bold]{escape(name)}[/]: {batches}, {length_text(rows)}, {data}" + (
        f"; seed experiment {escape(seed)}" if seed else ""
    )


def _workload_table(name: str, rows: list[Row], columns: list[Column]) -> FittedTable:
    one_machine = len({row.machine_id for row in rows}) == 1
    return figure_table(
        _workload_title(name, rows),
        {"Device" if one_machine else "Machine/device": [row_label(row, one_machine) for row in rows]},
        rows,
        columns,
    )


def figure_table(title: str, leading: dict[str, list[str]], rows: list[Row], columns: list[Column]) -> FittedTable:
    """A table of `rows`: the `leading` columns (heading: a cell per row), then `columns`, right-aligned figures."""
    cells = [[column.cell(row) for row in rows] for column in columns]
    return FittedTable(
        title,
        [label_column(heading, values) for heading, values in leading.items()],
        [FittedColumn(column.heading, values, options={"justify": "right"}) for column, values in zip(columns, cells)],
    )


def row_label(row: Row, one_machine: bool) -> str:
    """The row's label cell: the device (with its machine when several), what sets it apart, its problems."""
    # names come from other machines' files: markup in them is text (what is added below is ours)
    label = escape((f"{row.device} ({row.differs_by})" if row.differs_by else row.device) if one_machine else row.label)
    if row.settings["batch_size_auto"] and "batch_size" not in row.differs_in:
        label += f" (batch {row.settings['batch_size']}, auto)"
    if row.settings["world_size"] > 1 and "world_size" not in row.differs_in:
        label += f" ({row.settings['world_size']} processes)"
    choices = own_choices(row.settings, row.baseline.settings) if row.speedup and row.baseline else ""
    if choices:  # beside the speedup: a ratio of two devices each at its own precision or batch
        label += f" ({choices}: each at its best)"
    problems = sorted(set(row.statuses) - {"ok"} - set(row.differs_in))  # an interrupted row apart says so once
    if problems:
        label += " [red](" + ", ".join(problems) + ")[/]"
    if row.flags:
        label += f" [bold red]({escape(flagged_text(row))})[/]"
    return label


# --- sweeps ------------------------------------------------------------------------------------------------


def sweep_tables(
    rows_by_workload: dict[str, list[Row]], swept: list[str], *, wide: bool = False
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
            title = (
                f"[bold]{escape(name)}[/] on {escape(device)} ({escape(own[0].device_name)}): "
                f"{length_text(own)}, a row per grid point"
            )
            tables.append(figure_table(title, points, own, columns))
        tables += [Text(note, style="yellow") for note in row_notes(rows)]
    all_rows = [row for rows in rows_by_workload.values() for row in rows]
    return tables + legend(list(shown), all_rows)
