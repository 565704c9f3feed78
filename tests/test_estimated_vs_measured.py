"""A GPU run beside what the roofline estimated for it beforehand: the line `devicebench run` prints, the runs that
get none and why, and the report's estimated-against-measured chart (one colour per GPU, the interval as bars).

Every test but the last fits nothing: the fit is a small fake (FakeFit) whose efficiencies and intervals are
chosen here. The last, marked slow, fits the real roofline once.

    python -m pytest tests/test_estimated_vs_measured.py -q
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import result_fixtures
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer
from rich.text import Text

from devicebench.cli.run import run_tables
from devicebench.estimate import against_measured as estimated
from devicebench.estimate.against_measured import EstimatedAgainstMeasured
from devicebench.estimate.points import shape_of
from devicebench.estimate.roofline import PRIOR, Efficiency, Point, Resolved, predict
from devicebench.estimate.validation import Interval
from devicebench.report.estimate_plots import estimate_figure, run_line
from devicebench.report.html import write_report
from devicebench.results.datasheets import catalog_entry
from devicebench.workloads import get_workload

H100 = "NVIDIA H100 80GB HBM3"  # torch's name of the H100 SXM
A100 = "NVIDIA A100-SXM4-80GB"
MEASURED_STEP_S = 0.045  # gpu_run's median steady step, waits for data left out
CIFAR10_MLP_BATCH = 32  # cifar10-mlp's default batch
OWN_MODEL = "my-model"  # a model of a user's own: no workload of that name is registered


def gpu_run(device_name: str, *, device: str = "cuda:0", mode: str = "seed", workload: str = "cifar10-mlp", **settings):
    """A finished run: a warm-up epoch, then epochs of 0.5 s (0.1 s waiting, 10 steps) and 0.7 s (0.05 s waiting,
    13 steps): steps of 0.04 s and 0.05 s once the waits are left out, 0.045 s their median."""
    record = result_fixtures.run(device, [2.0, 0.5, 0.7], workload=workload)
    waits, steps = [0.3, 0.1, 0.05], [10, 10, 13]
    epochs = [
        dataclasses.replace(epoch, input_wait_s=wait, steps=count)
        for epoch, wait, count in zip(record.epochs, waits, steps)
    ]
    known = dict(get_workload(workload).defaults) if workload != OWN_MODEL else {}
    run_settings = dataclasses.replace(record.settings, mode=mode, hyperparameters=known, **settings)
    return dataclasses.replace(record, device_name=device_name, epochs=epochs, settings=run_settings)


def session(*runs):
    return result_fixtures.session(result_fixtures.machine("box", "m1"), list(runs))


@dataclass
class FakeFit:
    """What estimate/against_measured.py reads of a RooflineFit, with figures chosen by the test."""

    half_width: float  # every interval's, on a log scale
    efficiency: Efficiency = field(default_factory=lambda: Efficiency(PRIOR.copy()))
    points: list[Point] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)  # log(measured / estimated) of each point, left out

    def interval_for(self, workload: str, sheet, level: float) -> Interval:
        return Interval(level, self.half_width, 40, "leave one model out")

    def log_errors(self, scheme: str) -> np.ndarray:
        assert scheme == "leave one out"
        return np.array(self.errors)


@pytest.fixture
def fake_fit(monkeypatch) -> FakeFit:
    fitted = FakeFit(half_width=math.log(2))
    monkeypatch.setattr(estimated, "_fit", lambda: fitted)
    return fitted


@pytest.fixture
def no_fit(monkeypatch):
    """Fails the test if anything fits the roofline."""

    def refused():
        raise AssertionError("the roofline was fitted")

    monkeypatch.setattr(estimated, "_fit", refused)


def step_s(precision: str = "fp32", gpu: str = "h100-sxm") -> tuple[float, float]:
    """(the device seconds, the copy seconds) the prior efficiencies give cifar10-mlp's default step on `gpu`."""
    workload = get_workload("cifar10-mlp")
    resolved = Resolved.of(shape_of(workload, dict(workload.defaults)), catalog_entry(gpu), precision)
    step = predict(resolved, Efficiency(PRIOR.copy()))
    return step.device_s, step.copy_s


# --- the line `devicebench run` prints ------------------------------------------------------------------------


def test_the_line_sets_the_measured_figure_beside_the_estimate_and_its_interval(fake_fit):
    device_s, _ = step_s()
    estimate_rate = CIFAR10_MLP_BATCH / device_s
    measured_rate = CIFAR10_MLP_BATCH / MEASURED_STEP_S  # 711.1 samples/s, waits left out
    slower = estimate_rate / measured_rate
    fake_fit.half_width = math.log(slower) * 1.01  # just wide enough to hold the measured figure
    found = estimated.run_estimate(gpu_run(H100))
    assert isinstance(found, estimated.RunEstimate)
    assert found.measured == pytest.approx(measured_rate, rel=1e-12)
    assert found.estimated == pytest.approx(estimate_rate, rel=1e-12)
    low, high = found.interval
    assert low == pytest.approx(estimate_rate / slower**1.01, rel=1e-9)
    assert high == pytest.approx(estimate_rate * slower**1.01, rel=1e-9)
    assert found.sheet.key == "h100-sxm" and found.precision == "fp32" and found.inside

    def three_figures(value: float) -> str:
        return f"{float(f'{value:.3g}'):,.0f}"

    assert run_line(found) == (
        f"cifar10-mlp on cuda:0 ({H100}): measured 711 samples/s; estimated beforehand {three_figures(estimate_rate)} "
        f"({three_figures(low)}–{three_figures(high)} at 80%), fp32: inside the interval"
    )
    fake_fit.half_width = math.log(slower) * 0.99  # just too narrow
    outside = estimated.run_estimate(gpu_run(H100))
    assert outside.inside is False
    assert run_line(outside).endswith(f"fp32: outside: {slower:,.{1 if slower < 10 else 0}f}x slower than estimated")


def test_a_run_fed_by_loader_workers_is_estimated_with_each_batch_received_from_them(fake_fit):
    fake_fit.efficiency = Efficiency(PRIOR.copy(), host=np.array([40e-6, 0.0, 0.0, 1e-3]))  # a call; a batch
    workload = get_workload("cifar10-mlp")
    calls = shape_of(workload, dict(workload.defaults)).kernels
    device_s, _ = step_s()
    assert calls * 40e-6 > device_s  # the host bounds the step
    alone = estimated.run_estimate(gpu_run(H100, workers=0))
    fed = estimated.run_estimate(gpu_run(H100, workers=4))
    assert alone.estimated == pytest.approx(CIFAR10_MLP_BATCH / (calls * 40e-6), rel=1e-12)
    assert fed.estimated == pytest.approx(CIFAR10_MLP_BATCH / (calls * 40e-6 + 1e-3), rel=1e-12)


@pytest.mark.parametrize(
    ("measured", "estimate", "interval", "verdict"),
    [
        (2790.0, 2650.0, (2010.0, 3490.0), "fp32: inside the interval"),
        (4240.0, 2650.0, (2010.0, 3490.0), "fp32: outside: 1.6x faster than estimated"),
        (1000.0, 2500.0, (2010.0, 3490.0), "fp32: outside: 2.5x slower than estimated"),
        (2915.0, 2650.0, None, "fp32: 1.1x faster than estimated"),
    ],
)
def test_the_verdict_says_inside_or_outside_and_how_far(measured, estimate, interval, verdict):
    found = estimated.RunEstimate(
        run=dataclasses.replace(gpu_run(H100), workload="resnet50"),
        sheet=catalog_entry("h100-sxm"),
        precision="fp32",
        compiled=False,
        estimated=estimate,
        interval=interval,
        level=0.8,
        measured=measured,
    )
    bounds = "no interval" if interval is None else "2,010–3,490 at 80%"
    assert run_line(found) == (
        f"resnet50 on cuda:0 ({H100}): measured {measured:,.0f} samples/s; estimated beforehand "
        f"{estimate:,.0f} ({bounds}), {verdict}"
    )


def test_a_tuned_run_is_estimated_at_the_precision_it_recorded(fake_fit):
    device_s, copy_s = step_s("tf32")
    tf32 = estimated.run_estimate(gpu_run(H100, mode="tuned", tf32_matmul=True, tf32_cudnn=True))
    assert tf32.precision == "tf32" and tf32.estimated == pytest.approx(CIFAR10_MLP_BATCH / device_s, rel=1e-12)
    assert tf32.estimated > estimated.run_estimate(gpu_run(H100)).estimated  # TF32 tensor cores: a faster estimate
    resident = estimated.run_estimate(
        gpu_run(H100, mode="tuned", tf32_matmul=True, tf32_cudnn=True, device_resident=True, compiled=True)
    )
    assert copy_s > 0  # a dataset held on the GPU copies no batch: the copy leaves the estimated step
    assert resident.estimated == pytest.approx(CIFAR10_MLP_BATCH / (device_s - copy_s), rel=1e-12)
    assert " tf32 with torch.compile (counted unfused): " in run_line(resident)
    bf16 = estimated.run_estimate(gpu_run(H100, mode="tuned", precision="bf16", tf32_matmul=True, tf32_cudnn=True))
    assert bf16.precision == "amp-bf16"  # autocast: the roofline's bf16 tensor cores and half the bytes
    assert bf16.estimated == pytest.approx(CIFAR10_MLP_BATCH / step_s("amp-bf16")[0], rel=1e-12)


@pytest.mark.parametrize(
    ("settings", "precision"),
    [
        ({"mode": "seed"}, "fp32"),
        ({"mode": "tuned"}, "fp32"),  # TF32 off on both switches
        ({"mode": "tuned", "tf32_matmul": True, "tf32_cudnn": True}, "tf32"),
        ({"mode": "tuned", "precision": "bf16", "tf32_matmul": True, "tf32_cudnn": True}, "amp-bf16"),
    ],
)
def test_the_precision_comes_from_the_mode_and_the_tuning_recorded(settings, precision):
    assert estimated.run_precision(dataclasses.replace(gpu_run(H100).settings, **settings)) == precision


def test_runs_that_cannot_be_estimated_say_why_and_fit_nothing(no_fit):
    why = {
        "cpu": estimated.run_estimate(gpu_run("Test CPU", device="cpu")),
        "unknown": estimated.run_estimate(gpu_run("NVIDIA Imaginary 9000")),
        "own": estimated.run_estimate(gpu_run(H100, workload=OWN_MODEL)),
        "ranks": estimated.run_estimate(gpu_run(H100, world_size=2)),
        "failed": estimated.run_estimate(dataclasses.replace(gpu_run(H100), status="failed")),
        "mixed": estimated.run_estimate(gpu_run(H100, mode="tuned", tf32_matmul=True)),
        "fp16": estimated.run_estimate(gpu_run(H100, mode="tuned", precision="fp16")),
    }
    assert why["cpu"] == "ran on cpu, not on a GPU"
    assert why["unknown"] == "the NVIDIA Imaginary 9000 is not in the datasheet catalog"
    assert why["own"] == "not a registered torch workload (a model of your own cannot be rebuilt from its record)"
    assert why["ranks"] == "trained in 2 processes: their communication is not modelled"
    assert why["failed"].startswith("failed")
    assert why["mixed"].startswith("TF32 was on for matrix products or for convolutions, not for both")
    assert why["fp16"] == "precision 'fp16' is not one the roofline estimates"


def test_recurrent_layers_under_bf16_are_two_precisions_at_once(no_fit):
    why = estimated.run_estimate(
        gpu_run(H100, workload="imdb-bilstm", mode="tuned", precision="bf16", tf32_matmul=True, tf32_cudnn=True)
    )
    assert why == (
        "bf16 autocast with recurrent layers kept in fp32: the roofline runs every matrix kernel at one precision"
    )


def test_run_prints_a_line_per_gpu_run_after_the_tables_and_none_for_the_cpu(fake_fit, monkeypatch):
    shown = list(run_tables(session(gpu_run("Test CPU", device="cpu"), gpu_run(H100)), wide=False))
    lines = [item.plain for item in shown if isinstance(item, Text) and "estimated beforehand" in item.plain]
    assert lines == [run_line(estimated.run_estimate(gpu_run(H100)))]
    assert shown[-1].plain == lines[0]  # after every table
    monkeypatch.setattr(estimated, "_fit", lambda: pytest.fail("a CPU-only session fitted the roofline"))
    cpu_only = list(run_tables(session(gpu_run("Test CPU", device="cpu")), wide=False))
    assert not any(isinstance(item, Text) and "estimated beforehand" in item.plain for item in cpu_only)


# --- the report's chart --------------------------------------------------------------------------------------


def published_point(gpu: str, observed_s: float, batch: int = 64, kind: str = "step") -> Point:
    nothing = np.zeros(1)
    resolved = Resolved(nothing, nothing, np.zeros(1, dtype=int), np.zeros(1, dtype=int), np.zeros(1, dtype=int), 0.0)
    return Point(
        label=f"resnet50 on the {gpu}",
        source="a post",
        workload="resnet50",
        sheet=catalog_entry(gpu),
        precision="fp32",
        resolved=resolved,
        batch_size=batch,
        observed_s=observed_s,
        kind=kind,
    )


@pytest.fixture
def comparison(fake_fit) -> EstimatedAgainstMeasured:
    """Two runs on the H100 SXM, one on the A100 80GB SXM, a CPU run; four published figures on the V100 and the
    H100, one GPU-busy figure (no samples/s: left out) and one no fit could leave out (NaN: left out)."""
    fake_fit.points = [
        published_point("v100-sxm2", 0.2),
        published_point("v100-sxm2", 0.4),
        published_point("h100-sxm", 0.05),
        published_point("v100-sxm2", 0.1, batch=32),
        published_point("t4", 0.3, kind="busy"),
        published_point("t4", 0.3),
    ]
    fake_fit.errors = [0.1, -0.2, 0.3, -0.05, 0.0, math.nan]
    result = session(
        gpu_run(H100),
        gpu_run(H100, mode="tuned", tf32_matmul=True, tf32_cudnn=True),
        gpu_run(A100),
        gpu_run("Test CPU", device="cpu"),
    )
    return estimated.estimated_against_measured([result])


def test_the_chart_points_are_the_runs_estimates_and_the_published_figures_left_out(comparison):
    h100, h100_tuned, a100 = (
        estimated.run_estimate(run)
        for run in (gpu_run(H100), gpu_run(H100, mode="tuned", tf32_matmul=True, tf32_cudnn=True), gpu_run(A100))
    )
    assert [(point.gpu, point.estimated, point.measured, point.interval) for point in comparison.runs] == [
        ("H100 SXM", h100.estimated, h100.measured, h100.interval),
        ("H100 SXM", h100_tuned.estimated, h100_tuned.measured, h100_tuned.interval),
        ("A100 80GB SXM", a100.estimated, a100.measured, a100.interval),
    ]
    assert tuple(run_line(found) for found in comparison.found) == (
        run_line(h100),
        run_line(h100_tuned),
        run_line(a100),
    )
    # estimated: the batch over the step a fit without the point predicts, measured / exp(error)
    assert [point.gpu for point in comparison.published] == ["V100 SXM2", "V100 SXM2", "H100 SXM", "V100 SXM2"]
    assert [(point.estimated, point.measured) for point in comparison.published] == [
        pytest.approx((64 / 0.2 * math.exp(0.1), 64 / 0.2)),
        pytest.approx((64 / 0.4 * math.exp(-0.2), 64 / 0.4)),
        pytest.approx((64 / 0.05 * math.exp(0.3), 64 / 0.05)),
        pytest.approx((32 / 0.1 * math.exp(-0.05), 32 / 0.1)),
    ]
    # the split-conformal 80% interval of the six errors that exist: rank ceil(6 x 0.8) = 5 of 0, .05, .1, .2, .3
    assert comparison.published_ratio == pytest.approx(math.exp(0.3))
    assert comparison.level == 0.8 and comparison.gpus == ["A100 80GB SXM", "H100 SXM", "V100 SXM2"]


def test_the_chart_has_one_colour_per_gpu_and_the_intervals_as_error_bars(comparison):
    figure = estimate_figure(comparison)
    axes = figure.axes[0]
    colours: dict[str, set] = {}
    for collection in axes.collections:
        if isinstance(collection, PathCollection):
            colours.setdefault(collection.get_gid(), set()).update(
                tuple(np.round(colour[:3], 6)) for colour in collection.get_facecolors()
            )
    bars = {}
    for container in axes.containers:
        assert isinstance(container, ErrorbarContainer)
        marker, _, (bar,) = container.lines
        colours.setdefault(marker.get_gid(), set()).add(tuple(np.round(to_rgb(marker.get_color()), 6)))
        (((low, low_y), (high, high_y)),) = bar.get_segments()
        bars[container.get_label()] = (low, high, low_y, high_y, marker.get_ydata()[0])
    assert set(colours) == {"A100 80GB SXM", "H100 SXM", "V100 SXM2"}
    assert all(len(found) == 1 for found in colours.values())  # one colour each...
    assert len({found.pop() for found in colours.values()}) == 3  # ...and no two the same
    assert len(bars) == 3
    for point in comparison.runs:
        low, high, low_y, high_y, measured = bars[point.label]
        assert (low, high) == pytest.approx(point.interval, rel=1e-12)  # the bar is the interval, end to end
        assert low_y == high_y == measured == pytest.approx(point.measured)  # horizontal, at the measured figure
    legend = [text.get_text() for text in figure.legends[0].get_texts()]
    assert legend[:3] == ["A100 80GB SXM", "H100 SXM", "V100 SXM2"]  # the runs' GPUs first, then the others
    dashed = [line for line in axes.get_lines() if line.get_linestyle() == "--"]
    assert sorted(
        np.divide(*line.get_ydata()[::-1]) / np.divide(*line.get_xdata()[::-1]) for line in dashed
    ) == pytest.approx([1.0, 1.0])  # parallel to the diagonal...
    assert sorted(line.get_ydata()[0] / line.get_xdata()[0] for line in dashed) == pytest.approx(
        [math.exp(-0.3), math.exp(0.3)]
    )  # ...at the published figures' interval
    assert axes.get_xscale() == axes.get_yscale() == "log"


def page_text(path) -> str:
    return " ".join(path.read_text().split())


def test_the_report_has_the_section_only_with_points(comparison, tmp_path):
    result = session(gpu_run(H100), gpu_run("Test CPU", device="cpu"))
    without = page_text(write_report([result], tmp_path / "none.html"))
    empty = page_text(write_report([result], tmp_path / "empty.html", estimated=EstimatedAgainstMeasured((), (), 0.8)))
    assert "Estimated against measured" not in without and "Estimated against measured" not in empty
    page = page_text(write_report([result], tmp_path / "report.html", estimated=comparison, png_dir=tmp_path / "png"))
    assert "<h2>Estimated against measured</h2>" in page and '<a href="#estimated">' in page
    assert run_line(comparison.found[0]).replace("'", "&#39;") in page
    first = comparison.runs[0]
    assert (
        f"{first.label}: estimated {first.estimated:,.0f} [{first.interval[0]:,.0f}–{first.interval[1]:,.0f}], "
        f"measured {first.measured:,.0f}"
    ) in page  # the alt text: every run's numbers
    assert "split-conformal interval at 80%" in page and "times or divided by 1.35" in page
    assert (tmp_path / "png" / "estimated-against-measured.png").read_bytes().startswith(b"\x89PNG")


def test_a_report_of_cpu_runs_fits_nothing(no_fit):
    assert estimated.estimated_against_measured([session(gpu_run("Test CPU", device="cpu"))]) is None


# --- the real fit, once --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_real_fit_is_made_once_without_the_runs_of_the_database(monkeypatch):
    from devicebench.estimate import points

    asked = []

    def recorded(stored):
        asked.append(list(stored))
        return points.fit_roofline(stored)

    monkeypatch.setattr(estimated, "fit_roofline", recorded)
    estimated._fit.cache_clear()
    found = [estimated.run_estimate(gpu_run(H100)) for _ in range(2)]
    assert asked == [[]]  # once a process, on the record, the seeds and the committed runs: none of the user's
    fitted = estimated._fit()
    sheet = catalog_entry("h100-sxm")
    interval = fitted.interval_for("cifar10-mlp", sheet, 0.8)
    # the committed H200 runs are points of cifar10-mlp, and the record's of the H100: held out as a point is
    assert interval.scheme == "leave one out"
    assert (found[0].estimated, found[0].interval) == (found[1].estimated, found[1].interval)
    assert found[0].interval == pytest.approx(
        (found[0].estimated / interval.high_ratio, found[0].estimated / interval.low_ratio), rel=1e-12
    )
    estimated._fit.cache_clear()


def test_a_report_of_many_copies_of_a_run_profiles_its_step_once(fake_fit, monkeypatch):
    profiled = []
    shape = estimated.precise_shape
    monkeypatch.setattr(
        estimated,
        "precise_shape",
        lambda workload, hyperparameters, precision: profiled.append(1) or shape(workload, hyperparameters, precision),
    )
    estimated._profiled.cache_clear()
    comparison = estimated.estimated_against_measured([session(*(gpu_run(H100) for _ in range(40)))])
    assert len(comparison.runs) == 40 and len(profiled) == 1
    estimated._profiled.cache_clear()
