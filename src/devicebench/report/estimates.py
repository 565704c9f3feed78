"""The tables of `devicebench estimate`: predicted figures, set apart from measured ones by their title, a range on
every number and the word "estimated"; and `--validate`'s scores of the roofline against every measured point.

    devicebench estimate cifar10-mlp --on t4,h100-sxm --data synthetic
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from devicebench.report.tables import duration_text
from devicebench.report.tables import FittedTable, fitted, number_text, rate_text
from devicebench.results.roofline import Validation, coverage, median_absolute_error

if TYPE_CHECKING:
    from devicebench.estimating import Calibration, Estimate

BOUNDS = {  # what each bound means, and what would move it
    "compute": "the matrix arithmetic at the GPU's peak (share fitted): a faster GPU or lower precision helps",
    "memory traffic": "bytes to and from GPU memory: a GPU with more bandwidth, or fewer, fused kernels help",
    "host-to-device copy": "copying each batch to the GPU: data held on the GPU helps",
    "kernel launches": "the host launching kernels one by one: a larger batch or torch.compile helps; a faster GPU "
                       "does not",
    "input pipeline": "loading and augmenting batches on this machine's cores: more loader workers or faster "
                      "decoding help; a GPU does not",
}


def _short(value: float) -> str:
    """7.1k, 44k, 186k, 1.2M: a bound of an interval, to the precision it has."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.{0 if value >= 10 * scale else 1}f}{suffix}"
    return f"{value:.0f}"


def _range_text(value: float, bounds: tuple[float, float] | None) -> str:
    text = rate_text(value)
    return text + " (no interval)" if bounds is None else f"{text} ({_short(bounds[0])}–{_short(bounds[1])})"


def _times_text(value: float | None, bounds: tuple[float, float] | None) -> str:
    if value is None:
        return "—"
    text = f"{value:,.{1 if value < 10 else 0}f}x"
    return text if bounds is None else f"{text} ({_short(bounds[0])}–{_short(bounds[1])}x)"


def _duration(seconds: float) -> str:
    return duration_text(seconds) if seconds >= 1 else f"{seconds * 1000:,.0f} ms"


def _money(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}" if value < 1 else f"{value:,.2f}"  # 0.00078: a cent's share


def estimate_table(estimates: Sequence[Estimate]) -> FittedTable:
    """One line per (workload, GPU): estimated samples/s, epoch time, speedup over the device measured here, what
    bounds the step and, with prices, the cost of an epoch and of the seed's run."""
    priced = any(estimate.price_per_hour is not None for estimate in estimates)
    table = Table(title="ESTIMATED, not measured: GPUs that are not here (interval in brackets)",
                  title_justify="left")
    for column in ("Workload", "GPU", "Samples/s", "Epoch", "Speedup", "Bound by",
                   *(("Cost/epoch", "Cost/run") if priced else ())):
        table.add_column(column, justify="left" if column in ("Workload", "GPU", "Bound by") else "right",
                         overflow="fold", no_wrap=column in ("Workload", "GPU"))
    for estimate in estimates:
        table.add_row(
            estimate.workload, estimate.target.key,
            _range_text(estimate.samples_per_s, estimate.samples_per_s_range),
            _duration(estimate.epoch_s),  # its interval is the samples/s one's, and in the JSON
            _times_text(estimate.speedup, estimate.speedup_range),
            estimate.step.bound,
            *((_money(estimate.cost_per_epoch), _money(estimate.cost_per_run)) if priced else ()),
        )
    return fitted(table, leading=2)


def estimate_notes(estimates: Sequence[Estimate], fitted: Calibration) -> list[str]:
    """What the table rests on: the baselines, the bounds it names, the interval, the caveats."""
    notes = []
    baselines = {(estimate.workload, estimate.baseline.device, estimate.baseline.samples_per_s[0],
                  estimate.baseline.data_source) for estimate in estimates if estimate.baseline}
    for workload, device, rate, source in sorted(baselines):
        notes.append(f"{workload}: speedups are over {device}, measured here at {rate_text(rate)} samples/s "
                     f"({source} data).")
    for workload, note in dict.fromkeys((estimate.workload, note) for estimate in estimates
                                        for note in estimate.profile_notes):
        notes.append(f"{workload}: {note}.")
    if any(estimate.price_per_hour is not None for estimate in estimates):
        runs = ", ".join(sorted({f"{estimate.workload} {estimate.epochs}" for estimate in estimates}))
        notes.append(f"Cost/run: the seed's epochs ({runs}) at the estimated epoch time and the price per hour.")
    for bound in dict.fromkeys(estimate.step.bound for estimate in estimates):
        notes.append(f"Bound by {bound}: {BOUNDS[bound]}.")
    efficiency = fitted.efficiency
    notes.append(f"Fitted on {len(fitted.points)} measured points: matrix kernels at {efficiency.compute:.0%} of the "
                 f"datasheet peak, memory traffic at {efficiency.memory:.0%} of its bandwidth, "
                 f"{efficiency.launch_s * 1e6:,.0f} µs of host time per kernel launched.")
    notes.append("Interval: " + (fitted.interval.note if fitted.interval else
                                 f"none: {len(fitted.points)} points are too few for leave-one-out errors to span "
                                 "a range") + "; `devicebench estimate --validate` scores every point.")
    if any(estimate.step.input_s for estimate in estimates):
        notes.append("The input pipeline is timed on this machine's cores: a GPU machine with other cores loads at "
                     "its own speed.")
    notes.append("Seed settings: fp32 on the GPU's CUDA cores, no TF32, eager; the points come mostly from "
                 "TensorFlow posts, whose per-step overhead is not PyTorch's.")
    return notes


def validation_table(validations: Sequence[Validation]) -> FittedTable:
    """Each point predicted by a fit made without it: the error and whether its interval held it."""
    table = Table(title="Leave-one-out: each measured point predicted by a fit made without it", title_justify="left")
    for column in ("Point", "Measured", "Estimated", "Error", "Interval", "Inside"):
        table.add_column(column, justify="left" if column in ("Point", "Inside") else "right", overflow="fold")
    for validation in validations:
        point = validation.point
        batch = point.shape.batch_size
        what = " samples/busy s" if point.kind == "busy" else " samples/s"
        measured = batch / point.observed_s
        interval = validation.interval
        table.add_row(
            f"{point.label}\n[dim]{point.source}[/]",
            f"{number_text(measured, 0)}{what}",
            f"{number_text(batch / validation.predicted_s, 0)}{what}",
            f"{validation.error:+.0%}",
            "— (too few points)" if interval is None else
            f"{number_text(batch / interval.seconds(validation.predicted_s)[1], 0)}–"
            f"{number_text(batch / interval.seconds(validation.predicted_s)[0], 0)}",
            {True: "yes", False: "[bold red]no[/]", None: "—"}[validation.inside],
        )
    return fitted(table)


def validation_summary(validations: Sequence[Validation], fitted: Calibration) -> list[str]:
    median = median_absolute_error(validations)
    inside, judged = coverage(validations)
    lines = [f"Median absolute error: {'—' if median is None else f'{median:.0%}'} over {len(validations)} points "
             "(predicted samples/s over measured, minus one)."]
    lines.append(f"Inside their interval: {inside} of {judged}" + (f" ({inside / judged:.0%})" if judged else "")
                 + "; each point's interval comes from the other points' leave-one-out errors.")
    lines.append("'samples/busy s' points: the post gave the GPU's utilisation, so the GPU's busy share of the "
                 "step is compared, as samples per busy second.")
    for unscored in fitted.unscored:
        lines.append(f"Not scored: {unscored.label} ({unscored.source}): {unscored.why}.")
    return lines
