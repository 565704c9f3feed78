"""The tables of `devicebench reproduce`: each seed experiment's published figures beside what this machine
measured, and a reference model's public record beside each device here, in the unit each figure was published in.

    devicebench reproduce S2 --devices cpu --quick
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from devicebench.report.fitting import fitted
from devicebench.report.text import number_text, percent_text, rate_text
from devicebench.results.record import published_figures

if TYPE_CHECKING:  # it imports torch: only where a reproduction is shown
    from devicebench.reproduce import RecordComparison, Reproduction


def reproduction_table(reproductions: list[Reproduction]) -> Group:
    """Published against measured here, a pair of lines per workload; what each speedup is a ratio of, beneath (in
    a cell, the post's long basis wrapped to one word a line on an 80-column screen)."""
    table = Table(title="Published vs measured here", title_justify="left", show_lines=True)
    for column in ("Workload", "", "Hardware", "CPU samples/s", "GPU samples/s", "Speedup", "Accuracy"):
        table.add_column(column, justify="left" if column in ("Workload", "", "Hardware") else "right", overflow="fold")
    notes = []
    for entry in reproductions:
        published, name = entry.published, entry.workload.name
        table.add_row(
            f"[bold]{name}[/] ({entry.workload.seed})",
            "published",
            published.hardware,
            number_text(published.samples_per_s.get("cpu"), 0),
            number_text(published.samples_per_s.get("gpu"), 0),
            "—" if published.speedup is None else f"{published.speedup:g}x",
            percent_text(published.accuracy) + (f" {published.accuracy_kind}" if published.accuracy else ""),
        )
        if published.speedup is not None:
            notes.append(f"{name}, published {published.speedup:g}x: {published.basis}.")
        if entry.measured_speedup is None:
            notes.append(f"{name}, measured here: no GPU here, so no speedup.")
        else:
            end_to_end = entry.measured_end_to_end_ratio
            notes.append(
                f"{name}, measured here {entry.measured_speedup:.2f}x: steady samples/s, the fastest accelerator "
                "over the CPU" + (f"; end to end {end_to_end:.2f}x." if end_to_end else ".")
            )
        data = f"[bold yellow]{entry.data_sources} data[/]" if "synthetic" in entry.data_sources else "real data"
        table.add_row(
            "",
            "measured here",
            f"{entry.measured_hardware}; {data}",
            rate_text(entry.measured_cpu_samples_per_s),
            rate_text(entry.measured_gpu_samples_per_s),
            "—" if entry.measured_speedup is None else f"{entry.measured_speedup:.2f}x",
            percent_text(entry.measured_accuracy) + (f" {published.accuracy_kind}" if entry.measured_accuracy else ""),
        )
    return Group(fitted(table), *(Text(note) for note in notes))  # Text: a basis is no markup


def batch_and_length(batch: int, length: int | None) -> str:
    """`256`, or `32 x 384` for a batch of 32 sequences of 384 tokens."""
    return f"{batch:,}" if length is None else f"{batch:,} x {length:,}"


def record_table(comparison: RecordComparison) -> Group:
    """A reference model's published figures (the record) beside what each device measured here, each in the unit
    it was published in; the sources numbered beneath, and what was measured here."""
    # the units of the figures shown, or with none shown, those the record gives this model in
    units = sorted({figure.unit for figure in comparison.figures or published_figures(comparison.workload.name)})
    table, sources = _figures_table(comparison, units)
    shown = [fitted(table)] if comparison.figures else []  # a table of headings alone says nothing
    lines: list[RenderableType] = [*shown, *_measured_lines(comparison, units), *_record_notes(comparison)]
    # a source (a URL, a repository path) is one word: on a line of its own, never folded mid-word by the screen's
    # width, so that it can be copied or clicked whole (the terminal wraps it where it must)
    lines += [Text(f"[{number}] {source}", no_wrap=True, overflow="ignore") for source, number in sources.items()]
    return Group(*lines)


def _figures_table(comparison: RecordComparison, units: list[str]) -> tuple[Table, dict[str, int]]:
    """A row per published figure, with how many times faster it ran than each device here; and the number each
    source is given, in the order the figures cite them."""
    # they import torch: only where a reproduction is shown
    from devicebench.reproduce import factor_text, figure_precision, in_unit, not_a_speedup, row_work, work_differences

    workload, measured = comparison.workload, comparison.measured
    table = Table(title=f"{workload.name}: the public record beside this machine", title_justify="left")
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
            work = [(figure.batch_per_gpu, figure_precision(figure), figure.data)]
            ratio = factor_text(figure.per_gpu_throughput / here) if here else ""
            differing = ", ".join(work_differences(work, row_work(row)))  # the row itself shows the figure's values
            ratios.append(not_a_speedup(ratio, f"other {differing}" if differing else "") if here else "—")
        table.add_row(
            f"{figure.gpu}{gpus} [{number}]",
            figure.precision + (" (TF32)" if figure.tf32 == "on" and figure.precision == "fp32" else ""),
            batch_and_length(figure.batch_per_gpu, figure.sequence_length),
            f"{figure.framework} {figure.framework_version}".strip() + f"; {figure.data}",
            f"{figure.throughput:,.0f}" + ("" if one_unit else f" {figure.unit}"),
            *ratios,
        )
    return table, sources


def _measured_lines(comparison: RecordComparison, units: list[str]) -> list[Text]:
    """What each device here measured, in every unit the record uses, and how."""
    from devicebench.reproduce import in_unit  # imports torch: only where a reproduction is shown

    lines = []
    for row in comparison.measured:
        settings = row.runs[0].settings if row.runs else None
        shown = [
            f"{value:,.1f} {unit}" for unit in units if (value := in_unit(comparison.workload, row, unit)) is not None
        ]
        batch = f" at batch {batch_and_length(settings.batch_size, comparison.length)}" if settings else ""
        lines.append(
            Text(
                f"Measured here: {row.device_name} ({row.device}): {', '.join(shown)}{batch}, "
                f"{row.settings['data_source']} data, {row.settings['mode']} mode.",
                style="bold",
            )
        )
    return lines


def _record_notes(comparison: RecordComparison) -> list[Text]:
    """What the table leaves out or sets apart (no figures, other sequence lengths, rows not shown), and what its
    figures are."""
    lines = []
    if comparison.changed:
        lines.append(
            Text(
                f"The record's figures are of the published {comparison.workload.name}; this run set "
                f"{', '.join(comparison.changed)}: another model, so none of them is set beside it."
            )
        )
    elif not comparison.figures:
        lines.append(
            Text(f"The record has no figures of {comparison.workload.name} at the sequence length trained here.")
        )
    lengths = sorted(
        {
            figure.sequence_length
            for figure in comparison.figures
            if figure.sequence_length not in (None, comparison.length)
        }
    )
    if lengths:
        lines.append(
            Text(
                f"Rows at {' and '.join(f'{length:,}' for length in lengths)} tokens a sequence, this run "
                f"at {comparison.length:,}: their tokens/s compare only roughly (attention's share of the "
                "work grows with the length)."
            )
        )
    for length, count in comparison.other_lengths.items():
        lines.append(
            Text(
                f"Left out: {count} published row{'s' if count > 1 else ''} at sequence length {length}, "
                f"a different amount of work a sample: --set sequence_length={length} compares with "
                f"{'them' if count > 1 else 'it'}."
            )
        )
    if comparison.not_shown:
        lines.append(
            Text(
                f"Shown: the fastest single-GPU figure of each GPU and precision; {comparison.not_shown} "
                "more rows (several GPUs, other frameworks, batches or years): --every-row."
            )
        )
    if not comparison.figures:
        return lines
    lines.append(
        Text(
            "Published figures are other people's measurements, on other machines and software; ÷ is that "
            "GPU's throughput (per GPU) over this device's: a speedup only where both ran the same batch, "
            "precision and data, else the cell names what differs."
        )
    )
    return lines
