"""The report's charts: matplotlib figures rendered to PNG bytes, one set per workload, one per swept setting
of a `devicebench sweep`, and one summary.

Every number drawn comes from the comparison rows (`devicebench.results.compare.Row`), so a chart and the table
beside it cannot disagree. matplotlib is imported inside the functions: `import devicebench` stays light, and
figures are built with `matplotlib.figure.Figure` rather than pyplot, so no global backend or figure registry
is touched (nothing to `plt.close`, nothing left open in a notebook that imports us). Titles are wrapped here
(`_title`): a workload's name from an imported file can be longer than a chart is wide, and nothing drawn may leave
the picture. Not with matplotlib's own `wrap=True`, which measures the text as mathtext whatever `text.parse_math`
says, so a name such as `$\\frac$` would stop the report.

    python -c "from devicebench.report.plots import summary_chart; help(summary_chart)"
"""

from __future__ import annotations

import functools
import io
import math
import os
import re
import statistics
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from devicebench.report.text import device_kind, span_text, steps_label, swept_value
from devicebench.results.compare import Row
from devicebench.results.speed_settings import SPEED_SETTINGS
from devicebench.results.stats import Spread
from devicebench.workloads import Published

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

T = TypeVar("T")
_MATPLOTLIB_FOLDER: list[tempfile.TemporaryDirectory] = []  # the process's own matplotlib folder, when it needs one
Colour = tuple[float, float, float]  # red, green, blue in 0..1, as matplotlib takes them

DPI = 110  # dots per inch: a 7-inch chart is 770 pixels wide, sharp on screen and small inlined
CHART_WIDTH_IN = 7.0
ROW_HEIGHT_IN = 0.42  # per bar, and half as much again for each extra line of a wrapped label
CHART_MARGIN_HEIGHT_IN = 1.5  # title, axis label and legend
LABEL_WIDTH_CHARS = 34  # longer row labels wrap instead of squeezing the plot
TITLE_WIDTH_CHARS = 70  # a title's characters that fit a chart's width at the title's size
ACCURACY_PLOT_HEIGHT_IN = 3.6  # title, axes and axis labels; the legend under them adds its lines
LEGEND_LINE_HEIGHT_IN = 0.2  # a line of small legend text
ACCURACY_LEGEND_COLUMNS = 2
SYNTHETIC_HATCH = "///"  # synthetic-data bars are hatched, so a glance tells them from real data
PUBLISHED_MARKER = "D"
CURVE_MARKERS = "osv^PX"  # one shape per accuracy curve, so curves that coincide still show each row
NICE_RATIOS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # speedup axis ticks
ANNOTATION_ROOM = 0.7  # decades of free axis past the largest speedup, per decade of data: room for the labels
SWEEP_PANEL_HEIGHT_IN = 3.2  # throughput, and the ratio panel under it
MOST_SWEEP_LINES = 8  # more lines than this on one panel is a tangle: then the other swept settings are held
LOG_SCALE_SPAN = 10  # a sweep panel whose values span more than this factor gets a log axis, so slow lines show
SWEPT_EVERYWHERE = ("batch_size", "workers")  # every workload's sweepable settings; the rest come from --set
OTHER_SPEED_SETTINGS = tuple(name for name in SPEED_SETTINGS if name not in (*SWEPT_EVERYWHERE, "overrides"))
ESTIMATE_PLOT_HEIGHT_IN = 7.2  # the square plot (as wide as the chart, less its tick labels), title and axis labels
ESTIMATE_LEGEND_COLUMNS = 3
ESTIMATE_ROOM = 1.4  # the axes reach this factor past the lowest and highest figure drawn
RUN_MARKER = "D"  # a run of the report's results; the published figures are small dots


@dataclass(frozen=True)
class Chart:
    slug: str  # file stem for --png: "mnist-cnn2-epoch-time"
    title: str  # the image's alt text: what a reader without the picture is missing
    png: bytes
    caption: str = ""  # how to read the chart, where its title alone does not say


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
    ratios: tuple[SweepLine, ...]  # Row.speedup, error bars its 95% interval
    ratio_name: str  # "GPU/CPU" when every ratio is a GPU's over a CPU's; empty when there are no ratios
    held: tuple[tuple[str, str], ...]  # other swept settings held at their first value, when every line is too many


@dataclass(frozen=True)
class EstimatedPoint:
    """A throughput the roofline estimated beforehand beside the one measured: a point of the estimated-against-
    measured chart."""

    label: str  # "resnet50 on cuda:0 (H100 SXM), fp32, run 1a2b3c4d"
    gpu: str  # the catalog's name of the GPU: one colour each
    estimated: float  # samples/s
    measured: float  # samples/s
    interval: tuple[float, float] | None  # the estimate's interval in samples/s, drawn as a bar; None: none drawn


@dataclass(frozen=True)
class EstimatedAgainstMeasured:
    """What the estimated-against-measured chart draws: the report's GPU runs, each estimated by a fit made without
    the user's runs, and the published figures the roofline is fitted on, each estimated by a fit without it."""

    runs: tuple[EstimatedPoint, ...]
    published: tuple[EstimatedPoint, ...]
    level: float  # of every interval: 0.8
    lines: tuple[str, ...] = ()  # a sentence per run, as `devicebench run` prints it
    published_ratio: float | None = None  # a published figure's interval: its estimate times or divided by this

    @property
    def gpus(self) -> list[str]:
        """Every GPU drawn, those of the runs first: they take the palette's strongest colours."""
        ran = sorted({point.gpu for point in self.runs})
        return ran + sorted({point.gpu for point in self.published} - set(ran))


def keep_matplotlib_out_of_a_guessed_home() -> None:
    """Give matplotlib a temporary folder of this process's (removed at exit) for its font cache where it would
    otherwise write into a home folder Python guessed: HOME unset, and neither MPLCONFIGDIR nor the XDG folders
    matplotlib reads set (files.user_folder says why a guessed home is not written to). Call before importing it."""
    if os.name != "posix" or os.environ.get("HOME", "").strip() or _MATPLOTLIB_FOLDER:
        return
    if any(os.environ.get(name, "").strip() for name in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")):
        return
    _MATPLOTLIB_FOLDER.append(tempfile.TemporaryDirectory(prefix="devicebench-matplotlib-"))
    os.environ["MPLCONFIGDIR"] = _MATPLOTLIB_FOLDER[0].name


def _text_as_given(draw: Callable[..., T]) -> Callable[..., T]:
    """Names come from other machines' files: a `$` in one is a dollar sign, never mathtext (which a name such as
    `$\\frac$` would make fail). Text takes the setting when it is created, so it holds while charts are built."""

    @functools.wraps(draw)
    def drawn(*arguments: Any, **options: Any) -> T:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*arguments, **options)

    return drawn


@_text_as_given
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
        Chart(f"{file_stem(workload)}-{kind}", f"{workload}: {title}", _png(figure), caption=caption)
        for kind, title, figure, caption in drawn
        if figure is not None
    ]


def steady_epoch_lengths(rows: Sequence[Row]) -> list[tuple[int, int]]:
    """(steps, samples) of the steady epochs of `rows`, each length once: their times compare only when there is
    one. No matplotlib: numbers only."""
    return sorted({(epoch.steps, epoch.samples) for row in rows for epoch in row.steady_epochs})


@_text_as_given
def summary_chart(rows_by_workload: Mapping[str, Sequence[Row]]) -> Chart | None:
    """The speedup of every row that has one, across all workloads; None when no row has a speedup."""
    measured = [(name, row) for name, rows in rows_by_workload.items() for row in rows if _has_speedup(row)]
    if not measured:
        return None
    labels = [f"{name}: {row.label}" for name, row in measured]
    palette = _palette(len(rows_by_workload))
    colour_of = dict(zip(rows_by_workload, palette))
    figure, axes = _bar_figure(labels)
    _draw_speedups(axes, [row for _, row in measured], [colour_of[name] for name, _ in measured])
    axes.set_title(_title("Speedup against the baseline, every workload"))
    _legend(figure, axes, [row for _, row in measured])
    return Chart("summary-speedup", "Speedup across all workloads", _png(figure))


@_text_as_given
def sweep_charts(workload: str, rows: Sequence[Row]) -> list[Chart]:
    """The "Sweeps" charts of one workload's grid points, one per setting `sweep_series` finds; none when no
    numeric setting varies."""
    return [
        Chart(
            f"{file_stem(workload)}-sweep-{file_stem(sweep.setting)}",
            _sweep_alt_text(workload, sweep),
            _png(_sweep_figure(workload, sweep)),
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


def file_stem(name: str) -> str:
    """`name` as a safe, readable file name part: workload names from imported files may hold anything."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "workload"


# --- the per-workload charts -------------------------------------------------------------------------------


def _epoch_time_figure(workload: str, rows: Sequence[Row], steps: str) -> Figure | None:
    """`steps`: how many steps every steady epoch had, the same in every row."""
    if all(row.epoch_time_s is None for row in rows):
        return None
    figure, axes = _bar_figure([row.label for row in rows])
    _draw_spread_bars(axes, rows, [row.epoch_time_s for row in rows], unit="s", digits=2)
    axes.set_xlabel("steady epoch time, s (median; whiskers: min–max)")
    axes.set_title(_title(f"{workload}: steady {steps}-step epoch time (shorter is faster)"))
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
    axes.set_title(_title(f"{workload}: samples per second (longer is faster)"))
    _legend(figure, axes, rows)
    return figure


def _speedup_figure(workload: str, rows: Sequence[Row]) -> Figure | None:
    if not any(_has_speedup(row) for row in rows):
        return None
    figure, axes = _bar_figure([row.label for row in rows])
    _draw_speedups(axes, rows, _palette(len(rows)))
    axes.set_title(_title(f"{workload}: speedup against the baseline"))
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

    labels = [_wrap(steps_label(row) if lengths_differ else row.label) for row, curve in curves if curve]
    if published and published.accuracy is not None:
        labels.append(f"published {published.accuracy_kind} accuracy")
    legend_lines = math.ceil(sum(label.count("\n") + 1 for label in labels) / ACCURACY_LEGEND_COLUMNS)
    figure = Figure(
        figsize=(CHART_WIDTH_IN, ACCURACY_PLOT_HEIGHT_IN + LEGEND_LINE_HEIGHT_IN * legend_lines),
        dpi=DPI,
        layout="constrained",
    )
    axes = figure.add_subplot()
    drawn = [(row, curve, colour) for (row, curve), colour in zip(curves, _palette(len(rows))) if curve]
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
        )
    if published and published.accuracy is not None:
        axes.axhline(published.accuracy * 100, color="black", linestyle=":", linewidth=1.2, label=labels[-1])
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_formatter(PercentFormatter())  # decimals chosen from the tick spacing: no 100%, 100%
    axes.set_xlabel("epoch (1 is warm-up); accuracy: median over repeats")
    axes.set_ylabel("test accuracy, %")
    axes.set_title(
        _title(
            f"{workload}: test accuracy per epoch"
            + (" (dashed: synthetic data)" if any(_is_synthetic(row) for row in rows) else "")
        )
    )
    axes.grid(alpha=0.3)
    figure.legend(fontsize="small", loc="outside lower center", ncols=ACCURACY_LEGEND_COLUMNS, frameon=False)
    return figure


def scaling_series(rows: Sequence[Row]) -> dict[str, list[tuple[int, float]]]:
    """Per machine and device that ran with more than one process count: (processes, median samples/s), in
    increasing order of processes. Rows that differ in anything but the process count and threads are not mixed."""
    groups: dict[tuple, dict[int, float]] = {}
    for row in rows:
        if row.samples_per_s is None:
            continue
        same_work = tuple(str(row.settings[name]) for name in SPEED_SETTINGS if name not in ("world_size", "threads"))
        key = (f"{row.machine_name}/{row.device}", same_work)
        groups.setdefault(key, {})[row.settings["world_size"]] = row.samples_per_s.median
    return {label: sorted(points.items()) for (label, _), points in groups.items() if len(points) > 1}


def _scaling_figure(workload: str, rows: Sequence[Row]) -> Figure | None:
    series = scaling_series(rows)
    if not series:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(CHART_WIDTH_IN, SWEEP_PANEL_HEIGHT_IN), layout="constrained")
    axes = figure.add_subplot()
    for colour, (label, points) in zip(_palette(len(series)), series.items()):
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
    axes.set_title(_title(f"{workload}: throughput against the number of processes"))
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


# --- sweeps ------------------------------------------------------------------------------------------------


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
    with_ratio = [row for row in rows if _has_speedup(row)]
    kinds = {(device_kind(row.device).upper(), device_kind(row.baseline.device).upper()) for row in with_ratio}
    return Sweep(
        setting=setting,
        throughput=_sweep_lines(
            [
                (
                    label,
                    _swept_number(row, setting),
                    row.samples_per_s.median,
                    row.samples_per_s.low,
                    row.samples_per_s.high,
                )
                for label, row in labelled
                if row.samples_per_s is not None
            ]
        ),
        ratios=_sweep_lines(
            [
                (label, _swept_number(row, setting), row.speedup.ratio, row.speedup.low, row.speedup.high)
                for label, row in labelled
                if _has_speedup(row)
            ]
        ),
        ratio_name="/".join(kinds.pop()) if len(kinds) == 1 else ("row/baseline" if kinds else ""),
        held=held,
    )


def _sweep_lines(points: Sequence[tuple[str, float, float, float | None, float | None]]) -> tuple[SweepLine, ...]:
    """(label, x, y, low, high) points as lines, in the order their labels first come, each sorted by x."""
    by_label: dict[str, list[tuple[float, float, float | None, float | None]]] = {}
    for label, *point in points:
        by_label.setdefault(label, []).append(tuple(point))
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
        for index, (line, colour) in enumerate(zip(sweep.throughput, _palette(len(sweep.throughput))))
    }
    scale = _draw_sweep_lines(axes[0], sweep.throughput, styles)
    axes[0].set_ylabel(f"samples/s{scale}\n(median; error bars: min–max)")
    axes[0].set_title(_title(f"{workload}: training throughput against {sweep.setting}"))
    if sweep.ratios:
        scale = _draw_sweep_lines(axes[1], sweep.ratios, styles)
        axes[1].axhline(1, color="black", linewidth=1)  # as fast as the baseline
        axes[1].set_ylabel(f"{sweep.ratio_name} throughput ratio (x){scale}\n(error bars: 95% interval)")
        axes[1].set_title(_title(f"{workload}: {sweep.ratio_name} throughput ratio against {sweep.setting}"))
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
            label=_wrap(line.label),
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
            "95% interval, where there is more than one sample)."
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


# --- estimated against measured -----------------------------------------------------------------------------


@_text_as_given
def estimate_chart(comparison: EstimatedAgainstMeasured) -> Chart | None:
    """The estimated-against-measured chart; None when there is no point to draw."""
    figure = estimate_figure(comparison)
    if figure is None:
        return None
    return Chart(
        "estimated-against-measured",
        _estimate_alt_text(comparison),
        _png(figure),
        caption=_estimate_caption(comparison),
    )


def estimate_figure(comparison: EstimatedAgainstMeasured) -> Figure | None:
    """Measured samples/s against estimated, log-log, one colour per GPU: the runs as diamonds with their interval
    as a horizontal bar (inside it where the bar crosses the diagonal), the published figures as dots between the
    dashed lines of their interval."""
    if not comparison.runs and not comparison.published:
        return None
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter

    gpus = comparison.gpus
    colour_of = dict(zip(gpus, _gpu_palette(len(gpus))))
    ratio = comparison.published_ratio if comparison.published else None
    level = f"{comparison.level:.0%}"
    handles = [Line2D([], [], linestyle="", marker="o", color=colour_of[gpu], label=gpu) for gpu in gpus]
    handles += (
        [
            Line2D(
                [],
                [],
                linestyle="",
                marker=RUN_MARKER,
                markerfacecolor="white",
                markeredgecolor="black",
                color="black",
                label=f"run here; bar: its {level} interval",
            )
        ]
        if comparison.runs
        else []
    )
    handles += (
        [
            Line2D(
                [],
                [],
                linestyle="",
                marker="o",
                markersize=4,
                color="gray",
                label="published figure, estimated without it",
            )
        ]
        if comparison.published
        else []
    )
    handles += [Line2D([], [], color="black", linewidth=1, label="measured = estimated")]
    handles += (
        [Line2D([], [], color="gray", linestyle="--", linewidth=1, label=f"{level} interval of a published figure")]
        if ratio is not None
        else []
    )
    legend_lines = math.ceil(len(handles) / ESTIMATE_LEGEND_COLUMNS)
    figure = Figure(
        figsize=(CHART_WIDTH_IN, ESTIMATE_PLOT_HEIGHT_IN + LEGEND_LINE_HEIGHT_IN * legend_lines),
        dpi=DPI,
        layout="constrained",
    )
    axes = figure.add_subplot()
    for gpu in gpus:
        published = [point for point in comparison.published if point.gpu == gpu]
        if published:
            axes.scatter(
                [point.estimated for point in published],
                [point.measured for point in published],
                s=14,
                color=colour_of[gpu],
                alpha=0.6,
                linewidths=0,
                gid=gpu,
                zorder=2,
            )
        for point in (point for point in comparison.runs if point.gpu == gpu):
            bar = (
                None
                if point.interval is None
                else [[point.estimated - point.interval[0]], [point.interval[1] - point.estimated]]
            )
            drawn = axes.errorbar(
                [point.estimated],
                [point.measured],
                xerr=bar,
                fmt=RUN_MARKER,
                color=colour_of[gpu],
                markeredgecolor="black",
                markersize=8,
                capsize=4,
                elinewidth=1.6,
                zorder=4,
            )
            drawn.set_label(point.label)
            drawn.lines[0].set_gid(gpu)
    figures = [
        value
        for point in (*comparison.runs, *comparison.published)
        for value in (point.estimated, point.measured, *(point.interval or ()))
    ]
    low, high = min(figures) / ESTIMATE_ROOM, max(figures) * ESTIMATE_ROOM
    axes.plot([low, high], [low, high], color="black", linewidth=1, zorder=1)
    if ratio is not None:
        for factor in (ratio, 1 / ratio):
            axes.plot([low, high], [low * factor, high * factor], color="gray", linestyle="--", linewidth=1, zorder=1)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.set_box_aspect(1)  # square: equal decades on both axes, the diagonal at 45 degrees
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,g}"))  # 1,000 rather than 10³
    axes.grid(alpha=0.3, which="major")
    axes.set_xlabel("estimated beforehand, samples/s (log scale)")
    axes.set_ylabel("measured, samples/s (log scale; above the diagonal: faster)")
    axes.set_title(_title("Training throughput, estimated against measured"))
    figure.legend(
        handles=handles, fontsize="small", loc="outside lower center", ncols=ESTIMATE_LEGEND_COLUMNS, frameon=False
    )
    return figure


def _estimate_caption(comparison: EstimatedAgainstMeasured) -> str:
    level = f"{comparison.level:.0%}"
    sentences = [
        "Samples/s the roofline of devicebench estimate gives beforehand (across) against those measured "
        "(up), waits for data left out of both; on the black diagonal they agree. One colour per GPU."
    ]
    if comparison.runs:
        sentences.append(
            f"Diamonds: the GPU runs here, each estimated by a fit on the public record, the seeds' "
            f"published figures and devicebench's committed runs, none of yours; the bar is the "
            f"estimate's split-conformal interval at {level}, and the measured figure is inside it where "
            f"the bar crosses the diagonal."
        )
    if comparison.published:
        band = (
            ""
            if comparison.published_ratio is None
            else (
                f"; between the dashed lines, the {level} interval their errors give (the estimate times or divided by "
                f"{comparison.published_ratio:.2f})"
            )
        )
        sentences.append(
            f"Dots: the {len(comparison.published)} published figures the roofline is fitted on, each "
            f"estimated by a fit without it (leave one out){band}."
        )
    return " ".join(sentences)


def _estimate_alt_text(comparison: EstimatedAgainstMeasured) -> str:
    """Every run's numbers, and how many published figures on how many GPUs: the chart without the picture."""
    runs = "; ".join(
        f"{point.label}: estimated {point.estimated:,.0f}"
        + ("" if point.interval is None else f" [{point.interval[0]:,.0f}–{point.interval[1]:,.0f}]")
        + f", measured {point.measured:,.0f}"
        for point in comparison.runs
    )
    published = len({point.gpu for point in comparison.published})
    return (
        f"Estimated against measured samples/s, log-log. {runs + '. ' if runs else ''}"
        f"{len(comparison.published)} published figures on {published} GPUs, each estimated without it."
    )


def _gpu_palette(count: int) -> list[Colour]:
    """A colour per GPU, all different: tab20's darker ten first, then its lighter ten, then a sampled rainbow."""
    from matplotlib import colormaps

    paired = colormaps["tab20"].colors
    colours = list(paired[0::2]) + list(paired[1::2])
    if count <= len(colours):
        return colours[:count]
    rainbow = colormaps["turbo"]
    return [tuple(rainbow(index / (count - 1))[:3]) for index in range(count)]


# --- drawing helpers -----------------------------------------------------------------------------------------


def _bar_figure(labels: Sequence[str]) -> tuple[Figure, Axes]:
    """A horizontal-bar figure tall enough for `labels`, first label at the top (the table's order)."""
    from matplotlib.figure import Figure

    wrapped = [_wrap(label) for label in labels]
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
    for index, (row, value, colour) in enumerate(zip(rows, values, _palette(len(rows)))):
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


def _draw_speedups(axes: Axes, rows: Sequence[Row], colours: Sequence[Colour]) -> None:
    """Bars from 1x to each ratio on a log axis (slower rows point left), 95% intervals as error bars."""
    from matplotlib.ticker import FixedLocator, FuncFormatter

    extremes = [1.0]
    for index, (row, colour) in enumerate(zip(rows, colours)):
        value = row.speedup
        if not _has_speedup(row):
            text = (
                "baseline (1x)"
                if row.baseline is row
                else "tuned: its gain over seed mode is listed above"
                if row.against_seed_mode
                else "no speedup: see the table"
            )
            axes.text(1, index, f"  {text}", va="center", fontsize="small", color="dimgray")
            continue
        has_interval = value.low is not None and value.high is not None
        axes.barh(
            index,
            value.ratio - 1,
            left=1,
            color=colour,
            alpha=0.85,
            edgecolor="white",
            hatch=SYNTHETIC_HATCH if _is_synthetic(row) else None,
        )
        if has_interval:
            axes.errorbar(
                value.ratio,
                index,
                xerr=[[value.ratio - value.low], [value.high - value.ratio]],
                fmt="none",
                ecolor="black",
                capsize=3,
                elinewidth=1,
            )
        right = max(value.ratio, value.high if has_interval else value.ratio, 1.0)
        interval = f" [{value.low:.2f}–{value.high:.2f}]" if has_interval else ""
        axes.text(right * 1.04, index, f"{value.ratio:.2f}x{interval}", va="center", fontsize="small")
        extremes += [value.ratio, *((value.low, value.high) if has_interval else ())]
    low = min(extremes) / 1.25
    decades = max(math.log10(max(extremes) / low), 0.5)
    high = max(extremes) * 10 ** (decades * ANNOTATION_ROOM)  # the value labels take about 40% of the width
    axes.set_xscale("log")
    axes.set_xlim(low, high)
    axes.xaxis.set_major_locator(FixedLocator([tick for tick in NICE_RATIOS if low <= tick <= high]))
    axes.xaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.axvline(1, color="black", linewidth=1)
    axes.set_xlabel("speedup, times (log scale; error bars: 95% interval)")


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


def _has_speedup(row: Row) -> bool:
    """Whether the row has a speedup against another device's row: a baseline row's own 1x says nothing, and a tuned
    row's gain over seed mode on its own device is listed apart from the speedups (Tuned mode against seed mode)."""
    return row.speedup is not None and row.baseline is not row and not row.against_seed_mode


def _is_synthetic(row: Row) -> bool:
    return row.settings["data_source"] == "synthetic"


def _palette(count: int) -> list[Colour]:
    """One colour per row, the same across a workload's charts, so a row is found by colour as well as name."""
    from matplotlib import colormaps

    colours = colormaps["tab10"].colors
    return [colours[index % len(colours)] for index in range(count)]


def _wrap(label: str) -> str:
    return textwrap.fill(label, LABEL_WIDTH_CHARS, break_on_hyphens=False)


def _title(text: str) -> str:
    return textwrap.fill(text, TITLE_WIDTH_CHARS, break_on_hyphens=False)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
