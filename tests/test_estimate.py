"""`devicebench estimate`: the roofline's terms, the grid fit, the interval, the estimate's arithmetic, the points it
is fitted on and the command. Every expected number is computed here from the datasheet figures, never copied from
the code's output; only the last test trains (the command's own 20 s CPU baseline).

    python -m pytest -q tests/test_estimate.py --durations=5
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics

import numpy as np
import pytest
import result_fixtures
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.engine.opcount import Kernel, StepProfile
from devicebench.estimating import (
    PUBLISHED_FIGURES,
    UNSCORED,
    Baseline,
    Estimate,
    measured_points,
    published_points,
)
from devicebench.report.estimates import BOUNDS
from devicebench.results.datasheets import DATASHEETS, catalog_entry
from devicebench.results.roofline import (
    COMPUTE_GRID,
    FEWEST_POINTS_FOR_AN_INTERVAL,
    LAUNCH_GRID,
    MEMORY_GRID,
    Efficiency,
    Fitter,
    Interval,
    Point,
    StepShape,
    StepTime,
    Validation,
    interval_from,
    median_absolute_error,
    predict,
    validate,
)
from devicebench.results.store import Store
from devicebench.workloads import get_workload

V100 = catalog_entry("v100-sxm2")  # fp32 15.7 TFLOP/s, 900 GB/s, PCIe 3.0 x16: 15.75 GB/s
H100 = catalog_entry("h100-sxm")  # fp32 67, bf16 989.4 TFLOP/s, 3350 GB/s, PCIe 5.0 x16: 63 GB/s
T4 = catalog_entry("t4")  # fp32 8.1 TFLOP/s, no bf16, 320 GB/s
HALF = Efficiency(compute=0.5, memory=0.5, launch_s=10e-6)


def shape(flops, nbytes, *, low_precision=None, host_to_device_bytes=0.0, batch_size=100) -> StepShape:
    flops = np.asarray(flops, dtype=float)
    low = np.zeros(len(flops), dtype=bool) if low_precision is None else np.asarray(low_precision, dtype=bool)
    return StepShape(batch_size=batch_size, flops=flops, bytes=np.asarray(nbytes, dtype=float), low_precision=low,
                     host_to_device_bytes=host_to_device_bytes)


def invoke(*arguments: str):
    return CliRunner().invoke(app, list(arguments))


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


# --- 1. predict: the roofline's terms ---------------------------------------------------------------------------


def test_the_datasheet_figures_the_arithmetic_below_assumes():
    assert (V100.fp32_tflops, V100.memory_gb_s, V100.host_link_gb_s) == (15.7, 900.0, 15.75)
    assert (H100.fp32_tflops, H100.bf16_tflops) == (67.0, 989.4)
    assert (T4.fp32_tflops, T4.bf16_tflops) == (8.1, None)


def test_predict_takes_each_kernel_at_the_longer_of_its_compute_and_its_memory_time():
    step_shape = shape([1e12, 0.0], [1e6, 3e9], host_to_device_bytes=15.75e6)
    step = predict(step_shape, V100, HALF)
    # kernel 1: 1e12 / (0.5 * 15.7e12) = 0.12739 s of compute against 1e6 / (0.5 * 900e9) = 2.2e-6 s of memory
    # kernel 2: no FLOPs, 3e9 / (0.5 * 900e9) = 6.667e-3 s of memory
    assert step.compute_s == pytest.approx(1e12 / (0.5 * 15.7e12), rel=1e-12)
    assert step.memory_s == pytest.approx(3e9 / (0.5 * 900e9), rel=1e-12)  # kernel 1's memory side is not counted
    assert step.copy_s == pytest.approx(15.75e6 / 15.75e9, rel=1e-12)  # 1 ms
    assert step.launch_s == pytest.approx(2 * 10e-6, rel=1e-12)
    assert (step.input_s, step.serial_input) == (0.0, False)
    device_s = 1e12 / (0.5 * 15.7e12) + 3e9 / (0.5 * 900e9) + 1e-3
    assert step.device_s == pytest.approx(device_s, rel=1e-12)
    assert step.host_s == pytest.approx(2e-5, rel=1e-12)
    assert step.seconds == step.device_s
    assert step.bound == "compute"  # 0.127 s > 6.7 ms > 1 ms

    # a thousand times the second kernel's bytes: 3e12 / 450e9 = 6.67 s of memory outweighs the 0.127 s of compute
    heavier = predict(shape([1e12, 0.0], [1e6, 3e12], host_to_device_bytes=15.75e6), V100, HALF)
    assert heavier.memory_s == pytest.approx(3e12 / (0.5 * 900e9), rel=1e-12)
    assert heavier.bound == "memory traffic"

    # a batch of 15.75e9 bytes: 1 s on the host link outweighs both
    copied = predict(shape([1e12, 0.0], [1e6, 3e9], host_to_device_bytes=15.75e9), V100, HALF)
    assert copied.copy_s == pytest.approx(1.0, rel=1e-12)
    assert copied.bound == "host-to-device copy"


def test_the_input_pipeline_beside_the_loop_bounds_the_step_when_it_is_slowest():
    step_shape = shape([1e12, 0.0], [1e6, 3e9], host_to_device_bytes=15.75e6)
    device_s = 1e12 / (0.5 * 15.7e12) + 3e9 / (0.5 * 900e9) + 1e-3  # 0.1351 s, as above
    workers = predict(step_shape, V100, HALF, input_s=2.0, serial_input=False)
    assert workers.device_s == pytest.approx(device_s, rel=1e-12)
    assert workers.host_s == pytest.approx(2e-5, rel=1e-12)  # workers prepare batches beside the launches
    assert workers.seconds == 2.0  # max(0.1351, 2e-5, 2.0)
    assert workers.bound == "input pipeline"

    serial = predict(step_shape, V100, HALF, input_s=2.0, serial_input=True)
    assert serial.host_s == pytest.approx(2e-5 + 2.0, rel=1e-12)  # the loop launches, then prepares the next batch
    assert serial.seconds == pytest.approx(max(device_s, 2e-5 + 2.0), rel=1e-12)
    assert serial.bound == "input pipeline"

    # a quick serial input pipeline hides behind the GPU: max(0.1351, 2e-5 + 0.01) is the device's
    quick = predict(step_shape, V100, HALF, input_s=0.01, serial_input=True)
    assert quick.host_s == pytest.approx(2e-5 + 0.01, rel=1e-12)
    assert quick.seconds == quick.device_s
    assert quick.bound == "compute"


def test_many_small_kernels_are_bound_by_their_launches():
    kernels = 1000
    step = predict(shape([1e3] * kernels, [1e3] * kernels), V100, HALF)
    # each kernel: 1e3 / 7.85e12 s of compute, 1e3 / 450e9 s = 2.2e-9 s of memory, against 10 us to launch
    assert step.launch_s == pytest.approx(kernels * 10e-6, rel=1e-12)  # 10 ms
    assert step.device_s == pytest.approx(kernels * 1e3 / (0.5 * 900e9), rel=1e-12)  # 2.2 us
    assert step.seconds == step.launch_s
    assert step.bound == "kernel launches"
    # a pipeline beside the loop quicker than the launches leaves them the bound
    assert predict(shape([1e3] * kernels, [1e3] * kernels), V100, HALF, input_s=1e-3).bound == "kernel launches"
    # a serial one slower than the launches takes it over
    assert predict(shape([1e3] * kernels, [1e3] * kernels), V100, HALF, input_s=0.05,
                   serial_input=True).bound == "input pipeline"


def test_a_bf16_matrix_kernel_is_read_against_the_bf16_peak():
    flops = 0.5 * 989.4e12  # one second at half the H100's bf16 peak
    low = predict(shape([flops], [0.0], low_precision=[True]), H100, HALF)
    full = predict(shape([flops], [0.0], low_precision=[False]), H100, HALF)
    assert low.compute_s == pytest.approx(1.0, rel=1e-12)
    assert full.compute_s == pytest.approx(flops / (0.5 * 67e12), rel=1e-12)  # 989.4 / 67 = 14.8 s in fp32
    assert full.compute_s / low.compute_s == pytest.approx(989.4 / 67.0, rel=1e-12)
    # the T4 has no bf16 tensor cores in the catalog: the kernel falls back to its fp32 peak
    on_t4 = predict(shape([flops], [0.0], low_precision=[True]), T4, HALF)
    assert on_t4.compute_s == pytest.approx(flops / (0.5 * 8.1e12), rel=1e-12)


def test_a_step_shape_reads_a_profile_kernel_by_kernel():
    profile = StepProfile(batch_size=32, parameter_bytes=4e6, host_to_device_bytes=393_344.0, kernels=(
        Kernel("aten.mm.default", 2e9, 1e6, 2e5, "bfloat16", True),
        Kernel("aten.mm.default", 3e9, 4e6, 1e6, "float32", True),
        Kernel("aten.relu.default", 0.0, 5e5, 5e5, "float16", False),
        Kernel("aten.addmm.default", 1e9, 1e3, 2e3, "float16", True),
    ))
    step_shape = StepShape.of(profile)
    assert step_shape.batch_size == 32 and step_shape.kernels == 4
    assert step_shape.flops.tolist() == [2e9, 3e9, 0.0, 1e9]
    assert step_shape.bytes.tolist() == [1e6 + 2e5, 4e6 + 1e6, 5e5 + 5e5, 1e3 + 2e3]  # read + written
    assert step_shape.low_precision.tolist() == [True, False, False, True]  # bf16/fp16 matrix kernels only
    assert step_shape.host_to_device_bytes == 393_344.0


# --- 2. Fitter: the grid fit recovers the efficiencies that made the points ---------------------------------------

TRUE = Efficiency(compute=float(COMPUTE_GRID[20]), memory=float(MEMORY_GRID[15]), launch_s=float(LAUNCH_GRID[22]))


def synthetic_points(efficiency: Efficiency = TRUE) -> list[Point]:
    """Two compute-bound, two memory-bound and two launch-bound points, so that any one of them left out, the
    others still pin every efficiency; observed exactly as the roofline predicts with `efficiency`."""
    specs = [
        # (label, sheet, shape, kind): the compute-bound ones have one large matmul and a small copy
        ("compute, V100", V100, shape([2e12], [1e6], host_to_device_bytes=1e6), "step"),
        ("compute, T4", T4, shape([5e11, 1e10], [1e5, 1e5], host_to_device_bytes=2e6), "busy"),
        # no FLOPs at all: bytes only
        ("memory, H100", H100, shape([0.0, 0.0], [2e11, 1e11]), "step"),
        ("memory, A100", catalog_entry("a100-80gb"), shape([0.0], [3e11], host_to_device_bytes=5e5), "busy"),
        # hundreds of tiny kernels: the host's launches set the pace
        ("launches, L4", catalog_entry("l4"), shape([1e3] * 300, [1e3] * 300), "step"),
        ("launches, RTX 4090", catalog_entry("rtx-4090"), shape([1e4] * 500, [1e4] * 500), "step"),
    ]
    points = []
    for label, sheet, step_shape, kind in specs:
        stub = Point(label, "synthetic", step_shape, sheet, observed_s=1.0, kind=kind)
        points.append(dataclasses.replace(stub, observed_s=stub.predicted_s(efficiency)))
    return points


def test_the_synthetic_points_are_bound_as_intended():
    bounds = [predict(point.shape, point.sheet, TRUE).bound for point in synthetic_points()]
    assert bounds == ["compute", "compute", "memory traffic", "memory traffic", "kernel launches", "kernel launches"]


def test_the_fit_recovers_the_efficiencies_that_made_the_points():
    points = synthetic_points()
    fitter = Fitter(points)
    assert fitter.fit() == TRUE
    for index in range(len(points)):  # any one point left out, the others still pin all three
        assert fitter.fit([index]) == TRUE
    ratios = fitter.held_out_ratios()
    assert len(ratios) == len(points)
    assert ratios == pytest.approx([1.0] * len(points), abs=1e-9)
    assert len(fitter.held_out_ratios([0])) == len(points) - 1


def test_validation_of_exact_points_has_no_error_and_every_point_inside():
    validations = validate(synthetic_points())
    assert len(validations) == 6
    for validation in validations:
        assert validation.predicted_s == pytest.approx(validation.point.observed_s, rel=1e-9)
        assert validation.error == pytest.approx(0.0, abs=1e-9)
        assert validation.interval is not None and validation.interval.points == 5  # the other five, held out
        assert validation.inside is True
    assert median_absolute_error(validations) == pytest.approx(0.0, abs=1e-9)


def test_a_point_twice_as_slow_as_the_others_say_moves_its_ratio_and_widens_the_interval():
    points = synthetic_points()
    points[0] = dataclasses.replace(points[0], observed_s=2 * points[0].observed_s)
    fitter = Fitter(points)
    ratios = fitter.held_out_ratios()
    # fitted without it, the five others still give the true efficiencies: observed / predicted = 2 exactly
    assert ratios[0] == pytest.approx(2.0, rel=1e-9)
    interval = interval_from(ratios)
    assert interval is not None and interval.high_ratio >= 2.0
    predicted_s = points[0].observed_s / 2
    low_s, high_s = interval.seconds(predicted_s)
    assert low_s <= points[0].observed_s <= high_s  # the widened interval holds it
    # its own validation: predicted as the others say (error +100%), and outside the interval they give, since
    # without it every other point is exact again
    validation = validate(points)[0]
    assert validation.predicted_s == pytest.approx(predicted_s, rel=1e-9)
    assert validation.error == pytest.approx(1.0, rel=1e-9)
    assert validation.inside is False


# --- 3. the interval ------------------------------------------------------------------------------------------


def test_an_interval_spans_the_held_out_ratios_and_always_holds_the_estimate():
    interval = interval_from([0.8, 1.3, 1.1])
    assert (interval.low_ratio, interval.high_ratio, interval.points) == (0.8, 1.3, 3)
    assert interval.coverage == pytest.approx((3 - 1) / (3 + 1))  # 0.5
    assert interval.seconds(2.0) == pytest.approx((1.6, 2.6))
    above = interval_from([1.2, 1.5])
    assert (above.low_ratio, above.high_ratio) == (1.0, 1.5)  # the estimate itself is inside
    assert above.coverage == pytest.approx(1 / 3)
    below = interval_from([0.7, 0.9])
    assert (below.low_ratio, below.high_ratio) == (0.7, 1.0)
    assert interval_from([1.2] * (FEWEST_POINTS_FOR_AN_INTERVAL - 1)) is None
    assert interval_from([]) is None


def test_a_validation_error_is_the_predicted_rate_over_the_measured_minus_one():
    point = synthetic_points()[0]
    faster = Validation(point, predicted_s=point.observed_s / 2, interval=None)
    assert faster.error == pytest.approx(1.0)  # predicted twice as fast: +100%
    slower = Validation(point, predicted_s=point.observed_s * 4, interval=None)
    assert slower.error == pytest.approx(-0.75)  # predicted a quarter of the rate: -75%
    assert faster.inside is None
    held = Validation(point, predicted_s=point.observed_s / 2, interval=Interval(0.5, 2.0, 3))
    assert held.inside is True  # observed = 2 x predicted, the top of [0.5, 2.0]
    missed = Validation(point, predicted_s=point.observed_s / 2, interval=Interval(0.5, 1.9, 3))
    assert missed.inside is False
    assert median_absolute_error([faster, slower, held]) == pytest.approx(1.0)  # median of 1.0, 0.75, 1.0


# --- 4. the estimate's arithmetic ---------------------------------------------------------------------------


def test_an_estimate_turns_step_seconds_into_rates_epochs_speedups_and_cost():
    step = StepTime(compute_s=0.007, memory_s=0.002, copy_s=0.001, launch_s=1e-4, input_s=0.0, serial_input=False)
    assert step.seconds == pytest.approx(0.01)  # 0.007 + 0.002 + 0.001
    baseline = Baseline("cpu (Test CPU)", (100.0, 90.0, 110.0), "synthetic")
    estimate = Estimate("cifar10-mlp", T4, batch_size=100, step=step, interval=Interval(0.5, 2.0, 4),
                        steps_per_epoch=50, epochs=3, baseline=baseline, price_per_hour=3.6)
    assert estimate.samples_per_s == pytest.approx(100 / 0.01)  # 10,000
    assert estimate.samples_per_s_range == pytest.approx((100 / 0.02, 100 / 0.005))  # (5,000, 20,000)
    assert estimate.epoch_s == pytest.approx(50 * 0.01)  # 0.5 s
    assert estimate.epoch_s_range == pytest.approx((50 * 0.005, 50 * 0.02))
    assert estimate.speedup == pytest.approx(10_000 / 100)
    assert estimate.speedup_range == pytest.approx((5_000 / 110, 20_000 / 90))  # slowest over fastest, and so on
    assert estimate.cost_per_epoch == pytest.approx(0.5 / 3600 * 3.6)  # 0.0005
    assert estimate.cost_per_run == pytest.approx(0.5 / 3600 * 3.6 * 3)
    document = estimate.to_dict()
    assert document["target"] == "t4" and document["bound"] == "compute"
    assert document["samples_per_s"] == pytest.approx(10_000)
    assert document["baseline"]["samples_per_s"] == 100.0
    assert document["interval"]["coverage"] == pytest.approx(3 / 5)

    bare = dataclasses.replace(estimate, interval=None, baseline=None, price_per_hour=None)
    assert bare.samples_per_s == pytest.approx(10_000)
    assert (bare.samples_per_s_range, bare.epoch_s_range, bare.speedup, bare.speedup_range) == (None,) * 4
    assert (bare.cost_per_epoch, bare.cost_per_run) == (None, None)
    no_interval = dataclasses.replace(estimate, interval=None)
    assert no_interval.speedup == pytest.approx(100.0) and no_interval.speedup_range is None


# --- 5. the published points ----------------------------------------------------------------------------------


def test_published_points_are_the_posts_figures_as_step_or_busy_seconds():
    points = published_points()
    assert len(points) == len(PUBLISHED_FIGURES)
    for point, figure in zip(points, PUBLISHED_FIGURES):
        assert point.sheet == catalog_entry(figure.target)
        assert point.kind == ("step" if figure.busy is None else "busy")
        assert point.observed_s == pytest.approx(point.shape.batch_size / figure.samples_per_s * (figure.busy or 1.0))
    mlp = next(point for point in points if point.label.startswith("cifar100-mlp"))
    # S4: 100 epochs of 50,000 images in 343 s, batch 32 (the seed's)
    assert get_workload("cifar100-mlp").defaults["batch_size"] == 32
    assert mlp.shape.batch_size == 32
    assert mlp.observed_s == pytest.approx(32 / (100 * 50_000 / 343), rel=1e-12)
    assert mlp.kind == "step" and mlp.sheet.key == "t4"
    for unscored in UNSCORED:
        assert unscored.why.strip() and unscored.label.strip()


def test_a_busy_figure_is_the_gpus_busy_share_of_the_step(monkeypatch):
    import devicebench.estimating as estimating

    figure = estimating.PublishedFigure("cifar100-mlp", "t4", 1000.0, 0.4, "a post: 1,000 images/s, GPU 40% busy")
    monkeypatch.setattr(estimating, "PUBLISHED_FIGURES", (figure,))
    (point,) = estimating.published_points()
    assert point.kind == "busy"
    assert point.observed_s == pytest.approx(32 / 1000.0 * 0.4, rel=1e-12)  # batch 32 at 1,000/s, 40% of it busy
    assert point.predicted_s(HALF) == predict(point.shape, T4, HALF).device_s  # a busy point is the device's time


# --- 6. the user's runs as points -----------------------------------------------------------------------------


def gpu_run(device_name: str, *, device: str = "cuda:0", mode: str = "seed"):
    """A cifar10-mlp run: a warm-up epoch, then epochs of 0.5 s (0.1 s waiting, 10 steps) and 0.7 s (0.05 s
    waiting, 13 steps)."""
    record = result_fixtures.run(device, [2.0, 0.5, 0.7], workload="cifar10-mlp")
    waits, steps = [0.3, 0.1, 0.05], [10, 10, 13]
    epochs = [dataclasses.replace(epoch, input_wait_s=wait, steps=count)
              for epoch, wait, count in zip(record.epochs, waits, steps)]
    settings = dataclasses.replace(record.settings, mode=mode,
                                   hyperparameters=dict(get_workload("cifar10-mlp").defaults))
    return dataclasses.replace(record, device_name=device_name, epochs=epochs, settings=settings)


def test_a_finished_seed_run_on_a_catalogued_gpu_is_one_point():
    h100 = gpu_run("NVIDIA H100 80GB HBM3")
    tuned = gpu_run("NVIDIA H100 80GB HBM3", mode="tuned")
    elsewhere = gpu_run("NVIDIA H100 NVL")
    cpu = gpu_run("Test CPU", device="cpu")
    failed = dataclasses.replace(gpu_run("NVIDIA H100 80GB HBM3"), status="failed")
    result = result_fixtures.session(result_fixtures.machine("box", "m1"), [h100, tuned, elsewhere, cpu, failed])
    points, unscored = measured_points([result], "your database")
    assert len(points) == 1
    point = points[0]
    # the steady epochs' step without the waits: (0.5 - 0.1) / 10 = 0.04 s and (0.7 - 0.05) / 13 = 0.05 s
    assert point.observed_s == pytest.approx(statistics.median([(0.5 - 0.1) / 10, (0.7 - 0.05) / 13]), rel=1e-12)
    assert point.observed_s == pytest.approx(0.045, rel=1e-12)
    assert point.kind == "step" and point.source == "your database"
    assert point.sheet == H100
    assert point.shape.batch_size == get_workload("cifar10-mlp").defaults["batch_size"]
    assert h100.run_id[:8] in point.label
    # the tuned run and the uncatalogued GPU are listed with why; the CPU run and the failed one are not
    assert len(unscored) == 2
    by_run = {item.label: item.why for item in unscored}
    assert "tuned" in by_run[next(label for label in by_run if tuned.run_id[:8] in label)]
    assert "not in the datasheet catalog" in by_run[next(label for label in by_run if elsewhere.run_id[:8] in label)]
    assert all(item.source == "your database" for item in unscored)


# --- 7. the command, refusals and --validate --------------------------------------------------------------------


def test_an_unknown_gpu_is_refused_with_the_closest_key(tmp_path):
    outcome = invoke("estimate", "cifar10-mlp", "--on", "nosuchgpu", "--db", str(tmp_path / "db.sqlite"))
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "Unknown GPU 'nosuchgpu'." in flat(outcome.output)
    assert "Known: " + ", ".join(sheet.key for sheet in DATASHEETS) in flat(outcome.output)
    close = invoke("estimate", "cifar10-mlp", "--on", "h100-sx", "--db", str(tmp_path / "db.sqlite"))
    assert close.exit_code == EXIT_USAGE, close.output
    assert "Did you mean 'h100-sxm'?" in flat(close.output)
    assert not (tmp_path / "db.sqlite").exists()


def test_a_price_that_is_not_a_number_is_refused(tmp_path):
    outcome = invoke("estimate", "cifar10-mlp", "--on", "t4", "--price", "t4=abc", "--db", str(tmp_path / "db.sqlite"))
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "abc" in outcome.output
    assert not (tmp_path / "db.sqlite").exists()


def test_a_price_for_a_gpu_not_estimated_is_refused(tmp_path):
    outcome = invoke("estimate", "cifar10-mlp", "--on", "t4", "--price", "h100-sxm=2", "--data", "synthetic",
                     "--db", str(tmp_path / "db.sqlite"))
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "--price names h100-sxm, which --on does not estimate" in flat(outcome.output)


def test_validate_scores_every_published_point_and_lists_those_not_scored(tmp_path):
    out = tmp_path / "validation.json"
    outcome = invoke("estimate", "--validate", "--db", str(tmp_path / "db.sqlite"), "--json", str(out))
    assert outcome.exit_code == 0, outcome.output
    assert "Median absolute error" in outcome.output
    document = json.loads(out.read_text())
    assert document["kind"] == "devicebench-estimate"
    validation = document["validation"]
    labels = [point["label"] for point in validation["points"]]
    published = [point.label for point in published_points()]
    assert labels[:len(published)] == published  # one entry each, first; committed GPU runs would follow
    assert len(labels) == len(document["fit"]["points"])
    for entry in validation["points"]:
        assert entry["error"] == pytest.approx(entry["measured_s"] / entry["estimated_s"] - 1.0)
    assert any(item["label"].startswith("cifar10-cnn") and item["why"] for item in validation["not_scored"])
    assert validation["judged"] <= len(labels)


@pytest.mark.parametrize(("arguments", "said"), [
    (["nosuchworkload"], "nosuchworkload"),
    (["cifar10-mlp", "--batch-size", "0"], "--batch-size must be a whole number of at least 1"),
    (["cifar10-mlp", "--json", "{tmp}/missing/estimates.json"], "does not exist"),
], ids=["unknown-workload", "impossible-batch", "json-in-a-missing-folder"])
def test_bad_input_is_refused_before_anything_is_trained(tmp_path, arguments, said):
    arguments = [argument.format(tmp=tmp_path) for argument in arguments]
    outcome = invoke("estimate", *arguments, "--on", "t4", "--data", "synthetic", "--db", str(tmp_path / "db.sqlite"))
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert said in flat(outcome.output)
    assert not (tmp_path / "db.sqlite").exists() or not Store(tmp_path / "db.sqlite").results()


def test_ctrl_c_in_the_cpu_baseline_exits_130_and_says_what_was_kept(tmp_path, monkeypatch):
    def interrupted(*arguments, **keywords):
        raise KeyboardInterrupt

    monkeypatch.setattr("devicebench.runner._train_model", interrupted)  # the run started, no epoch finished
    outcome = invoke("estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--db",
                     str(tmp_path / "db.sqlite"), "--quiet")
    assert outcome.exit_code == 130, outcome.output
    assert "0 finished epochs kept" in flat(outcome.output)
    assert "ESTIMATED" not in outcome.output


def test_ctrl_c_after_the_baseline_keeps_the_stored_cpu_run(tmp_path, monkeypatch):
    def interrupted(*arguments, **keywords):
        raise KeyboardInterrupt

    monkeypatch.setattr("devicebench.cli.estimate.BASELINE_BUDGET_S", 1.0)  # the fewest steps: seconds, not 20
    monkeypatch.setattr("devicebench.cli.estimate.estimates_for", interrupted)  # while timing the input pipeline
    db = tmp_path / "db.sqlite"
    outcome = invoke("estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--db", str(db), "--quiet")
    assert outcome.exit_code == 130, outcome.output
    runs = [run for result in Store(db).results() for run in result.runs]
    assert [(run.workload, run.device, run.status) for run in runs] == [("cifar10-mlp", "cpu", "ok")]
    assert len(runs[0].steady_epochs) == 2


def test_the_help_lists_estimate():
    outcome = invoke("--help")
    assert outcome.exit_code == 0, outcome.output
    assert "estimate" in outcome.output


# --- 8. end to end: a CPU baseline trained under the command's own budget, then two GPUs ---------------------------


def test_estimate_end_to_end_on_two_gpus_with_a_price(tmp_path):
    db, out = tmp_path / "db.sqlite", tmp_path / "estimates.json"
    outcome = invoke("estimate", "cifar10-mlp", "--on", "t4,h100-sxm", "--price", "t4=0.35", "--data", "synthetic",
                     "--db", str(db), "--json", str(out), "--quiet")
    assert outcome.exit_code == 0, outcome.output
    assert "ESTIMATED, not measured" in flat(outcome.output)
    document = json.loads(out.read_text())
    assert document["kind"] == "devicebench-estimate"
    estimates = document["estimates"]
    assert [item["target"] for item in estimates] == ["t4", "h100-sxm"]

    with Store(db) as store:
        results = store.results()
    cpu_runs = [run for result in results for run in result.runs if run.device == "cpu"]
    assert len(cpu_runs) == 1 and cpu_runs[0].workload == "cifar10-mlp" and cpu_runs[0].status == "ok"
    cpu_median = statistics.median(epoch.samples_per_s for epoch in cpu_runs[0].steady_epochs)

    for item in estimates:
        assert item["workload"] == "cifar10-mlp"
        assert item["samples_per_s"] > 0 and math.isfinite(item["samples_per_s"])
        assert item["samples_per_s"] == pytest.approx(item["batch_size"] / item["step_time_s"], rel=1e-12)
        assert item["bound"] in BOUNDS and len(BOUNDS) == 5
        assert item["baseline"]["samples_per_s"] == pytest.approx(cpu_median, rel=1e-12)
        assert item["speedup"] == pytest.approx(item["samples_per_s"] / item["baseline"]["samples_per_s"], rel=1e-12)
        assert item["epoch_time_s"] == pytest.approx(item["steps_per_epoch"] * item["step_time_s"], rel=1e-12)
    t4, h100 = estimates
    assert t4["price_per_hour"] == 0.35
    assert t4["cost_per_epoch"] == pytest.approx(t4["epoch_time_s"] / 3600 * 0.35, rel=1e-12)
    assert t4["cost_per_run"] == pytest.approx(t4["cost_per_epoch"] * t4["epochs"], rel=1e-12)
    assert h100["cost_per_epoch"] is None and h100["cost_per_run"] is None


BRANCHY = '''
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = nn.Sequential(nn.Linear(8, 256), nn.ReLU(), nn.Linear(256, 2))
        self.narrow = nn.Linear(8, 2)

    def forward(self, x):
        return self.wide(x) if x.sum() > 0 else self.narrow(x)  # real data: always narrow; random: either


def load():
    x = -torch.rand(96, 8, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] < -0.5).long()
    return x[:64], y[:64], x[64:], y[64:]
'''


def test_an_estimate_of_a_model_that_branches_on_its_data_says_its_count_is_of_random_inputs(tmp_path, monkeypatch):
    (tmp_path / "branchy.py").write_text(BRANCHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(app, ["estimate", "--model", "branchy:Branchy", "--data", "branchy:load", "--on", "t4",
                                      "--db", str(tmp_path / "r.sqlite"), "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert "branchy:Branchy: FLOPs counted on random inputs: one step of 32 samples could not run on the meta device " \
           "(RuntimeError: Tensor.item() cannot be called on meta tensors)" in shown
    assert "its count may differ on real data" in shown
    [estimate] = json.loads(out.read_text())["estimates"]
    assert len(estimate["profile_notes"]) == 1 and estimate["profile_notes"][0].startswith("FLOPs counted on random")
