"""One self-contained HTML report: every workload's charts and numbers, and the machines behind them.

The page needs nothing but itself: CSS inline, charts inlined as base64 PNG, no script, no external URL, so it
opens offline and can be mailed. Every number comes from `devicebench.results.compare` rows, formatted as the
terminal tables format them. jinja2 escapes everything, because machine names, hostnames, errors and even
workload names can come from imported files.

    devicebench report --out report.html --png charts/
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicebench import files
from devicebench.engine.timing import wall_clock_utc
from devicebench.errors import DevicebenchError
from devicebench.report.charts import Chart, file_stem, keep_matplotlib_out_of_a_guessed_home
from devicebench.report.estimate_plots import estimate_chart, run_line
from devicebench.report.sweep_plots import sweep_charts
from devicebench.report.text import (
    batch_text,
    busy_text,
    flagged_text,
    known_workload,
    length_text,
    median_text,
    number_text,
    percent_text,
    rate_text,
    ratio_text,
    row_notes,
    speedup_text,
    steps_label,
    target_text,
    tflops_text,
)
from devicebench.report.workload_plots import summary_chart, workload_charts
from devicebench.results.compare import DEFAULT_BASELINE, Row, compare, tuned_gains
from devicebench.results.prices import Prices
from devicebench.results.record import published_figures
from devicebench.results.schema import Result, write_atomically
from devicebench.results.stats import INTERVAL_NAME, INTERVAL_NOTE, Spread
from devicebench.workloads import SEED_EXPERIMENTS, Published

if TYPE_CHECKING:
    from devicebench.estimate.against_measured import EstimatedAgainstMeasured  # made a layer above, drawn here

INSTALL_HINT = "pip install 'devicebench[report]'"
MIB_PER_GIB = 1024


class ReportDependencyError(DevicebenchError, RuntimeError):
    """matplotlib or jinja2 is missing; the message says how to install them."""


@dataclass
class Cell:
    text: str
    note: str = ""  # a smaller second line: where an interval comes from, why there is no number
    css_class: str = ""


@dataclass
class WorkloadSection:
    name: str
    anchor: str  # the section's id, for the contents list
    seed: str
    seed_title: str
    summary: str  # the model in words; empty for a workload this devicebench does not know
    published: list[tuple[str, str]]  # (what, figure) as the seed's post gave them, or the record holds them
    published_title: str  # where those figures come from: the seed's post, or the public record
    epoch_lengths: str  # how long the measured epochs were, so they are not read against full published epochs
    charts: list[Chart]
    sweeps: list[Chart]  # throughput (and the ratio to the baseline) against each swept setting; empty if none
    columns: list[tuple[str, str]]  # (heading, what it holds in small print)
    rows: list[list[Cell]]
    notes: list[str]  # synthetic data, errors, missing baselines: read before trusting a row


def write_report(
    results: list[Result],
    out: Path,
    *,
    baseline: str = DEFAULT_BASELINE,
    prices: Prices | None = None,
    png_dir: Path | None = None,
    estimated: EstimatedAgainstMeasured | None = None,
    pool_interrupted: bool = False,
) -> Path:
    """Write the HTML report of `results` to `out` (and every chart to `png_dir` as PNG); returns `out`.
    `estimated`: the GPU runs of `results` beside what the roofline estimated for them
    (devicebench.estimate.against_measured, a layer above this one, makes it), drawn in a section of their own.
    `pool_interrupted`: interrupted runs join the finished ones' rows (results/compare.py)."""
    environment = _template_environment()
    rows_by_workload = compare(results, baseline=baseline, prices=prices, pool_interrupted=pool_interrupted)
    # `devicebench sweep` stores its grid as one session whose config lists every point (planning.plan)
    grid_runs = {run.run_id for result in results if "sweep" in result.config for run in result.runs}
    sections = [_workload_section(name, rows, grid_runs) for name, rows in rows_by_workload.items()]
    summary = summary_chart(rows_by_workload)
    against = estimate_chart(estimated) if estimated is not None else None
    charts = (
        ([summary] if summary else [])
        + [chart for section in sections for chart in (*section.charts, *section.sweeps)]
        + ([against] if against else [])
    )
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        for chart in charts:
            files.write_atomically(png_dir / f"{chart.slug}.png", chart.png)  # no half chart, no device replaced
    baseline_device = baseline.rpartition("/")[2]
    page = environment.get_template("report.html.j2").render(
        generated_utc=wall_clock_utc(),
        run_count=sum(len(result.runs) for result in results),
        session_count=len(results),
        machines=_machines(results),
        baseline=baseline,
        # every row on the baseline's own device (a CPU-only machine): no speedup can exist, rather than a missing one
        only_baseline_device=baseline_device
        if all(row.device == baseline_device for rows in rows_by_workload.values() for row in rows)
        else "",
        tuned_gains=_tuned_gain_lines(rows_by_workload),
        prices=_price_lines(prices),
        summary=summary,
        sections=sections,
        estimated=against,
        estimated_lines=tuple(run_line(found) for found in estimated.found) if estimated is not None else (),
        data_uri=_data_uri,
        interval_name=INTERVAL_NAME,
        interval_note=INTERVAL_NOTE,
    )
    write_atomically(out, page)  # a crash mid-write leaves the previous report, not half a page
    return out


def _template_environment() -> Any:
    keep_matplotlib_out_of_a_guessed_home()
    try:
        import jinja2
        import matplotlib  # noqa: F401  (imported here only to fail early, with the install hint)
    except ImportError as error:
        raise ReportDependencyError(
            f"the HTML report needs {error.name}, which is not installed: {INSTALL_HINT}"
        ) from None
    return jinja2.Environment(
        loader=jinja2.PackageLoader("devicebench.report", "templates"),
        autoescape=True,  # always: names, hostnames and errors come from other machines' files
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _data_uri(chart: Chart) -> str:
    return "data:image/png;base64," + base64.b64encode(chart.png).decode("ascii")


def _tuned_gain_lines(rows_by_workload: dict[str, list[Row]]) -> list[str]:
    """A sentence per tuned row with a seed-mode row of the same work beside it: how much tuned mode gained, in
    samples/s (epochs of either mode may have had other lengths: then the labels say how many steps)."""
    lines = []
    for name, rows in rows_by_workload.items():
        for found in tuned_gains(rows):
            tuned, seed = found.tuned, found.seed
            label = steps_label if tuned.epoch_steps != seed.epoch_steps else (lambda row: row.label)
            lines.append(
                f"{name}: {label(tuned)} trained {ratio_text(found.gain)} the samples/s of {label(seed)}: "
                f"{median_text(tuned.samples_per_s, 0)} against {median_text(seed.samples_per_s, 0)}"
            )
    return lines


# --- one workload ------------------------------------------------------------------------------------------


def _workload_section(name: str, rows: list[Row], grid_runs: set[str]) -> WorkloadSection:
    """`grid_runs`: the ids of the runs that `devicebench sweep` made; the rows holding them get sweep charts."""
    entry = known_workload(name)
    seed = (entry.seed if entry else rows[0].runs[0].seed_experiment) or ""
    priced = any(row.price_per_hour is not None for row in rows)
    energy = any(row.energy_wh is not None for row in rows)
    targeted = any(row.targeted_runs for row in rows)
    return WorkloadSection(
        name=name,
        anchor="workload-" + file_stem(name),
        seed=seed,
        seed_title=SEED_EXPERIMENTS.get(seed, "not a seed experiment this devicebench knows")
        if seed
        else (
            "A reference model, on which the field's GPU tables are measured"
            if entry and not entry.in_suites
            else "Not a seed experiment: "
            + (entry.origin if entry and entry.origin != "devicebench" else "your own model")
        ),
        summary=entry.summary if entry else "",
        published=(
            _published_figures(entry.published)
            if entry and entry.published
            else _record_figures(name)
            if entry and not entry.in_suites
            else []
        ),
        published_title=(
            "Published figures (the seed's post, not measured here)"
            if entry and entry.published
            else "Published figures (the public record, not measured here)"
        ),
        epoch_lengths=length_text(rows),  # what the epochs really had
        charts=workload_charts(name, rows, entry.published if entry else None),
        sweeps=sweep_charts(name, [row for row in rows if any(run.run_id in grid_runs for run in row.runs)]),
        columns=_columns(priced, energy, targeted),
        rows=[_cells(row, priced, energy, targeted) for row in rows],
        notes=row_notes(rows),
    )


def _published_figures(published: Published) -> list[tuple[str, str]]:
    figures = [("Hardware", published.hardware)]
    if published.speedup is not None:
        figures.append(("GPU speedup", f"{published.speedup:g}x ({published.basis})"))
    if published.accuracy is not None:
        figures.append((f"{published.accuracy_kind.capitalize()} accuracy", percent_text(published.accuracy)))
    for what, by_kind, digits in (
        ("Steady epoch s", published.epoch_time_s, 1),
        ("End-to-end s", published.end_to_end_s, 0),
        ("Samples/s", published.samples_per_s, 0),
    ):
        if by_kind:
            figures.append(
                (what, ", ".join(f"{kind.upper()} {number_text(value, digits)}" for kind, value in by_kind.items()))
            )
    return figures


def _record_figures(name: str) -> list[tuple[str, str]]:
    """What the public record holds of reference model `name`: how much, and its fastest and slowest single-GPU
    figures; `devicebench reproduce` sets every GPU's beside this machine's."""
    figures = published_figures(name)
    single = sorted((figure for figure in figures if figure.gpus == 1), key=lambda figure: figure.throughput)
    if not single:
        return []
    gpus = sorted({figure.gpu for figure in figures})
    return [
        (
            "The public record",
            f"{len(figures)} figures on {len(gpus)} GPUs ({', '.join(gpus)}); devicebench "
            f"reproduce {name} sets each GPU's beside this machine's (docs/record.md)",
        ),
        ("Fastest single-GPU figure", single[-1].describe()),
        ("Slowest single-GPU figure", single[0].describe()),
    ]


def _columns(priced: bool, energy: bool, targeted: bool = False) -> list[tuple[str, str]]:
    """(heading, what it holds in small print) of a workload's table."""
    # headings wrap at spaces to keep the table on screen; U+2011, a hyphen that never breaks, keeps "warm-up" whole
    columns = [
        ("Row", "mode, batch, threads"),
        ("Machine", "device"),
        ("Epoch s", "median [min–max]"),
        ("Samples/s", "median"),
        ("ms/step", "median"),
        ("TFLOP/s", "and MFU"),
        ("Busy", "while training"),
        ("Warm\u2011up s", "epoch 1"),
        ("End\u2011to\u2011end s", "median"),
        ("Test acc", "final, median"),
        *([("To target s", "training, median")] if targeted else []),
        ("Speedup", f"[{INTERVAL_NAME}]"),
        ("Data", ""),
        ("Runs", "statuses"),
    ]
    columns += (
        [("Cost/1M samples", "at the price/h"), ("Cost/run", "end to end"), ("Cost", "vs baseline")] if priced else []
    )
    columns += [("Energy Wh", "per run")] if energy else []
    return columns


# --- in a notebook -----------------------------------------------------------------------------------------


def comparison_html(results: list[Result]) -> str:
    """The comparison as plain HTML tables, a table per workload with the report's columns and notes: how Jupyter
    shows a Result. No charts, and no jinja2 or matplotlib needed."""
    parts = []
    for name, rows in compare(results).items():
        priced = any(row.price_per_hour is not None for row in rows)
        energy = any(row.energy_wh is not None for row in rows)
        targeted = any(row.targeted_runs for row in rows)
        head = "".join(
            f"<th>{escape(heading)}<br><small>{escape(detail)}</small></th>"
            for heading, detail in _columns(priced, energy, targeted)
        )
        body = "".join(
            "<tr>" + "".join(_cell_html(cell) for cell in _cells(row, priced, energy, targeted)) + "</tr>"
            for row in rows
        )
        notes = "".join(f"<p><small>{escape(note)}</small></p>" for note in row_notes(rows))
        parts.append(
            f"<h4>{escape(name)}</h4><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}"
        )
    return "\n".join(parts) or "<p>No runs.</p>"


def _cell_html(cell: Cell) -> str:
    note = f"<br><small>{escape(cell.note)}</small>" if cell.note else ""
    return f"<td>{escape(cell.text)}{note}</td>"


def _cells(row: Row, priced: bool, energy: bool, targeted: bool = False) -> list[Cell]:
    synthetic = row.settings["data_source"] == "synthetic"
    cells = [
        Cell(
            row.label,
            note=f"{row.settings['mode']} mode, {batch_text(row.settings['batch_size'])}"
            f"{' (auto)' if row.settings['batch_size_auto'] else ''}, {row.settings['threads']} threads"
            + (f"; {flagged_text(row)} (see the notes)" if row.flags else ""),
            css_class="label flagged" if row.flags else "label",
        ),
        Cell(row.machine_name, note=f"{row.device_name} ({row.device})", css_class="text"),
        _spread_cell(row.epoch_time_s),
        Cell(rate_text(row.samples_per_s.median if row.samples_per_s else None)),
        Cell(median_text(row.step_time_ms, 2)),
        Cell(tflops_text(row), css_class="problem" if "implausible" in tflops_text(row) else ""),
        Cell(busy_text(row)),
        Cell(median_text(row.warmup_epoch_s, 2)),
        Cell(median_text(row.end_to_end_s, 1)),
        Cell(percent_text(row.test_accuracy.median if row.test_accuracy else None)),
        *([_target_cell(row)] if targeted else []),
        _speedup_cell(row),
        Cell("SYNTHETIC" if synthetic else row.settings["data_source"], css_class="synthetic" if synthetic else ""),
        _runs_cell(row),
    ]
    if priced:
        ratio = row.cost_vs_baseline
        price = "" if row.price_per_hour is None else f"at {row.price_per_hour:g}/h"
        cells += [
            Cell(number_text(row.cost_per_million_samples, 3), note=price),
            Cell(number_text(row.cost_per_run, 4)),
            Cell("—" if ratio is None else f"{ratio:.3g}x"),
        ]
    if energy:
        cells.append(Cell(median_text(row.energy_wh, 2)))
    return cells


def _target_cell(row: Row) -> Cell:
    targets = sorted({run.target_accuracy for run in row.targeted_runs if run.target_accuracy is not None})
    return Cell(
        target_text(row),
        note=("to " + ", ".join(percent_text(target) for target in targets)) if targets else "no target set",
    )


def _spread_cell(value: Spread | None) -> Cell:
    if value is None:
        return Cell("—", note="no steady-state epochs")
    return Cell(f"{value.median:,.2f}", note=f"[{value.low:,.2f}–{value.high:,.2f}]", css_class="spread")


def _speedup_cell(row: Row) -> Cell:
    text = speedup_text(row)
    if row.baseline is row:
        return Cell(text, css_class="baseline")
    baseline = row.baseline  # there is one wherever there is a speedup
    note = row.speedup_note if row.speedup is None or baseline is None else f"vs {baseline.label}; {row.speedup_note}"
    return Cell(text, note=note, css_class="" if row.speedup else "missing")


def _runs_cell(row: Row) -> Cell:
    statuses = ", ".join(f"{status} {count}" for status, count in sorted(row.statuses.items()))
    repeats = len({run.repeat for run in row.runs})
    return Cell(
        f"{len(row.runs)}",
        note=f"{repeats} repeat{'s' if repeats != 1 else ''}; {statuses}",
        css_class="" if set(row.statuses) == {"ok"} else "problem",
    )


# --- the machines ------------------------------------------------------------------------------------------


def _machines(results: Sequence[Result]) -> list[dict[str, str]]:
    """One entry per machine id, described from its first session's fingerprint; versions from every session."""
    machines: dict[str, dict[str, Any]] = {}
    versions: dict[str, set[str]] = {}
    for result in results:
        machine_id = result.machine["machine_id"]
        machines.setdefault(machine_id, result.machine)
        versions.setdefault(machine_id, set()).add(result.devicebench_version)
    return [_machine_description(machine, sorted(versions[machine_id])) for machine_id, machine in machines.items()]


def _machine_description(machine: dict[str, Any], devicebench_versions: list[str]) -> dict[str, str]:
    cpu = machine.get("cpu") or {}
    memory = machine.get("memory_total_mib")
    accelerators = [
        f"{entry.get('device', '?')}: {entry.get('name') or '?'}"
        + "".join(
            f", {what} {entry[key]}" for what, key in (("driver", "driver"), ("CUDA", "cuda_runtime")) if entry.get(key)
        )
        for entry in machine.get("accelerators") or []
    ]
    return {  # column heading → value, in the table's order
        "Name": machine.get("machine_name") or machine.get("hostname") or "?",
        "Hostname": machine.get("hostname") or "?",
        "Machine id": machine["machine_id"],
        "CPU": cpu.get("model") or "?",
        "Cores": f"{cpu.get('physical_cores') or '?'} physical, {cpu.get('logical_cores') or '?'} logical",
        "Memory": "?" if memory is None else f"{memory / MIB_PER_GIB:,.1f} GiB",
        "Accelerators": "; ".join(accelerators) or f"none ({machine.get('no_accelerator_reason') or 'none seen'})",
        "torch": machine.get("torch") or "?",
        "devicebench": ", ".join(devicebench_versions),
        "Python": machine.get("python") or "?",
    }


def _price_lines(prices: Prices | None) -> list[str]:
    if prices is None:
        return []
    tables = [("default", prices.default), *((f"machine {name}", table) for name, table in prices.machines.items())]
    return [
        f"{where}: " + ", ".join(f"{device} {price:g}/h" for device, price in table.items())
        for where, table in tables
        if table
    ]
