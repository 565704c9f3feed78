"""The tables of `devicebench estimate`: predicted figures, set apart from measured ones by their title, a range on
every number and the word "estimated"; and `--validate`'s scores of the roofline against every measured point.

    devicebench estimate cifar10-mlp --on t4,h100-sxm --data synthetic
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from devicebench.estimate.validation import Validation, coverage, median_absolute_error
from devicebench.report.fitting import FittedTable, fitted
from devicebench.report.text import duration_text, rate_text
from devicebench.results.datasheets import RENTED_HOSTS

if TYPE_CHECKING:
    from devicebench.estimate.points import RooflineFit
    from devicebench.estimate.targets import Baseline, Estimate

HOST_BOUND = "host (eager loop)"
BOUNDS = {  # what each bound means, and what would move it
    "compute": "the matrix arithmetic at the GPU's peak (share fitted): a faster GPU or lower precision helps",
    "memory traffic": "bytes to and from GPU memory: a GPU with more bandwidth, or fewer, fused kernels help",
    "host-to-device copy": "copying each batch to the GPU: data held on the GPU helps",
    "kernel launches": "the host launching kernels one by one: a larger batch or torch.compile helps; a faster GPU "
    "does not",
    HOST_BOUND: "the host's Python and dispatch of each call (more for a convolution), the loop's own work a "
    "step and the batch received from loader workers, in devicebench's eager loop (fitted on measured GPU runs): a "
    "larger batch, fewer calls, data held on the GPU or the step captured as a CUDA graph help; a faster GPU does not",
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


def _speedup_text(estimate: Estimate) -> str:
    """The estimated speedup over the CPU here, with why it is no speedup in the same cell where the two are not
    like for like: a batch the CPU did not train at (a budget made it smaller), a precision it did not run."""
    from devicebench.reproduce import not_a_speedup, unlike  # the workload registry: torch, as `estimate` has

    text = _times_text(estimate.speedup, estimate.speedup_range)
    if estimate.baseline is None:
        return text
    here = (estimate.baseline.batch_size or estimate.batch_size, "fp32", estimate.baseline.data_source)
    return not_a_speedup(text, unlike([(estimate.batch_size, estimate.precision, here[2])], here))


def _clock_text(baseline: Baseline) -> str:
    """On which clock a baseline's rate was taken, with its wall-clock rate where that is another."""
    if baseline.wall_reason is not None:
        return f"on the wall clock: {baseline.wall_reason}"
    wall = (
        ""
        if baseline.wall_samples_per_s is None
        else f"; {rate_text(baseline.wall_samples_per_s[0])} on the wall clock"
    )
    return f"on its training thread's CPU time{wall}"


def _duration(seconds: float) -> str:
    return duration_text(seconds) if seconds >= 1 else f"{seconds * 1000:,.0f} ms"


def _money(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}" if value < 1 else f"{value:,.2f}"  # 0.00078: a cent's share


def estimate_table(estimates: Sequence[Estimate]) -> FittedTable:
    """One line per (workload, GPU): estimated samples/s, epoch time, speedup over the device measured here, what
    bounds the step and, with prices, the cost of an epoch and of the seed's run."""
    priced = any(estimate.price_per_hour is not None for estimate in estimates)
    table = Table(title="ESTIMATED, not measured: GPUs that are not here (interval in brackets)", title_justify="left")
    for column in (
        "Workload",
        "GPU",
        "Samples/s",
        "Epoch",
        "Speedup",
        "Bound by",
        *(("Cost/epoch", "Cost/run") if priced else ()),
    ):
        table.add_column(
            column,
            justify="left" if column in ("Workload", "GPU", "Bound by") else "right",
            overflow="fold",
            no_wrap=column in ("Workload", "GPU"),
        )
    for estimate in estimates:
        table.add_row(
            estimate.workload,
            estimate.target.key,
            _range_text(estimate.samples_per_s, estimate.samples_per_s_range),
            _duration(estimate.epoch_s),  # its interval is the samples/s one's, and in the JSON
            _speedup_text(estimate),
            estimate.step.bound,
            *((_money(estimate.cost_per_epoch), _money(estimate.cost_per_run)) if priced else ()),
        )
    return fitted(table, leading=2)


def estimate_notes(estimates: Sequence[Estimate], fitted: RooflineFit) -> list[str]:
    """What the table rests on: the baselines, the precision and host assumed, the bounds it names, the fit and the
    interval."""
    notes = []
    baselines = {
        (estimate.workload, estimate.baseline.device, estimate.baseline.data_source, estimate.batch_size): estimate
        for estimate in estimates
        if estimate.baseline
    }
    for (workload, device, source, asked), estimate in sorted(baselines.items()):
        baseline = estimate.baseline
        assert baseline is not None  # as kept above
        trained = baseline.batch_size
        smaller = (
            f" at batch {trained} (the estimate is at {asked}: a smaller batch fit this machine's time budget)"
            if trained is not None and trained != asked
            else ""
        )
        notes.append(
            f"{workload}: speedups are over {device}, measured here at {rate_text(baseline.samples_per_s[0])} "
            f"samples/s (its fastest steady epoch, {_clock_text(baseline)}){smaller} ({source} data)."
        )
    for workload, note in dict.fromkeys(
        (estimate.workload, note) for estimate in estimates for note in estimate.profile_notes
    ):
        notes.append(f"{workload}: {note}.")
    notes.append("Precision: " + _per_gpu(estimates, lambda estimate: PRECISION_WORDS[estimate.precision]) + ".")
    hosts = _per_gpu(estimates, _host_text)
    if any(estimate.step.input_s and not estimate.step.serial_input for estimate in estimates):
        notes.append(f"Input pipeline: timed here, scaled to the host's cores ({hosts}).")
    if any(estimate.step.input_s and estimate.step.serial_input for estimate in estimates):
        notes.append(
            "Input pipeline without loader workers: timed here on one core and not scaled (the loop prepares each "
            "batch itself, on one core there as here)."
        )
    if any(estimate.baseline and estimate.baseline.data_source == "synthetic" for estimate in estimates):
        notes.append("Synthetic data: no input pipeline is estimated (the batches are made once, in memory).")
    if any(estimate.price_per_hour is not None for estimate in estimates):
        runs = ", ".join(sorted({f"{estimate.workload} {estimate.epochs}" for estimate in estimates}))
        notes.append(f"Cost/run: the seed's epochs ({runs}) at the estimated epoch time and the price per hour.")
    for bound in dict.fromkeys(estimate.step.bound for estimate in estimates):
        notes.append(f"Bound by {bound}: {BOUNDS[bound]}.")
    if any(estimate.mode == "tuned" and estimate.step.bound == HOST_BOUND for estimate in estimates):
        notes.append(
            "Tuned mode: its trial may capture the whole step as one CUDA graph on a GPU (kept where faster), which "
            "the host's terms do not model (no GPU run with one has been measured): where the host binds, such a "
            "step may run faster than estimated, at most at the GPU's own time."
        )
    notes.append(f"Fitted on {len(fitted.points)} published and measured GPU figures: {fitted.efficiency.describe()}.")
    intervals = dict.fromkeys(estimate.interval.note for estimate in estimates if estimate.interval)
    notes += [f"Interval: {note}." for note in intervals]
    if any(estimate.interval is None for estimate in estimates):
        notes.append("No interval: too few held-out errors for the level asked.")
    notes.append("`devicebench estimate --validate` scores the fit on every figure.")
    return notes


PRECISION_WORDS = {
    "fp32": "fp32 on the CUDA cores",
    "tf32": "TF32 on the tensor cores",
    "amp-fp16": "fp16 autocast on the tensor cores",
    "amp-bf16": "bf16 autocast on the tensor cores",
}


def _per_gpu(estimates: Sequence[Estimate], text: Callable[[Estimate], str]) -> str:
    """ "v100-sxm2 fp32, h100-sxm bf16": one text per GPU, or one for all when they agree."""
    texts = {estimate.target.key: text(estimate) for estimate in estimates}
    if len(set(texts.values())) == 1:
        return next(iter(texts.values()))
    return "; ".join(f"{key} {value}" for key, value in texts.items())


def _host_text(estimate: Estimate) -> str:
    if estimate.host_cores is None:
        return f"this machine's {os.cpu_count()} cores"
    rented = RENTED_HOSTS.get(estimate.target.key)
    where = f", as {rented.instance}" if rented is not None and rented.cores == estimate.host_cores else ""
    return f"{estimate.host_cores} cores{where}"


def validation_table(
    scored: dict[str, list[Validation]],
    level: float,
    title: str = "The roofline scored on every figure, each predicted by a fit made without it",
) -> FittedTable:
    """The three schemes side by side: how far off each point is when predicted without it, its GPU or its model,
    and how many fell inside the interval the other points' errors state."""
    table = Table(title=title, title_justify="left")
    for column in ("Left out", "Figures", "Median error", f"Inside the {level:.0%} interval", "Interval"):
        table.add_column(column, justify="left" if column == "Left out" else "right", overflow="fold")
    for scheme, validations in scored.items():
        inside, judged = coverage(validations)
        median = median_absolute_error(validations)
        widths = [validation.interval.high_ratio for validation in validations if validation.interval]
        table.add_row(
            SCHEME_NAMES[scheme],
            f"{len(validations)}",
            "—" if median is None else f"{median:.0%}",
            f"{inside} of {judged} ({inside / judged:.0%})" if judged else "—",
            f"×÷{statistics.median(widths):.2f}" if widths else "—",
        )
    return fitted(table)


SCHEME_NAMES = {"leave one out": "the figure", "leave one GPU out": "its GPU", "leave one model out": "its model"}


def group_table(
    validations: Sequence[Validation], group: Callable[[Validation], str], title: str, heading: str
) -> FittedTable:
    """One line per group (a model, a GPU): its figures' median error and bias, and how many its interval held."""
    table = Table(title=title, title_justify="left")
    for column in (heading, "Figures", "Median error", "Bias", "Inside"):
        table.add_column(column, justify="left" if column == heading else "right", overflow="fold")
    groups: dict[str, list[Validation]] = {}
    for validation in validations:
        groups.setdefault(group(validation), []).append(validation)
    for name, members in sorted(groups.items(), key=lambda item: -len(item[1])):
        inside, judged = coverage(members)
        table.add_row(
            name,
            f"{len(members)}",
            f"{median_absolute_error(members):.0%}",
            f"{statistics.median(validation.error for validation in members):+.0%}",
            f"{inside} of {judged}" if judged else "—",
        )
    return fitted(table)


def validation_summary(scored: dict[str, list[Validation]], fitted: RooflineFit, level: float) -> list[str]:
    lines = [
        "Error: predicted samples/s over measured, minus one; bias: its median, with its sign. Inside: the "
        f"figure fell within the {level:.0%} split-conformal interval that the errors of the figures outside "
        "its group state."
    ]
    pinned = ", ".join(f"{name} {count}" for name, count in fitted.pinned.items())
    lines.append(
        f"Fitted on all {len(fitted.points)} figures: {fitted.efficiency.describe()}. Figures each share "
        f"rests on (a tenth of their step or more): {pinned}."
    )
    reasons: dict[str, int] = {}
    for unscored in fitted.unscored:
        reasons[unscored.why] = reasons.get(unscored.why, 0) + 1
    for why, count in sorted(reasons.items(), key=lambda item: -item[1]):
        lines.append(f"Not scored: {count} figure{'s' if count > 1 else ''}: {why}.")
    return lines
