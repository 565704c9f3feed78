"""`devicebench estimate` (estimate/points.py, estimate/targets.py and the command): the points of the public record, the estimate's
arithmetic, the precision a mode runs, the rented host's cores, the interval each question gets, and the command's
refusals, validation and end-to-end run. The roofline's own arithmetic and fit are tests/test_roofline.py's.

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

from devicebench import runner
from devicebench.check.cpu import CpuSeconds
from devicebench.cli import EXIT_USAGE, app
from devicebench.estimate.points import (
    SEED_FIGURES,
    UNSCORED,
    RooflineFit,
    fit_roofline,
    measured_points,
    record_points,
    record_precision,
    seed_points,
    shape_of,
)
from devicebench.estimate.roofline import (
    Efficiency,
    Point,
    PredictedStep,
    Resolved,
    StepShape,
    predict,
    run_precision,
)
from devicebench.estimate.targets import (
    Baseline,
    Estimate,
    precisions_for,
    scaled_input_s,
)
from devicebench.estimate.validation import Interval
from devicebench.report.estimates import BOUNDS
from devicebench.results.datasheets import DATASHEETS, RENTED_HOSTS, catalog_entry
from devicebench.results.record import published_figures
from devicebench.results.store import Store
from devicebench.workloads import get_workload

V100 = catalog_entry("v100-sxm2")  # fp32 15.7 TFLOP/s, 900 GB/s, PCIe 3.0 x16: 15.75 GB/s
H100 = catalog_entry("h100-sxm")  # fp32 67, bf16 989.4 TFLOP/s, 3350 GB/s, PCIe 5.0 x16: 63 GB/s
T4 = catalog_entry("t4")  # fp32 8.1 TFLOP/s, no bf16, 320 GB/s
HALF = Efficiency(np.array([2.0] * 9 + [10.0]))  # half of every peak; 10 µs a kernel


def invoke(*arguments: str):
    return CliRunner().invoke(app, list(arguments))


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


# --- 4. the estimate's arithmetic ---------------------------------------------------------------------------


def test_an_estimate_turns_step_seconds_into_rates_epochs_speedups_and_cost():
    step = PredictedStep(compute_s=0.007, memory_s=0.0019, copy_s=0.001, launch_s=1e-4, input_s=0.0, serial_input=False)
    assert step.seconds == pytest.approx(0.01)  # 0.007 + 0.0019 + 0.001 + 0.0001
    baseline = Baseline("cpu (Test CPU)", (100.0, 90.0, 110.0), "synthetic")
    estimate = Estimate(
        "cifar10-mlp",
        T4,
        batch_size=100,
        step=step,
        interval=Interval(0.8, math.log(2.0), 9, "x"),
        steps_per_epoch=50,
        epochs=3,
        baseline=baseline,
        price_per_hour=3.6,
    )
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
    assert document["interval"] == {
        "level": 0.8,
        "low_ratio": pytest.approx(0.5),
        "high_ratio": pytest.approx(2.0),
        "points": 9,
        "scheme": "x",
    }
    assert (document["precision"], document["host_cores"]) == ("fp32", None)

    bare = dataclasses.replace(estimate, interval=None, baseline=None, price_per_hour=None)
    assert bare.samples_per_s == pytest.approx(10_000)
    assert (bare.samples_per_s_range, bare.epoch_s_range, bare.speedup, bare.speedup_range) == (None,) * 4
    assert (bare.cost_per_epoch, bare.cost_per_run) == (None, None)
    no_interval = dataclasses.replace(estimate, interval=None)
    assert no_interval.speedup == pytest.approx(100.0) and no_interval.speedup_range is None


# --- 5. the points: the public record and the seeds' figures -----------------------------------------------------


def figure(**changes):
    """A row of the record: resnet50 on one V100 SXM2 in fp32 at batch 256 and 380.44 images/s, as NVIDIA's."""
    row = next(
        row
        for row in published_figures("resnet50")
        if row.gpu == "v100-sxm2"
        and row.gpus == 1
        and row.precision == "fp32"
        and row.framework == "PyTorch"
        and row.batch_per_gpu == 256
    )
    return dataclasses.replace(row, **changes)


def test_a_record_row_is_a_step_of_its_batch_at_its_rate():
    row = figure()
    assert (row.batch_per_gpu, row.throughput, row.unit) == (256, 380.44, "images/s")
    (point,), unscored = record_points([row])
    assert unscored == []
    assert point.observed_s == pytest.approx(256 / 380.44, rel=1e-12)
    assert (point.workload, point.sheet, point.precision, point.batch_size, point.kind) == (
        "resnet50",
        V100,
        "fp32",
        256,
        "step",
    )
    assert point.source == row.source
    # the step profiled at batch 256: ResNet-50's 4.1 GMACs a 224 px image, three passes, 256 images
    flops = float(point.resolved.compute_s.sum() * 15.7e12)
    assert flops == pytest.approx(256 * 3 * 2 * 4.1e9, rel=0.03)


def test_a_figure_in_tokens_is_turned_into_samples_of_its_sequence_length():
    row = next(row for row in published_figures("gpt2-small") if row.gpu == "h100-sxm" and row.precision == "fp32")
    assert (row.throughput, row.unit, row.batch_per_gpu, row.sequence_length) == (27026, "tokens/s", 1, 1024)
    (point,), _ = record_points([row])
    assert point.observed_s == pytest.approx(1024 / 27026, rel=1e-12)  # one sequence of 1,024 tokens a step
    assert point.precision == "fp32"  # the post turns TF32 off


def test_rows_that_cannot_be_points_are_listed_with_why():
    points, unscored = record_points([figure(gpus=8, throughput=2945.37), figure(workload="alexnet")])
    assert points == []
    assert [item.why for item in unscored] == [
        "measured on 8 GPUs: their communication is not modelled",
        "not a devicebench workload",
    ]


@pytest.mark.parametrize(
    ("precision", "tf32", "gpu", "expected"),
    [
        ("fp32", "n/a", "v100-sxm2", "fp32"),
        ("fp32", "off", "h100-sxm", "fp32"),
        ("fp32", "on", "a100-80gb", "tf32"),
        ("tf32", "on", "a100-80gb", "tf32"),
        ("amp-fp16", "n/a", "v100-sxm2", "amp-fp16"),
        ("amp-bf16", "off", "h100-sxm", "amp-bf16"),
        ("fp32", "n/a", "a100-40gb-pcie", "tf32"),  # unstated on a GPU with TF32: PyTorch's convolutions use it
    ],
)
def test_a_record_rows_precision(precision, tf32, gpu, expected):
    assert record_precision(figure(precision=precision, tf32=tf32, gpu=gpu), catalog_entry(gpu)) == expected


def test_every_single_gpu_row_of_a_devicebench_workload_is_a_point():
    points, unscored = record_points()
    single = [row for row in published_figures() if row.gpus == 1]
    assert len(points) == len(single) >= 250
    assert len(unscored) == len(published_figures()) - len(single)
    assert {point.workload for point in points} == {
        "resnet50",
        "resnet152",
        "vgg16",
        "bert-base",
        "bert-large",
        "gpt2-small",
        "gnmt",
    }
    assert {point.precision for point in points} == {"fp32", "tf32", "amp-fp16", "amp-bf16"}


def test_seed_points_are_the_posts_figures_as_step_or_busy_seconds():
    points = seed_points()
    assert len(points) == len(SEED_FIGURES)
    for point, seed in zip(points, SEED_FIGURES):
        assert point.sheet == catalog_entry(seed.target) and point.precision == "fp32"
        assert point.kind == ("step" if seed.busy is None else "busy")
        assert point.observed_s == pytest.approx(point.batch_size / seed.samples_per_s * (seed.busy or 1.0))
    mlp = next(point for point in points if point.label.startswith("cifar100-mlp"))
    # S4: 100 epochs of 50,000 images in 343 s, batch 32 (the seed's)
    assert mlp.batch_size == get_workload("cifar100-mlp").defaults["batch_size"] == 32
    assert mlp.observed_s == pytest.approx(32 / (100 * 50_000 / 343), rel=1e-12)
    for unscored in UNSCORED:
        assert unscored.why.strip() and unscored.label.strip()


# --- 6. the precision a mode runs, the rented host, the interval each question gets ---------------------------


@pytest.mark.parametrize(
    ("mode", "gpu", "expected"),
    [
        ("seed", "h100-sxm", ["fp32"]),
        ("tuned", "h100-sxm", ["tf32", "amp-bf16"]),
        ("tuned", "v100-sxm2", ["fp32"]),
        ("tuned", "t4", ["fp32"]),
        ("tuned", "rtx-3090", ["tf32", "amp-bf16"]),
    ],
)
def test_the_precisions_a_mode_runs(mode, gpu, expected):
    assert precisions_for(mode, catalog_entry(gpu)) == expected


def test_the_input_pipeline_is_scaled_to_the_hosts_cores():
    assert scaled_input_s(2.0, workers=2, cores_here=2, host_cores=8) == pytest.approx(0.5)  # 2 workers here, 8 there
    assert scaled_input_s(2.0, workers=8, cores_here=2, host_cores=8) == pytest.approx(0.5)  # 8 workers on 2 cores
    assert scaled_input_s(2.0, workers=1, cores_here=2, host_cores=12) == pytest.approx(2.0 / 12)
    assert scaled_input_s(2.0, workers=0, cores_here=2, host_cores=8) == 2.0  # no workers: one core there too
    assert scaled_input_s(2.0, workers=2, cores_here=2, host_cores=None) == 2.0  # --host here
    assert RENTED_HOSTS["h100-sxm"].cores == 192 // 8 and RENTED_HOSTS["v100-sxm2"].cores == 8
    assert set(RENTED_HOSTS) <= {sheet.key for sheet in DATASHEETS}


def test_each_question_gets_the_held_out_errors_that_answer_like_it():
    one_kernel = StepShape(
        batch_size=1,
        flops=np.array([1e9]),
        bytes=np.array([1e6]),
        classes=np.array([0]),
        half=np.array([False]),
        parameter_bytes=0.0,
        host_to_device_bytes=0.0,
    )
    resolved = Resolved.of(one_kernel, V100, "fp32")
    points = [
        Point(f"p{index}", "s", workload, sheet, "fp32", resolved, 1, 1.0, "step")
        for index, (workload, sheet) in enumerate([("resnet50", V100), ("bert-base", H100)] * 3)
    ]
    fitted = RooflineFit(points, [], fitter=None, efficiency=HALF)
    assert fitted.scheme_for("my-model", V100) == "leave one model out"  # a model no point is of
    assert fitted.scheme_for("resnet50", T4) == "leave one GPU out"  # a known model on a GPU no point ran on
    assert fitted.scheme_for("resnet50", H100) == "leave one out"  # both known


def test_the_host_cores_each_gpu_is_estimated_with():
    from devicebench.cli.estimate import _host_cores

    sheets = [catalog_entry("h100-sxm"), catalog_entry("rtx-4090")]  # rented on AWS p5; no cloud rents it alone
    assert _host_cores(sheets, "rented", None) == {"h100-sxm": 24, "rtx-4090": None}
    assert _host_cores(sheets, "rented", 6) == {"h100-sxm": 6, "rtx-4090": 6}
    assert _host_cores(sheets, "here", None) == {}


def test_an_estimate_is_of_the_batch_asked_for_when_the_baseline_trained_a_smaller_one(monkeypatch):
    import devicebench.estimate.targets as estimating
    from devicebench.cli.session import plan_or_fail
    from devicebench.config import RunConfig

    (job,) = plan_or_fail(
        RunConfig(workloads=("cifar10-mlp",), devices="cpu", epochs=3, batch_size=256, data="synthetic")
    ).jobs
    baseline = result_fixtures.run("cpu", [1.0, 0.5, 0.5], workload="cifar10-mlp", batch_size=32)
    baseline.settings.workers = 0
    baseline.settings.data_source = "real"  # a pipeline to time: synthetic data has none
    monkeypatch.setattr(
        estimating, "input_seconds_per_batch", lambda job, run, timed=True: (0.01, 100)
    )  # 100 batches of 32
    monkeypatch.setattr(RooflineFit, "interval_for", lambda self, workload, sheet, level: None)
    fitted = RooflineFit([], [], fitter=None, efficiency=HALF)
    (estimate,) = estimating.estimates_for(job, baseline, [T4], fitted, {})
    assert estimate.batch_size == 256 and estimate.baseline.batch_size == 32
    assert estimate.step.input_s == pytest.approx(0.01 * 256 / 32)  # the pipeline's work grows with the batch
    assert estimate.steps_per_epoch == math.ceil(100 * 32 / 256)
    expected = predict(
        Resolved.of(shape_of(job.workload, job.hyperparameters), T4, "fp32"), HALF, input_s=0.08, serial_input=True
    )
    assert estimate.step == expected


def test_synthetic_data_has_no_input_pipeline_to_time_or_estimate(monkeypatch):
    import devicebench.estimate.targets as estimating
    from devicebench.cli.session import plan_or_fail
    from devicebench.config import RunConfig

    (job,) = plan_or_fail(RunConfig(workloads=("cifar10-mlp",), devices="cpu", epochs=3, data="synthetic")).jobs
    baseline = result_fixtures.run("cpu", [1.0, 0.5, 0.5], workload="cifar10-mlp", batch_size=job.batch_size)
    baseline.settings.data_source = "synthetic"
    asked = []
    monkeypatch.setattr(
        estimating, "input_seconds_per_batch", lambda job, run, timed=True: asked.append(timed) or (0.5, 100)
    )
    monkeypatch.setattr(RooflineFit, "interval_for", lambda self, workload, sheet, level: None)
    host = np.array([20e-6, 50e-6, 300e-6, 900e-6])  # a call, a convolution, a step, a batch from loader workers
    fitted = RooflineFit([], [], fitter=None, efficiency=dataclasses.replace(HALF, host=host))
    (estimate,) = estimating.estimates_for(job, baseline, [T4], fitted, {})
    assert asked == [False]  # the batches counted, none timed
    assert estimate.step.input_s == 0.0 and estimate.steps_per_epoch == 100
    calls = estimate.step.launch_s / 10e-6  # cifar10-mlp: no convolution; no loader workers on synthetic data
    assert baseline.settings.workers == 0
    assert estimate.step.host_s == pytest.approx(calls * 20e-6 + 300e-6)  # the host's calls and its step
    baseline.settings.workers = 2  # its batches received from loader workers: one more term a step
    (fed,) = estimating.estimates_for(job, baseline, [T4], fitted, {})
    assert fed.step.host_s == pytest.approx(calls * 20e-6 + 300e-6 + 900e-6)
    baseline.settings.workers = 0
    assert estimate.step.bound != "input pipeline"
    baseline.settings.data_source = "real"
    (real,) = estimating.estimates_for(job, baseline, [T4], fitted, {})
    assert real.step.input_s == 0.5 and asked == [False, False, True]  # the synthetic runs, then the real one


def test_a_precision_the_gpu_cannot_run_leaves_that_estimate_out_saying_what_runs_instead(monkeypatch):
    import devicebench.estimate.targets as estimating
    from devicebench.cli.session import plan_or_fail
    from devicebench.config import RunConfig
    from devicebench.estimate.points import EstimateError

    (job,) = plan_or_fail(RunConfig(workloads=("cifar10-mlp",), devices="cpu", epochs=3, data="synthetic")).jobs
    baseline = result_fixtures.run("cpu", [1.0, 0.5, 0.5], workload="cifar10-mlp", batch_size=job.batch_size)
    monkeypatch.setattr(estimating, "input_seconds_per_batch", lambda job, run, timed=True: (0.01, 100))
    monkeypatch.setattr(RooflineFit, "interval_for", lambda self, workload, sheet, level: None)
    fitted = RooflineFit([], [], fitter=None, efficiency=HALF)
    with pytest.raises(EstimateError, match="the V100 SXM2 has no bf16 arithmetic in its datasheet: estimate amp-fp16"):
        estimating.estimates_for(job, baseline, [V100], fitted, {}, precision="amp-bf16")
    (h100,) = estimating.estimates_for(job, baseline, [H100], fitted, {}, precision="amp-bf16")
    assert h100.precision == "amp-bf16"


# --- 6. the user's runs as points -----------------------------------------------------------------------------


def gpu_run(device_name: str, *, device: str = "cuda:0", mode: str = "seed"):
    """A cifar10-mlp run: a warm-up epoch, then epochs of 0.5 s (0.1 s waiting, 10 steps) and 0.7 s (0.05 s
    waiting, 13 steps)."""
    record = result_fixtures.run(device, [2.0, 0.5, 0.7], workload="cifar10-mlp")
    waits, steps = [0.3, 0.1, 0.05], [10, 10, 13]
    epochs = [
        dataclasses.replace(epoch, input_wait_s=wait, steps=count)
        for epoch, wait, count in zip(record.epochs, waits, steps)
    ]
    settings = dataclasses.replace(
        record.settings, mode=mode, hyperparameters=dict(get_workload("cifar10-mlp").defaults)
    )
    return dataclasses.replace(record, device_name=device_name, epochs=epochs, settings=settings)


def test_a_finished_seed_run_on_a_catalogued_gpu_is_one_point():
    h100 = gpu_run("NVIDIA H100 80GB HBM3")
    tuned = gpu_run("NVIDIA H100 80GB HBM3", mode="tuned")
    tuned.settings.tf32_matmul = tuned.settings.tf32_cudnn = True  # another precision: another point
    elsewhere = gpu_run("NVIDIA H100 NVL")
    cpu = gpu_run("Test CPU", device="cpu")
    failed = dataclasses.replace(gpu_run("NVIDIA H100 80GB HBM3"), status="failed")
    result = result_fixtures.session(result_fixtures.machine("box", "m1"), [h100, tuned, elsewhere, cpu, failed])
    points, unscored = measured_points([result], "your database")
    assert len(points) == 2  # the seed run's and the tuned run's, each at the precision it recorded
    point, tuned_point = points
    assert tuned.run_id[:8] in tuned_point.label and tuned_point.precision == run_precision(tuned.settings)
    # the steady epochs' step without the waits: (0.5 - 0.1) / 10 = 0.04 s and (0.7 - 0.05) / 13 = 0.05 s
    assert point.observed_s == pytest.approx(statistics.median([(0.5 - 0.1) / 10, (0.7 - 0.05) / 13]), rel=1e-12)
    assert point.observed_s == pytest.approx(0.045, rel=1e-12)
    assert point.kind == "step" and point.source == "your database" and point.precision == "fp32"
    assert point.sheet == H100
    assert point.batch_size == get_workload("cifar10-mlp").defaults["batch_size"]
    assert h100.run_id[:8] in point.label
    assert point.host_launches and tuned_point.host_launches  # devicebench's own: its host's launches are in its step
    # the uncatalogued GPU is listed with why; the CPU run and the failed one are not
    assert len(unscored) == 1
    by_run = {item.label: item.why for item in unscored}
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
    outcome = invoke(
        "estimate",
        "cifar10-mlp",
        "--on",
        "t4",
        "--price",
        "h100-sxm=2",
        "--data",
        "synthetic",
        "--db",
        str(tmp_path / "db.sqlite"),
    )
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "--price names h100-sxm, which --on does not estimate" in flat(outcome.output)


def test_validate_scores_the_whole_record_under_three_schemes_within_the_aims(tmp_path):
    out = tmp_path / "validation.json"
    outcome = invoke("estimate", "--validate", "--db", str(tmp_path / "db.sqlite"), "--json", str(out))
    assert outcome.exit_code == 0, outcome.output
    shown = flat(outcome.output)
    assert "The roofline scored on every figure" in shown and "Inside the 80% interval" in shown
    document = json.loads(out.read_text())
    assert document["kind"] == "devicebench-estimate"
    validation = document["validation"]
    points = validation["points"]
    assert validation["level"] == 0.8 and len(points) == document["fit"]["points"] >= 250
    published = [entry for entry in points if not entry["measured_by_devicebench"]]
    runs = [entry for entry in points if entry["measured_by_devicebench"]]
    assert len(runs) >= 11  # the H200's seed runs committed under results/, scored apart
    for scheme in ("leave one out", "leave one GPU out", "leave one model out"):
        scores = validation["schemes"][scheme]
        errors = [abs(entry[scheme]["error"]) for entry in published]
        assert scores["median_absolute_error"] == pytest.approx(statistics.median(errors), rel=1e-12)
        assert scores["inside"] == sum(entry[scheme]["inside"] is True for entry in published)
        assert scores["judged"] == len(published)
        measured = validation["measured_schemes"][scheme]
        assert measured["judged"] == len(runs)
        assert measured["inside"] == sum(entry[scheme]["inside"] is True for entry in runs)
        # the aims, which docs/estimate.md reports: within 5 points of the stated level
        assert abs(scores["coverage"] - 0.8) <= 0.05, (scheme, scores)
    assert validation["schemes"]["leave one model out"]["median_absolute_error"] <= 0.25
    # issue 41's aim for the seeds' own H200 runs (seed mode, fp32), each model left out: docs/estimate.md's table
    seeds = [entry["leave one model out"] for entry in runs if entry["precision"] == "fp32"]
    assert len(seeds) == 11
    assert statistics.median(abs(entry["error"]) for entry in seeds) <= 0.25
    assert sum(entry["inside"] is True for entry in seeds) >= 8
    for entry in points:
        scored = entry["leave one out"]
        assert scored["error"] == pytest.approx(entry["measured_s"] / scored["estimated_s"] - 1.0)
    multi_gpu = [item for item in validation["not_scored"] if item["why"].startswith("measured on")]
    assert len(multi_gpu) == sum(row.gpus > 1 for row in published_figures())
    assert any(item["label"].startswith("cifar10-cnn") and item["why"] for item in validation["not_scored"])
    host_terms = {f"host {term}" for term in document["fit"]["host_s"]}
    assert {*document["fit"]["inverse_shares"], *host_terms} == set(document["fit"]["points_pinning"])
    assert 10e-6 < document["fit"]["host_s"]["per call"] < 100e-6  # pinned by the H200's runs: tens of µs a call
    assert all(document["fit"]["points_pinning"][term] > 0 for term in host_terms)  # each term pinned by runs


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["nosuchworkload"], "nosuchworkload"),
        (["cifar10-mlp", "--batch-size", "0"], "--batch-size must be a whole number of at least 1"),
        (["cifar10-mlp", "--json", "{tmp}/missing/estimates.json"], "does not exist"),
        (["cifar10-mlp", "--mode", "fast"], "--mode 'fast' is neither seed nor tuned"),
        (["cifar10-mlp", "--precision", "fp8"], "--precision 'fp8' is not one of fp32, tf32, amp-fp16, amp-bf16"),
        (["cifar10-mlp", "--level", "0.3"], "--level 0.3 is not a chance from 0.5 up to (not including) 1"),
        (["cifar10-mlp", "--level", "80"], "--level 80 is not a chance"),
        (["cifar10-mlp", "--host", "mine"], "--host 'mine' is neither rented nor here"),
        (["cifar10-mlp", "--host", "here", "--host-cores", "8"], "--host-cores and --host here contradict each other"),
        (["cifar10-mlp", "--host-cores", "0"], "--host-cores takes a whole number of cores from 1 up"),
    ],
    ids=[
        "unknown-workload",
        "impossible-batch",
        "json-in-a-missing-folder",
        "mode",
        "precision",
        "level-low",
        "level-percent",
        "host",
        "host-here-with-cores",
        "no-cores",
    ],
)
def test_bad_input_is_refused_before_anything_is_trained(tmp_path, arguments, said):
    arguments = [argument.format(tmp=tmp_path) for argument in arguments]
    outcome = invoke("estimate", *arguments, "--on", "t4", "--data", "synthetic", "--db", str(tmp_path / "db.sqlite"))
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert said in flat(outcome.output)
    assert not (tmp_path / "db.sqlite").exists() or not Store(tmp_path / "db.sqlite").results()


def in_this_process(plan, fell_back):
    """baseline_apart where the baseline trains in this process (and a monkeypatch reaches its training)."""
    return lambda job, placeholder, budget_s: None


def test_ctrl_c_in_the_cpu_baseline_exits_130_and_says_what_was_kept(tmp_path, monkeypatch):
    def interrupted(*arguments, **keywords):
        raise KeyboardInterrupt

    monkeypatch.setattr("devicebench.runner._train_model", interrupted)  # the run started, no epoch finished
    monkeypatch.setattr("devicebench.cli.estimate.baseline_apart", in_this_process)
    outcome = invoke(
        "estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--db", str(tmp_path / "db.sqlite"), "--quiet"
    )
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


def test_estimate_end_to_end_on_two_gpus_in_tuned_mode_with_a_price(tmp_path, monkeypatch):
    db, out = tmp_path / "db.sqlite", tmp_path / "estimates.json"
    # the CPU's times read before and after the baseline: others kept one of two cores busy all along
    monkeypatch.setattr("devicebench.check.cpu.psutil.cpu_count", lambda logical=True: 2)
    read = iter([CpuSeconds(100.0, 1_000.0, 10.0), CpuSeconds(139.0, 1_040.0, 29.0)])
    monkeypatch.setattr("devicebench.check.cpu.cpu_seconds", lambda: next(read))
    outcome = invoke(
        "estimate",
        "cifar10-mlp",
        "--on",
        "t4,h100-sxm",
        "--price",
        "t4=0.35",
        "--data",
        "synthetic",
        "--mode",
        "tuned",
        "--db",
        str(db),
        "--json",
        str(out),
        "--quiet",
    )
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
    (cpu_run,) = cpu_runs
    assert cpu_run.process_id not in (None, runner.PROCESS_ID)  # it trained in a fresh process of its own
    assert all(epoch.train_thread_cpu_s for epoch in cpu_run.epochs)
    # its rate: samples over its training thread's CPU seconds (synthetic data: no waits), of its fastest epoch
    cpu_fastest = max(epoch.samples / epoch.train_thread_cpu_s for epoch in cpu_run.steady_epochs)
    wall_fastest = max(epoch.samples_per_s for epoch in cpu_run.steady_epochs)

    for item in estimates:
        assert item["workload"] == "cifar10-mlp"
        assert item["samples_per_s"] > 0 and math.isfinite(item["samples_per_s"])
        assert item["samples_per_s"] == pytest.approx(item["batch_size"] / item["step_time_s"], rel=1e-12)
        assert item["bound"] in BOUNDS and len(BOUNDS) == 6
        assert item["baseline"]["samples_per_s"] == pytest.approx(cpu_fastest, rel=1e-12)
        assert item["baseline"]["wall_samples_per_s"] == pytest.approx(wall_fastest, rel=1e-12)
        assert item["baseline"]["clock"] == "training thread's CPU time" and item["baseline"]["wall_reason"] is None
        assert item["speedup"] == pytest.approx(item["samples_per_s"] / item["baseline"]["samples_per_s"], rel=1e-12)
        assert item["epoch_time_s"] == pytest.approx(item["steps_per_epoch"] * item["step_time_s"], rel=1e-12)
    t4, h100 = estimates
    # tuned mode: the T4 has neither TF32 nor bf16; the H100 runs the faster of TF32 and bf16 autocast
    workload = get_workload("cifar10-mlp")
    fitted = fit_roofline([])
    shape = shape_of(workload, dict(workload.defaults))
    for item, candidates in ((t4, ["fp32"]), (h100, ["tf32", "amp-bf16"])):
        sheet = catalog_entry(item["target"])
        steps = {
            precision: predict(
                Resolved.of(shape, sheet, precision),
                fitted.efficiency,
                input_s=item["terms_s"]["input"],
                serial_input=item["serial_input"],
            ).seconds
            for precision in candidates
        }
        assert item["precision"] == min(steps, key=steps.get)
        assert item["step_time_s"] == pytest.approx(min(steps.values()), rel=1e-9)
        assert item["host_cores"] == RENTED_HOSTS[item["target"]].cores
        # the errors held out as the question asks (the committed H200 runs are of cifar10-mlp), at the default 80%
        assert (
            item["interval"]["scheme"] == fitted.scheme_for("cifar10-mlp", sheet) and item["interval"]["level"] == 0.8
        )
        assert item["interval"]["high_ratio"] == pytest.approx(1 / item["interval"]["low_ratio"], rel=1e-12)
    assert "Precision: t4 fp32 on the CUDA cores; h100-sxm " in flat(outcome.output)
    assert "Measured under load: other processes kept 1.0 of this machine's 2 logical cores busy" in flat(
        outcome.output
    )
    assert t4["price_per_hour"] == 0.35
    assert t4["cost_per_epoch"] == pytest.approx(t4["epoch_time_s"] / 3600 * 0.35, rel=1e-12)
    assert t4["cost_per_run"] == pytest.approx(t4["cost_per_epoch"] * t4["epochs"], rel=1e-12)
    assert h100["cost_per_epoch"] is None and h100["cost_per_run"] is None


BRANCHY = """
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
"""


def test_an_estimate_of_a_model_that_branches_on_its_data_says_its_count_is_of_random_inputs(tmp_path, monkeypatch):
    (tmp_path / "branchy.py").write_text(BRANCHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(
        app,
        [
            "estimate",
            "--model",
            "branchy:Branchy",
            "--data",
            "branchy:load",
            "--on",
            "t4",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--json",
            str(out),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert (
        "branchy:Branchy: FLOPs counted on random inputs: one step of 32 samples could not run on the meta device "
        "(RuntimeError: Tensor.item() cannot be called on meta tensors)" in shown
    )
    assert "its count may differ on real data" in shown
    [estimate] = json.loads(out.read_text())["estimates"]
    assert len(estimate["profile_notes"]) == 1 and estimate["profile_notes"][0].startswith("FLOPs counted on random")


def test_the_estimates_cpu_baselines_are_kept_apart_from_the_users_runs_in_compare_and_history(tmp_path):
    from devicebench.results.store import ESTIMATE_BASELINE

    db = tmp_path / "db.sqlite"
    machine = result_fixtures.machine("box", "m1")
    mine = result_fixtures.session(machine, [result_fixtures.run("cpu", [1.0, 0.5, 0.5], workload="mnist-cnn2")])
    baseline = dataclasses.replace(
        result_fixtures.session(machine, [result_fixtures.run("cpu", [1.0, 0.9, 0.9], workload="mnist-cnn2")]),
        config={"workloads": ["mnist-cnn2"], "purpose": ESTIMATE_BASELINE},
    )
    with Store(db) as store:
        store.import_results([mine, baseline])
    for command in ("history", "compare"):
        shown = invoke(command, "--db", str(db))
        assert shown.exit_code == 0, shown.output
        text = flat(shown.output)
        assert "1 run of `devicebench estimate`'s CPU baselines not shown" in text
        assert mine.runs[0].run_id[:8] in text or command == "compare"
        assert baseline.runs[0].run_id[:8] not in text
    compared = flat(invoke("compare", "--db", str(db)).output)
    assert "│ cpu │ 2,000 │" in compared  # the user's own 0.5 s epochs alone, not pooled with the 0.9 s
