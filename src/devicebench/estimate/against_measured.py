"""What `devicebench estimate` would have said of a GPU run before it ran, beside what the run measured: the line
`devicebench run` prints after a GPU run, and the points of the report's estimated-against-measured chart.

The roofline is fitted as `devicebench estimate` fits it, without the user's database (`fit_roofline([])`: the public
record, the seeds' published figures and the runs committed under results/), so that no run is estimated by a fit
made on itself. The fit profiles every record row (about 15 s on two cores): it is made once a process, and only
once a run passes every check that needs no fit, never for a CPU-only session.

    python -c "from devicebench.estimate.against_measured import run_estimate; help(run_estimate)"
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from devicebench.choices import KERNEL_PRECISIONS, KernelPrecision
from devicebench.estimate.points import (
    RooflineFit,
    fit_roofline,
    median_step_s,
    precise_shape,
    registered,
)
from devicebench.estimate.roofline import Resolved, StepShape, predict, run_precision
from devicebench.estimate.validation import conformal
from devicebench.results.datasheets import Datasheet, datasheet_for
from devicebench.results.schema import Result, RunRecord

LEVEL = 0.8  # the interval's stated level, as `devicebench estimate` states it by default
RECORD_SCHEME = "leave one out"  # how each published figure is estimated for the chart: by a fit without it


@dataclass(frozen=True)
class RunEstimate:
    """One finished GPU run: the samples/s the roofline estimates for it, and the samples/s it measured."""

    run: RunRecord
    sheet: Datasheet  # the catalog's entry for the run's GPU
    precision: KernelPrecision  # what its matrix kernels were estimated at: what the run recorded
    compiled: bool  # torch.compile fused its kernels; the roofline counts them as eager mode launches them
    estimated: float  # samples/s
    interval: tuple[float, float] | None  # samples/s at `level`; None where the held-out errors are too few
    level: float
    measured: float  # samples/s: the batch over the median steady step, waits for data left out

    @property
    def inside(self) -> bool | None:
        if self.interval is None:
            return None
        return self.interval[0] <= self.measured <= self.interval[1]

    def verdict(self) -> str:
        """Whether the measured figure fell inside the interval, and if not, how far from the estimate."""
        ratio = self.measured / self.estimated
        if self.inside:
            return "inside the interval"
        factor = ratio if ratio >= 1 else 1 / ratio
        times = f"{factor:,.{1 if factor < 10 else 0}f}x {'faster' if ratio >= 1 else 'slower'} than estimated"
        return times if self.inside is None else f"outside: {times}"


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
    found: tuple[
        RunEstimate, ...
    ] = ()  # the runs estimated, as `devicebench run` states them (report.estimate_plots.run_line)
    published_ratio: float | None = None  # a published figure's interval: its estimate times or divided by this

    @property
    def gpus(self) -> list[str]:
        """Every GPU drawn, those of the runs first: they take the palette's strongest colours."""
        ran = sorted({point.gpu for point in self.runs})
        return ran + sorted({point.gpu for point in self.published} - set(ran))


def run_estimate(run: RunRecord, level: float = LEVEL) -> RunEstimate | str:
    """The roofline's estimate for `run`, a finished run on a CUDA device, or why there is none. Only a run of a
    registered torch workload, in one process, on a GPU of the catalog with compute peaks, at a precision it
    recorded, can be estimated; every check that needs no fit comes first."""
    if not run.device.startswith("cuda"):
        return f"ran on {run.device}, not on a GPU"
    if run.status != "ok" or not run.steady_epochs:
        return f"{run.status}, with {len(run.steady_epochs)} steady epochs: no steady figure to set beside it"
    sheet = datasheet_for(run.device_name)
    if sheet is None:
        return f"the {run.device_name} is not in the datasheet catalog"
    if sheet.fp32_tflops is None:
        return f"no citable source gives the {sheet.product}'s compute peaks"
    workload = registered(run.workload)
    if workload is None or workload.trainer is not None:
        return "not a registered torch workload (a model of your own cannot be rebuilt from its record)"
    if run.settings.world_size != 1:
        return f"trained in {run.settings.world_size} processes: their communication is not modelled"
    precision = run_precision(run.settings)
    if precision not in KERNEL_PRECISIONS:
        return precision  # why it cannot be told
    measured_s = median_step_s(run)
    if isinstance(measured_s, str):
        return measured_s
    try:
        hyperparameters = workload.typed_hyperparameters(run.settings.hyperparameters)
        workload.parameter_count(hyperparameters)  # its size bounds first: nothing is built past them
        shape = _profiled(workload.name, tuple(sorted(hyperparameters.items())), precision)
        if isinstance(shape, str):
            return shape
        resolved = Resolved.of(shape, sheet, precision)
        fitted = _fit()
    except (ValueError, TypeError, KeyError, RuntimeError) as error:  # EstimateError, PrecisionError, ModelTooLarge
        return f"{workload.name} cannot be estimated as it ran: {error}"
    device_s = predict(resolved.as_ran(run.settings), fitted.efficiency).computing_s  # the GPU's, or the host's
    interval = fitted.interval_for(workload.name, sheet, level)
    rates = None
    if interval is not None:
        fastest_s, slowest_s = interval.seconds(device_s)
        rates = (shape.batch_size / slowest_s, shape.batch_size / fastest_s)
    return RunEstimate(
        run=run,
        sheet=sheet,
        precision=precision,
        compiled=run.settings.compiled,
        estimated=shape.batch_size / device_s,
        interval=rates,
        level=level,
        measured=shape.batch_size / measured_s,
    )


@functools.lru_cache(maxsize=64)
def _profiled(name: str, settings: tuple[tuple[str, Any], ...], precision: KernelPrecision) -> StepShape | str:
    """The step of runs of one kind, profiled once a process: a report of 400 copies of a run profiles one."""
    workload = registered(name)
    assert workload is not None  # run_estimate asked the registry first
    return precise_shape(workload, dict(settings), precision)


@functools.cache
def _fit() -> RooflineFit:
    """`devicebench estimate`'s fit without the user's database: once a process, and only when a run needs it."""
    return fit_roofline([])


def run_estimates(result: Result) -> list[RunEstimate]:
    """Each run of `result` the roofline can estimate; none of the others (a CPU's, a model of your own, a GPU not in
    the catalog)."""
    return [found for run in result.runs if isinstance(found := run_estimate(run), RunEstimate)]


def estimated_against_measured(results: Iterable[Result], level: float = LEVEL) -> EstimatedAgainstMeasured | None:
    """The chart's points: every run of `results` the roofline can estimate, and every published figure it was
    fitted on, estimated by a fit without it. None when no run can be estimated: a report of CPU runs makes no fit."""
    found = [
        estimate
        for result in results
        for run in result.runs
        if isinstance(estimate := run_estimate(run, level), RunEstimate)
    ]
    if not found:
        return None
    runs = tuple(
        EstimatedPoint(
            label=f"{estimate.run.workload} on {estimate.run.device} ({estimate.sheet.product}),"
            f" {estimate.precision}, run {estimate.run.run_id[:8]}",
            gpu=estimate.sheet.product,
            estimated=estimate.estimated,
            measured=estimate.measured,
            interval=estimate.interval,
        )
        for estimate in found
    )
    fitted = _fit()
    log_errors = fitted.log_errors(RECORD_SCHEME)  # log(measured / estimated) of each point's seconds
    published = tuple(
        EstimatedPoint(
            label=point.label,
            gpu=point.sheet.product,
            estimated=point.batch_size * math.exp(error) / point.observed_s,
            measured=point.batch_size / point.observed_s,
            interval=None,
        )
        for point, error in zip(fitted.points, log_errors)
        if point.kind == "step" and math.isfinite(error)
    )  # a "busy" point's time is not its samples/s
    record_interval = conformal(log_errors, level, RECORD_SCHEME)
    return EstimatedAgainstMeasured(
        runs=runs,
        published=published,
        level=level,
        found=tuple(found),
        published_ratio=None if record_interval is None else record_interval.high_ratio,
    )
