"""The estimated-against-measured chart: the samples/s the roofline of `devicebench estimate` gives beforehand
against those measured, log-log, for the report's GPU runs and the published figures the roofline is fitted on.
estimate/against_measured.py hands it an EstimatedAgainstMeasured; this module only draws it, and words each run's
line.

    python -c "from devicebench.report.estimate_plots import estimate_figure; help(estimate_figure)"
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from devicebench.report.charts import (
    CHART_WIDTH_IN,
    DPI,
    LEGEND_LINE_HEIGHT_IN,
    Chart,
    Colour,
    listed_colours,
    png,
    text_as_given,
    wrapped_title,
)
from devicebench.report.text import rate_text

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from devicebench.estimate.against_measured import EstimatedAgainstMeasured, RunEstimate

ESTIMATE_PLOT_HEIGHT_IN = 7.2  # the square plot (as wide as the chart, less its tick labels), title and axis labels
ESTIMATE_LEGEND_COLUMNS = 3
ESTIMATE_ROOM = 1.4  # the axes reach this factor past the lowest and highest figure drawn
RUN_MARKER = "D"  # a run of the report's results; the published figures are small dots


def run_line(found: RunEstimate) -> str:
    """The sentence `devicebench run` prints after a GPU run: measured, estimated beforehand, and the verdict."""
    interval = (
        "no interval"
        if found.interval is None
        else f"{estimate_text(found.interval[0])}–{estimate_text(found.interval[1])} at {found.level:.0%}"
    )
    compiled = " with torch.compile (counted unfused)" if found.compiled else ""
    return (
        f"{found.run.workload} on {found.run.device} ({found.run.device_name}): measured "
        f"{rate_text(found.measured)} samples/s; estimated beforehand {estimate_text(found.estimated)} "
        f"({interval}), {found.precision}{compiled}: {found.verdict()}"
    )


def estimate_text(samples_per_s: float) -> str:
    """An estimated rate to the three figures it may claim (its interval spans tens of percent): 98,600, 2,650."""
    return rate_text(float(f"{samples_per_s:.3g}"))


@text_as_given
def estimate_chart(comparison: EstimatedAgainstMeasured) -> Chart | None:
    """The estimated-against-measured chart; None when there is no point to draw."""
    figure = estimate_figure(comparison)
    if figure is None:
        return None
    return Chart(
        "estimated-against-measured",
        _estimate_alt_text(comparison),
        png(figure),
        caption=_estimate_caption(comparison),
    )


def estimate_figure(comparison: EstimatedAgainstMeasured) -> Figure | None:
    """Measured samples/s against estimated, log-log, one colour per GPU: the runs as diamonds with their interval
    as a horizontal bar (inside it where the bar crosses the diagonal), the published figures as dots between the
    dashed lines of their interval."""
    if not comparison.runs and not comparison.published:
        return None
    from matplotlib.figure import Figure

    gpus = comparison.gpus
    colour_of = dict(zip(gpus, _gpu_palette(len(gpus))))
    ratio = comparison.published_ratio if comparison.published else None
    handles = _estimate_legend_handles(comparison, colour_of, ratio)
    legend_lines = math.ceil(len(handles) / ESTIMATE_LEGEND_COLUMNS)
    figure = Figure(
        figsize=(CHART_WIDTH_IN, ESTIMATE_PLOT_HEIGHT_IN + LEGEND_LINE_HEIGHT_IN * legend_lines),
        dpi=DPI,
        layout="constrained",
    )
    axes = figure.add_subplot()
    for gpu in gpus:
        _draw_points_of_one_gpu(axes, comparison, gpu, colour_of[gpu])
    _draw_diagonal_and_band(axes, comparison, ratio)
    _label_estimate_axes(axes)
    figure.legend(
        handles=handles, fontsize="small", loc="outside lower center", ncols=ESTIMATE_LEGEND_COLUMNS, frameon=False
    )
    return figure


def _estimate_legend_handles(
    comparison: EstimatedAgainstMeasured, colour_of: Mapping[str, Colour], ratio: float | None
) -> list[Line2D]:
    """The legend's entries: a dot per GPU's colour, then what a diamond, a dot, the diagonal and (where the published
    figures have an interval) the dashed lines mean."""
    from matplotlib.lines import Line2D

    level = f"{comparison.level:.0%}"
    handles = [Line2D([], [], linestyle="", marker="o", color=colour_of[gpu], label=gpu) for gpu in comparison.gpus]
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
    return handles


def _draw_points_of_one_gpu(axes: Axes, comparison: EstimatedAgainstMeasured, gpu: str, colour: Colour) -> None:
    """`gpu`'s published figures as dots, then its runs as diamonds with their interval as a horizontal bar; each
    drawn with the GPU's name as its gid, so a test finds them."""
    published = [point for point in comparison.published if point.gpu == gpu]
    if published:
        axes.scatter(
            [point.estimated for point in published],
            [point.measured for point in published],
            s=14,
            color=colour,
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
            color=colour,
            markeredgecolor="black",
            markersize=8,
            capsize=4,
            elinewidth=1.6,
            zorder=4,
        )
        drawn.set_label(point.label)
        drawn.lines[0].set_gid(gpu)


def _draw_diagonal_and_band(axes: Axes, comparison: EstimatedAgainstMeasured, ratio: float | None) -> None:
    """The diagonal where measured equals estimated, the dashed lines of the published figures' interval (`ratio`
    either side, where there is one), and square log axes reaching ESTIMATE_ROOM past every figure drawn."""
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


def _label_estimate_axes(axes: Axes) -> None:
    """Plain numbers on the ticks, a grid, the axis labels and the title."""
    from matplotlib.ticker import FuncFormatter

    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,g}"))  # 1,000 rather than 10³
    axes.grid(alpha=0.3, which="major")
    axes.set_xlabel("estimated beforehand, samples/s (log scale)")
    axes.set_ylabel("measured, samples/s (log scale; above the diagonal: faster)")
    axes.set_title(wrapped_title("Training throughput, estimated against measured"))


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

    paired = listed_colours("tab20")
    colours = list(paired[0::2]) + list(paired[1::2])
    if count <= len(colours):
        return colours[:count]
    rainbow = colormaps["turbo"]
    return [rainbow(index / (count - 1))[:3] for index in range(count)]  # (red, green, blue, alpha): alpha left out
