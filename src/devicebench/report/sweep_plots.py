"""The "Sweeps" charts of `devicebench sweep`: per workload, throughput against each swept setting (batch size,
loader workers, a --set parameter), a line per device and per value of any other setting that varies, and under it
each row's throughput ratio to its baseline at the same point. `sweep_series` says what to draw, numbers only.

    python -c "from devicebench.report.sweep_plots import sweep_series; help(sweep_series)"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from devicebench.report.charts import (
    CHART_MARGIN_HEIGHT_IN,
    CHART_WIDTH_IN,
    CURVE_MARKERS,
    DPI,
    SWEEP_PANEL_HEIGHT_IN,
    Chart,
    Colour,
    file_stem,
    has_speedup,
    palette,
    png,
    text_as_given,
    wrapped_label,
    wrapped_title,
)
from devicebench.report.text import device_kind, swept_value
from devicebench.results.compare import Row
from devicebench.results.speed_settings import POOLED_APART, SPEED_SETTINGS
from devicebench.results.stats import INTERVAL_NAME

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MOST_SWEEP_LINES = 8  # more lines than this on one panel is a tangle: then the other swept settings are held
LOG_SCALE_SPAN = 10  # a sweep panel whose values span more than this factor gets a log axis, so slow lines show
SWEPT_EVERYWHERE = ("batch_size", "workers")  # every workload's sweepable settings; the rest come from --set
# and what else keeps rows apart (results/pooling.py): two torch versions are two lines, never one
OTHER_SPEED_SETTINGS = (
    *(name for name in SPEED_SETTINGS if name not in (*SWEPT_EVERYWHERE, "overrides")),
    *POOLED_APART,
)
SweepPoint = tuple[str, float, float, float | None, float | None]  # line label, x, y, error bar low, high


@dataclass(frozen=True)
class SweepLine:
    """One line of a sweep panel: a point per value of the swept setting, in increasing order."""

    label: str  # the device, and whatever else sets this line apart: "cuda:0, workers=2"
    x: tuple[float, ...]  # the swept setting's values
    y: tuple[float, ...]  # median samples/s, or the ratio to the baseline
    low: tuple[float | None, ...]  # error bar ends; None where there is no interval (a ratio from one sample)
    high: tuple[float | None, ...]


@dataclass(frozen=True)
class Sweep:
    """What one sweep chart draws: throughput against one swept setting and, where rows have a baseline, each
    row's throughput ratio to it at the same point."""

    setting: str  # the x axis: "batch_size", "workers" or a --set parameter ("depth")
    throughput: tuple[SweepLine, ...]  # median steady samples/s, error bars min–max over the steady epochs
    ratios: tuple[SweepLine, ...]  # Row.speedup, error bars its interval (results/stats.py)
    ratio_name: str  # "GPU/CPU" when every ratio is a GPU's over a CPU's; empty when there are no ratios
    held: tuple[tuple[str, str], ...]  # other swept settings held at their first value, when every line is too many


@text_as_given
def sweep_charts(workload: str, rows: Sequence[Row]) -> list[Chart]:
    """The "Sweeps" charts of one workload's grid points, one per setting `sweep_series` finds; none when no
    numeric setting varies."""
    return [
        Chart(
            f"{file_stem(workload)}-sweep-{file_stem(sweep.setting)}",
            _sweep_alt_text(workload, sweep),
            png(_sweep_figure(workload, sweep)),
            caption=_sweep_caption(sweep),
        )
        for sweep in sweep_series(rows)
    ]


def sweep_series(rows: Sequence[Row]) -> list[Sweep]:
    """What to plot for one workload's grid points: a Sweep per numeric setting (batch_size, workers, a --set
    parameter) that takes two values or more, with a line per device and per value of every other setting that
    varies. When that would put more than MOST_SWEEP_LINES lines on a panel, only one Sweep, against the first
    such setting, with the other swept settings held at their first value. No matplotlib: numbers only."""
    swept = [name for name in (*SWEPT_EVERYWHERE, *_override_names(rows)) if _is_numeric_sweep(rows, name)]
    if all(len(set(_line_labels(rows, setting))) <= MOST_SWEEP_LINES for setting in swept):
        sweeps = [_sweep(rows, setting, held=()) for setting in swept]
    else:
        held = tuple((name, _value_text(rows[0], name)) for name in swept[1:])
        kept = [row for row in rows if all(_value_text(row, name) == value for name, value in held)]
        sweeps = [_sweep(kept, swept[0], held)]
    return [sweep for sweep in sweeps if sweep.throughput]


def _override_names(rows: Sequence[Row]) -> list[str]:
    """The --set parameters of any row, in the order first seen (the order they were given)."""
    return list(dict.fromkeys(name for row in rows for name in row.settings["overrides"]))


def _value_text(row: Row, name: str) -> str:
    """A setting's value in `row`: a swept one as the terminal's sweep table shows it, another as stored."""
    if name in OTHER_SPEED_SETTINGS:
        return str(row.settings[name])
    return swept_value(row, name)  # "—" for a default of a workload this devicebench does not know


def _swept_number(row: Row, name: str) -> float | None:
    try:
        return float(_value_text(row, name))
    except ValueError:  # not a number: --set optimizer=adam, or "—" (unknown)
        return None


def _is_numeric_sweep(rows: Sequence[Row], name: str) -> bool:
    values = [_swept_number(row, name) for row in rows]
    return None not in values and len(set(values)) > 1


def _line_labels(rows: Sequence[Row], setting: str) -> list[str]:
    """Per row, the line it belongs to against `setting`: `cuda:0`, or `laptop/cuda:0, workers=2`: the device,
    the machine when `rows` come from several, and the value of every other setting that varies among `rows`."""
    several_machines = len({row.machine_id for row in rows}) > 1
    others = [
        name
        for name in (*SWEPT_EVERYWHERE, *_override_names(rows), *OTHER_SPEED_SETTINGS)
        if name != setting and len({_value_text(row, name) for row in rows}) > 1
    ]
    return [
        ", ".join(
            [
                f"{row.machine_name}/{row.device}" if several_machines else row.device,
                *(f"{name}={_value_text(row, name)}" for name in others),
            ]
        )
        for row in rows
    ]


def _sweep(rows: Sequence[Row], setting: str, held: tuple[tuple[str, str], ...]) -> Sweep:
    labelled = list(zip(_line_labels(rows, setting), rows))
    kinds = {
        (device_kind(row.device).upper(), device_kind(row.baseline.device).upper())
        for row in rows
        if has_speedup(row) and row.baseline is not None  # a row with a speedup always has its baseline
    }
    return Sweep(
        setting=setting,
        throughput=_sweep_lines(_throughput_points(labelled, setting)),
        ratios=_sweep_lines(_ratio_points(labelled, setting)),
        ratio_name="/".join(kinds.pop()) if len(kinds) == 1 else ("row/baseline" if kinds else ""),
        held=held,
    )


def _throughput_points(labelled: Sequence[tuple[str, Row]], setting: str) -> list[SweepPoint]:
    """Each (line label, row) with steady epochs as a point: its median samples/s, min–max as the error bar."""
    return [
        (label, _swept_point(row, setting), row.samples_per_s.median, row.samples_per_s.low, row.samples_per_s.high)
        for label, row in labelled
        if row.samples_per_s is not None
    ]


def _ratio_points(labelled: Sequence[tuple[str, Row]], setting: str) -> list[SweepPoint]:
    """Each (line label, row) with a speedup as a point: its ratio to the baseline, its interval as the error
    bar (none from one sample)."""
    points: list[SweepPoint] = []
    for label, row in labelled:
        speedup = row.speedup
        if speedup is not None and has_speedup(row):
            points.append((label, _swept_point(row, setting), speedup.ratio, speedup.low, speedup.high))
    return points


def _swept_point(row: Row, setting: str) -> float:
    """`row`'s value of `setting`, where the x axis has it."""
    number = _swept_number(row, setting)
    assert number is not None  # sweep_series sweeps only settings whose every row has a number (_is_numeric_sweep)
    return number


def _sweep_lines(points: Sequence[SweepPoint]) -> tuple[SweepLine, ...]:
    """(label, x, y, low, high) points as lines, in the order their labels first come, each sorted by x."""
    by_label: dict[str, list[tuple[float, float, float | None, float | None]]] = {}
    for label, x, y, low, high in points:
        by_label.setdefault(label, []).append((x, y, low, high))
    return tuple(
        SweepLine(label, *(tuple(values) for values in zip(*sorted(line, key=lambda point: point[0]))))
        for label, line in by_label.items()
    )


def _sweep_figure(workload: str, sweep: Sweep) -> Figure:
    """Throughput against the swept setting; under it, where there are ratios, the ratio to the baseline."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullLocator

    panels = 2 if sweep.ratios else 1
    figure = Figure(
        figsize=(CHART_WIDTH_IN, CHART_MARGIN_HEIGHT_IN + SWEEP_PANEL_HEIGHT_IN * panels), dpi=DPI, layout="constrained"
    )
    axes = figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    styles = {
        line.label: (colour, CURVE_MARKERS[index % len(CURVE_MARKERS)])
        for index, (line, colour) in enumerate(zip(sweep.throughput, palette(len(sweep.throughput))))
    }
    scale = _draw_sweep_lines(axes[0], sweep.throughput, styles)
    axes[0].set_ylabel(f"samples/s{scale}\n(median; error bars: min–max)")
    axes[0].set_title(wrapped_title(f"{workload}: training throughput against {sweep.setting}"))
    if sweep.ratios:
        scale = _draw_sweep_lines(axes[1], sweep.ratios, styles)
        axes[1].axhline(1, color="black", linewidth=1)  # as fast as the baseline
        axes[1].set_ylabel(f"{sweep.ratio_name} throughput ratio (x){scale}\n(error bars: {INTERVAL_NAME} or lower)")
        axes[1].set_title(wrapped_title(f"{workload}: {sweep.ratio_name} throughput ratio against {sweep.setting}"))
    values = sorted({x for line in sweep.throughput for x in line.x})
    if sweep.setting == "batch_size":
        axes[-1].set_xscale("log", base=2)
    axes[-1].set_xticks(values, [f"{value:g}" for value in values])  # the swept values themselves, no others
    axes[-1].xaxis.set_minor_locator(NullLocator())
    axes[-1].set_xlabel(_sweep_axis_name(sweep.setting))
    for panel in axes:
        panel.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,g}"))  # 1,000 rather than 10³
    figure.legend(
        *axes[0].get_legend_handles_labels(),
        fontsize="small",
        loc="outside lower center",
        ncols=min(len(sweep.throughput), 3),
        frameon=False,
    )
    return figure


def _draw_sweep_lines(axes: Axes, lines: Sequence[SweepLine], styles: Mapping[str, tuple[Colour, str]]) -> str:
    """Each line with its error bars; a log y axis when the values span more than LOG_SCALE_SPAN. Returns what
    the axis label should add: " (log scale)" or nothing."""
    for line in lines:
        colour, marker = styles[line.label]
        below = [0.0 if low is None else y - low for y, low in zip(line.y, line.low)]
        above = [0.0 if high is None else high - y for y, high in zip(line.y, line.high)]
        axes.errorbar(
            line.x,
            line.y,
            yerr=[below, above],
            color=colour,
            marker=marker,
            markersize=6,
            capsize=3,
            elinewidth=1,
            label=wrapped_label(line.label),
        )
    extremes = [value for line in lines for value in (*line.y, *line.low, *line.high) if value is not None]
    axes.grid(alpha=0.3)
    if min(extremes) > 0 and max(extremes) / min(extremes) > LOG_SCALE_SPAN:
        axes.set_yscale("log")
        return " (log scale)"
    axes.set_ylim(bottom=0)
    return ""


def _sweep_axis_name(setting: str) -> str:
    if setting == "batch_size":
        return "batch size, samples per step (log2 scale)"
    if setting == "workers":
        return "loader workers, processes (0: the training process loads)"
    return f"{setting} (--set {setting}=…)"


def _sweep_caption(sweep: Sweep) -> str:
    sentences = [
        f"Median steady-state samples/s against {sweep.setting}, one line per device and per value of "
        "any other setting that varies (the legend says which); error bars from the slowest to the fastest "
        "steady epoch."
    ]
    if sweep.ratios:
        sentences.append(
            f"Lower panel: the {sweep.ratio_name} throughput ratio at the same point (error bars: "
            f"{INTERVAL_NAME} or the lower level its samples hold, where there is more than one sample)."
        )
    if sweep.ratios and sweep.setting == "depth":
        ends = "; ".join(
            f"{line.label} {line.y[0]:.2f}x at depth {line.x[0]:g} to {line.y[-1]:.2f}x at depth {line.x[-1]:g}"
            for line in sweep.ratios
        )
        sentences.append(
            f"S3 says the deeper the network, the larger the GPU advantage: a ratio that rises to the "
            f"right. Here: {ends}."
        )
    if sweep.held:
        held = ", ".join(f"{name}={value}" for name, value in sweep.held)
        sentences.append(
            f"Every combination would draw more than {MOST_SWEEP_LINES} lines, so only the points at "
            f"{held} (the first value of each other swept setting) are drawn; the table has them all."
        )
    return " ".join(sentences)


def _sweep_alt_text(workload: str, sweep: Sweep) -> str:
    """Every number drawn, as `label [x=y, …]` per line: the chart for a reader (or a program) without it."""

    def numbers(lines: Sequence[SweepLine], digits: int) -> str:
        return "; ".join(
            f"{line.label} [" + ", ".join(f"{x:g}={y:.{digits}f}" for x, y in zip(line.x, line.y)) + "]"
            for line in lines
        )

    text = f"{workload}: sweep of {sweep.setting}. samples/s: {numbers(sweep.throughput, 0)}."
    if sweep.ratios:
        text += f" {sweep.ratio_name} throughput ratio (x): {numbers(sweep.ratios, 2)}."
    if sweep.held:
        text += " Held: " + ", ".join(f"{name}={value}" for name, value in sweep.held) + "."
    return text
