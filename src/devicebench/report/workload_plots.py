"""The charts of one workload (throughput, speedup, epoch time, test accuracy, scaling with processes) and the
summary of every workload's speedup, with the horizontal bars most of them are drawn with. Every number drawn comes
from the comparison rows (`devicebench.results.compare.Row`), so a chart and the table beside it cannot disagree.

    python -c "from devicebench.report.workload_plots import summary_chart; help(summary_chart)"
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from devicebench.report.charts import (
    CHART_MARGIN_HEIGHT_IN,
    CHART_WIDTH_IN,
    CURVE_MARKERS,
    DPI,
    LEGEND_LINE_HEIGHT_IN,
    SWEEP_PANEL_HEIGHT_IN,
    Chart,
    Colour,
    file_stem,
    has_speedup,
    palette,
    plain_ticks,
    png,
    text_as_given,
    wrapped_label,
    wrapped_title,
)
from devicebench.report.text import device_kind, span_text, steps_label
from devicebench.results.compare import Row
from devicebench.results.speed_settings import POOLED_APART, SPEED_SETTINGS, setting_text
from devicebench.results.stats import Speedup, Spread
from devicebench.workloads import Published

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROW_HEIGHT_IN = 0.42  # per bar, and half as much again for each extra line of a wrapped label
ACCURACY_PLOT_HEIGHT_IN = 3.6  # title, axes and axis labels; the legend under them adds its lines
ACCURACY_LEGEND_COLUMNS = 2
SYNTHETIC_HATCH = "///"  # synthetic-data bars are hatched, so a glance tells them from real data
PUBLISHED_MARKER = "D"
NICE_RATIOS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # speedup axis ticks
ANNOTATION_ROOM = 0.7  # decades of free axis past the largest speedup, per decade of data: room for the labels


@text_as_given
def workload_charts(workload: str, rows: Sequence[Row], published: Published | None) -> list[Chart]:
    """The charts of one workload, in reading order; a chart with nothing to show is left out. Epoch times are
    drawn only when every steady epoch had the same steps and samples: a 3-step epoch beside a 25-step one would
    make the faster row look slower. Otherwise the throughput chart's caption says why they are not."""
    lengths = steady_epoch_lengths(rows)  # empty where every run ended in its warm-up epoch
    steps = span_text(steps for steps, _ in lengths) if lengths else ""
    drawn = [
        (
            "samples-per-s",
            "Training throughput",
            _throughput_figure(workload, rows, published),
            f"Epochs here had {steps} steps, so their times are not set side by side; samples/s compares them."
            if len(lengths) > 1
            else "",
        ),
        ("speedup", "Speedup against the baseline", _speedup_figure(workload, rows), ""),
        (
            "epoch-time",
            "Steady epoch time",
            _epoch_time_figure(workload, rows, steps) if len(lengths) == 1 else None,
            "",
        ),
        ("test-accuracy", "Test accuracy per epoch", _accuracy_figure(workload, rows, published, len(lengths) > 1), ""),
        ("scaling", "Throughput against the number of processes", _scaling_figure(workload, rows), ""),
    ]
    return [
        Chart(f"{file_stem(workload)}-{kind}", f"{workload}: {title}", png(figure), caption=caption)
        for kind, title, figure, caption in drawn
        if figure is not None
    ]


def steady_epoch_lengths(rows: Sequence[Row]) -> list[tuple[int, int]]:
    """(steps, samples) of the steady epochs of `rows`, each length once: their times compare only when there is
    one. No matplotlib: numbers only."""
    return sorted({(epoch.steps, epoch.samples) for row in rows for epoch in row.steady_epochs})


@text_as_given
def summary_chart(rows_by_workload: Mapping[str, Sequence[Row]]) -> Chart | None:
    """The speedup of every row that has one, across all workloads; None when no row has a speedup."""
    measured = [(name, row) for name, rows in rows_by_workload.items() for row in rows if has_speedup(row)]
    if not measured:
        return None
    labels = [f"{name}: {row.label}" for name, row in measured]
    colour_of = dict(zip(rows_by_workload, palette(len(rows_by_workload))))
    figure, axes = _bar_figure(labels)
    _draw_speedups(axes, [row for _, row in measured], [colour_of[name] for name, _ in measured])
    axes.set_title(wrapped_title("Speedup against the baseline, every workload"))
    _legend(figure, axes, [row for _, row in measured])
    return Chart("summary-speedup", "Speedup across all workloads", png(figure))


# --- the per-workload charts -------------------------------------------------------------------------------


def _epoch_time_figure(workload: str, rows: Sequence[Row], steps: str) -> Figure | None:
    """`steps`: how many steps every steady epoch had, the same in every row."""
    if all(row.epoch_time_s is None for row in rows):
        return None
    figure, axes = _bar_figure([row.label for row in rows])
    _draw_spread_bars(axes, rows, [row.epoch_time_s for row in rows], unit="s", digits=2)
    axes.set_xlabel("steady epoch time, s (median; whiskers: min–max)")
    axes.set_title(wrapped_title(f"{workload}: steady {steps}-step epoch time (shorter is faster)"))
    _legend(figure, axes, rows)
    return figure


def _throughput_figure(workload: str, rows: Sequence[Row], published: Published | None) -> Figure | None:
    if all(row.samples_per_s is None for row in rows):
        return None
    figure, axes = _bar_figure([row.label for row in rows])
    published_rates = published.samples_per_s if published else {}
    _draw_spread_bars(
        axes,
        rows,
        [row.samples_per_s for row in rows],
        unit="",
        digits=0,
        published=[published_rates.get(device_kind(row.device)) for row in rows],
    )
    axes.set_xlabel("training throughput, samples/s (median; whiskers: min–max)")
    axes.set_title(wrapped_title(f"{workload}: samples per second (longer is faster)"))
    _legend(figure, axes, rows)
    return figure


def _speedup_figure(workload: str, rows: Sequence[Row]) -> Figure | None:
    if not any(has_speedup(row) for row in rows):
        return None
    figure, axes = _bar_figure([row.label for row in rows])
    _draw_speedups(axes, rows, palette(len(rows)))
    axes.set_title(wrapped_title(f"{workload}: speedup against the baseline"))
    _legend(figure, axes, rows)
    return figure


def _accuracy_figure(
    workload: str, rows: Sequence[Row], published: Published | None, lengths_differ: bool
) -> Figure | None:
    """Test accuracy per epoch; where epochs had different lengths, each curve's label says how many steps."""
    curves = [(row, _accuracy_by_epoch(row)) for row in rows]
    if not any(curve for _, curve in curves):
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    labels = [wrapped_label(steps_label(row) if lengths_differ else row.label) for row, curve in curves if curve]
    if published and published.accuracy is not None:
        labels.append(f"published {published.accuracy_kind} accuracy")
    legend_lines = math.ceil(sum(label.count("\n") + 1 for label in labels) / ACCURACY_LEGEND_COLUMNS)
    figure = Figure(
        figsize=(CHART_WIDTH_IN, ACCURACY_PLOT_HEIGHT_IN + LEGEND_LINE_HEIGHT_IN * legend_lines),
        dpi=DPI,
        layout="constrained",
    )
    axes = figure.add_subplot()
    drawn = [(row, curve, colour) for (row, curve), colour in zip(curves, palette(len(rows))) if curve]
    for index, ((row, curve, colour), label) in enumerate(zip(drawn, labels)):
        epochs = sorted(curve)
        axes.plot(
            epochs,
            [curve[epoch] * 100 for epoch in epochs],
            color=colour,
            label=label,
            marker=CURVE_MARKERS[index % len(CURVE_MARKERS)],
            markersize=7,
            markerfacecolor="none",
            linestyle="--" if _is_synthetic(row) else "-",
            clip_on=False,  # a point at 100% sits on the axis's edge, drawn whole
        )
    if published and published.accuracy is not None:
        axes.axhline(published.accuracy * 100, color="black", linestyle=":", linewidth=1.2, label=labels[-1])
    bottom, top = axes.get_ylim()
    if top > 100:  # autoscaling's margin above a curve at 100% would tick an accuracy no run can have
        axes.set_ylim(bottom, 100)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_formatter(PercentFormatter())  # decimals chosen from the tick spacing: no 100%, 100%
    axes.set_xlabel("epoch (1 is warm-up); accuracy: median over repeats")
    axes.set_ylabel("test accuracy, %")
    axes.set_title(
        wrapped_title(
            f"{workload}: test accuracy per epoch"
            + (" (dashed: synthetic data)" if any(_is_synthetic(row) for row in rows) else "")
        )
    )
    axes.grid(alpha=0.3)
    figure.legend(fontsize="small", loc="outside lower center", ncols=ACCURACY_LEGEND_COLUMNS, frameon=False)
    return figure


def scaling_series(rows: Sequence[Row]) -> dict[str, list[tuple[int, float]]]:
    """Per machine and device that ran with more than one process count: (processes, median samples/s), in
    increasing order of processes. Rows that differ in anything but the process count and threads are not mixed;
    rows under other software or of another definition are series of their own, named by it."""
    groups: dict[tuple, dict[int, float]] = {}
    for row in rows:
        if row.samples_per_s is None:
            continue
        same_work = tuple(
            str(row.settings[name])
            for name in (*SPEED_SETTINGS, *POOLED_APART)
            if name not in ("world_size", "threads")
        )
        apart = ", ".join(setting_text(name, row.settings[name]) for name in POOLED_APART if name in row.differs_in)
        key = (f"{row.machine_name}/{row.device}" + (f" ({apart})" if apart else ""), same_work)
        groups.setdefault(key, {})[row.settings["world_size"]] = row.samples_per_s.median
    return {label: sorted(points.items()) for (label, _), points in groups.items() if len(points) > 1}


def _scaling_figure(workload: str, rows: Sequence[Row]) -> Figure | None:
    series = scaling_series(rows)
    if not series:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(CHART_WIDTH_IN, SWEEP_PANEL_HEIGHT_IN), layout="constrained")
    axes = figure.add_subplot()
    for colour, (label, points) in zip(palette(len(series)), series.items()):
        processes, rates = zip(*points)
        axes.plot(processes, rates, marker="o", color=colour, label=label)
        if processes[0] == 1:  # perfect scaling: N times one process
            axes.plot(
                processes,
                [rates[0] * count for count in processes],
                linestyle=":",
                color=colour,
                label=f"{label}, perfect scaling",
            )
    axes.set_xlabel("processes (one device each)")
    axes.set_ylabel("samples/s (median)")
    axes.set_xticks(sorted({count for points in series.values() for count, _ in points}))
    axes.set_title(wrapped_title(f"{workload}: throughput against the number of processes"))
    axes.legend(loc="upper left", fontsize="small")
    return figure


def _accuracy_by_epoch(row: Row) -> dict[int, float]:
    """Median test accuracy per epoch number over the row's repeats, for the epochs that were evaluated."""
    by_epoch: dict[int, list[float]] = {}
    for run in row.runs:
        for epoch in run.epochs:
            if epoch.test_accuracy is not None:
                by_epoch.setdefault(epoch.epoch, []).append(epoch.test_accuracy)
    return {epoch: statistics.median(values) for epoch, values in by_epoch.items()}


# --- drawing helpers -----------------------------------------------------------------------------------------


def _bar_figure(labels: Sequence[str]) -> tuple[Figure, Axes]:
    """A horizontal-bar figure tall enough for `labels`, first label at the top (the table's order)."""
    from matplotlib.figure import Figure

    wrapped = [wrapped_label(label) for label in labels]
    extra_lines = sum(label.count("\n") for label in wrapped)
    height = CHART_MARGIN_HEIGHT_IN + ROW_HEIGHT_IN * (len(labels) + 0.5 * extra_lines)
    figure = Figure(figsize=(CHART_WIDTH_IN, height), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    axes.set_yticks(range(len(labels)), wrapped)
    axes.set_ylim(len(labels) - 0.5, -0.5)  # inverted: the first row on top
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    return figure, axes


def _bar_label(value: float, digits: int) -> str:
    """A bar's label: `digits` decimals, and two significant figures at least (0.77 samples/s, not 1)."""
    return f"{value:,.{digits}f}" if value >= 10 ** (2 - digits) or value == 0 else f"{value:.2g}"


def _draw_spread_bars(
    axes: Axes,
    rows: Sequence[Row],
    values: Sequence[Spread | None],
    *,
    unit: str,
    digits: int,
    published: Sequence[float | None] = (),
) -> None:
    """Bars at the median with min–max whiskers and the median written at the bar's end; `published` figures,
    one per row or None, as markers on the same axis."""
    marked = [(index, rate) for index, rate in enumerate(published) if rate is not None]
    if marked:
        axes.scatter(
            [rate for _, rate in marked],
            [index for index, _ in marked],
            marker=PUBLISHED_MARKER,
            s=46,
            color="black",
            zorder=3,
            label="published figure, same device kind",
        )
    largest = max([value.high for value in values if value is not None] + [rate for _, rate in marked])
    for index, (row, value, colour) in enumerate(zip(rows, values, palette(len(rows)))):
        if value is None:
            axes.text(0, index, "  no steady-state epochs", va="center", fontsize="small", color="dimgray")
            continue
        axes.barh(
            index,
            value.median,
            color=colour,
            alpha=0.85,
            hatch=SYNTHETIC_HATCH if _is_synthetic(row) else None,
            edgecolor="white",
            xerr=[[value.median - value.low], [value.high - value.median]],
            error_kw={"ecolor": "black", "capsize": 3, "elinewidth": 1},
        )
        label = f" {_bar_label(value.median, digits)}{' ' + unit if unit else ''}"
        axes.text(value.high + largest * 0.01, index, label, va="center", fontsize="small")
    axes.set_xlim(0, largest * 1.2)  # room for the value labels
    plain_ticks(axes.xaxis)


def _draw_speedups(axes: Axes, rows: Sequence[Row], colours: Sequence[Colour]) -> None:
    """Bars from 1x to each ratio on a log axis (slower rows point left), its interval (results/stats.py) as error bars."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    extremes = [1.0]
    for index, (row, colour) in enumerate(zip(rows, colours)):
        value = row.speedup
        if value is None or not has_speedup(row):
            text = (
                "baseline (1x)"
                if row.baseline is row
                else "tuned: its gain over seed mode is listed above"
                if row.against_seed_mode
                else "no speedup: see the table"
            )
            axes.text(1, index, f"  {text}", va="center", fontsize="small", color="dimgray")
            continue
        extremes += _draw_speedup_bar(axes, index, row, value, colour)
    low = min(extremes) / 1.25
    decades = max(math.log10(max(extremes) / low), 0.5)
    high = max(extremes) * 10 ** (decades * ANNOTATION_ROOM)  # the value labels take about 40% of the width
    axes.set_xscale("log")
    axes.set_xlim(low, high)
    axes.xaxis.set_major_locator(FixedLocator([tick for tick in NICE_RATIOS if low <= tick <= high]))
    axes.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    plain_ticks(axes.xaxis, "x")
    axes.axvline(1, color="black", linewidth=1)
    axes.set_xlabel("speedup, times (log scale; error bars: rank interval, its level in the table)")


def _draw_speedup_bar(axes: Axes, index: int, row: Row, value: Speedup, colour: Colour) -> list[float]:
    """Row `index`'s bar from 1x to its ratio, its interval as an error bar where it has one, and the ratio
    written past both; returns the ratio and the interval's ends, which the axis must reach."""
    interval = (value.low, value.high) if value.low is not None and value.high is not None else None
    axes.barh(
        index,
        value.ratio - 1,
        left=1,
        color=colour,
        alpha=0.85,
        edgecolor="white",
        hatch=SYNTHETIC_HATCH if _is_synthetic(row) else None,
    )
    if interval is not None:
        axes.errorbar(
            value.ratio,
            index,
            # a rank interval need not hold the ratio of medians (results/stats.py): no bar then on that side
            xerr=[[max(value.ratio - interval[0], 0.0)], [max(interval[1] - value.ratio, 0.0)]],
            fmt="none",
            ecolor="black",
            capsize=3,
            elinewidth=1,
        )
    right = max(value.ratio, interval[1] if interval else value.ratio, 1.0)
    interval_text = f" [{interval[0]:.2f}–{interval[1]:.2f}]" if interval else ""
    axes.text(right * 1.04, index, f"{value.ratio:.2f}x{interval_text}", va="center", fontsize="small")
    return [value.ratio, *(interval or ())]


def _legend(figure: Figure, axes: Axes, rows: Sequence[Row]) -> None:
    """A legend under the plot, never over a bar, and only where it says something: the published marker, or
    which hatched bars are synthetic."""
    from matplotlib.patches import Patch

    handles, labels = axes.get_legend_handles_labels()
    if any(_is_synthetic(row) for row in rows):
        handles.append(Patch(facecolor="white", edgecolor="gray", hatch=SYNTHETIC_HATCH))
        labels.append("SYNTHETIC data")
    if handles:
        figure.legend(handles, labels, fontsize="small", loc="outside lower center", ncols=len(handles), frameon=False)


def _is_synthetic(row: Row) -> bool:
    return row.settings["data_source"] == "synthetic"
