"""The report's "Sweeps" charts: throughput against each swept setting of a `devicebench sweep`, a line per
device, and the GPU/CPU ratio against it, from grid points whose throughputs are known in advance.

    python -m pytest tests/test_report_sweeps.py -q
"""

from __future__ import annotations

import dataclasses

from result_fixtures import SAMPLES_PER_EPOCH, machine, run, session
from test_report import assert_valid_png, images, parse

from devicebench.report.html import write_report
from devicebench.report.sweep_plots import (
    MOST_SWEEP_LINES,
    Sweep,
    SweepLine,
    sweep_charts,
    sweep_series,
)
from devicebench.results.compare import compare
from devicebench.results.schema import Result, RunRecord

LAPTOP = {**machine("laptop", "aaa111"), "accelerators": [{"device": "cuda:0", "name": "GeForce Fake 860M"}]}


def point(
    device: str,
    steady_rates: list[float],
    *,
    workload: str = "mnist-cnn2",
    batch_size: int = 50,
    workers: int = 0,
    **overrides: int,
) -> RunRecord:
    """A run at one grid point whose steady epochs ran at `steady_rates` samples/s, after a warm-up at half the
    first rate; `overrides` are its --set values."""
    epoch_times = [SAMPLES_PER_EPOCH / steady_rates[0] * 2, *(SAMPLES_PER_EPOCH / rate for rate in steady_rates)]
    record = run(device, epoch_times, workload=workload, batch_size=batch_size)
    record.settings.workers = workers
    record.settings.overrides = overrides
    return record


def grid_session(runs: list[RunRecord]) -> Result:
    """A session as `devicebench sweep` stores it: its config lists every grid point."""
    result = session(LAPTOP, runs)
    result.config = {"sweep": [dataclasses.asdict(record.settings) for record in runs]}
    return result


def batch_size_sweep() -> Result:
    """cpu only, batch 32/64/128; two steady epochs each, 80 and 100 samples/s at batch 32, twice that at 64, …"""
    return grid_session([point("cpu", [80.0 * factor, 100.0 * factor], batch_size=32 * factor) for factor in (1, 2, 4)])


def depth_sweep() -> Result:
    """catdog-deep at depth 8/16/32: the CPU halves its throughput each time the depth doubles, the GPU does not."""
    return grid_session(
        [
            point(device, [rate, rate], workload="catdog-deep", depth=depth)
            for depth, cpu_rate in ((8, 100.0), (16, 50.0), (32, 25.0))
            for device, rate in (("cpu", cpu_rate), ("cuda:0", 1000.0))
        ]
    )


def alt_texts(html: str) -> list[str]:
    return [attributes["alt"] for tag, attributes in parse(html).tags if tag == "img"]


def test_batch_size_sweep_series_are_the_rows_numbers():
    rows = compare([batch_size_sweep()])["mnist-cnn2"]
    assert sweep_series(rows) == [
        Sweep(
            setting="batch_size",
            throughput=(
                SweepLine(
                    "cpu", x=(32, 64, 128), y=(90.0, 180.0, 360.0), low=(80.0, 160.0, 320.0), high=(100.0, 200.0, 400.0)
                ),
            ),
            ratios=(),  # a cpu-only sweep has nothing to be faster than
            ratio_name="",
            held=(),
        )
    ]


def test_report_inlines_a_sweep_figure_for_a_batch_size_sweep(tmp_path):
    out = write_report([batch_size_sweep()], tmp_path / "report.html", png_dir=tmp_path / "charts")
    html = out.read_text()
    parser = parse(html)
    expected_alt = "mnist-cnn2: sweep of batch_size. samples/s: cpu [32=90, 64=180, 128=360]."
    # samples/s, epoch time (every epoch here had 10 steps of 100 samples) and accuracy (no speedup: cpu only),
    # then the sweep
    assert alt_texts(html) == [
        "mnist-cnn2: Training throughput",
        "mnist-cnn2: Steady epoch time",
        "mnist-cnn2: Test accuracy per epoch",
        expected_alt,
    ]
    for chart in images(parser):
        assert_valid_png(chart)
    assert "Sweeps" in parser.text
    assert "Median steady-state samples/s against batch_size, one line per device" in parser.text
    assert (tmp_path / "charts" / "mnist-cnn2-sweep-batch_size.png").read_bytes() == images(parser)[-1]


def test_depth_sweep_ratio_is_the_gpu_advantage_as_a_curve():
    rows = compare([depth_sweep()])["catdog-deep"]
    [sweep] = sweep_series(rows)
    assert sweep.setting == "depth" and sweep.ratio_name == "GPU/CPU" and sweep.held == ()
    assert [(line.label, line.x, line.y) for line in sweep.throughput] == [
        ("cpu", (8, 16, 32), (100.0, 50.0, 25.0)),
        ("cuda:0", (8, 16, 32), (1000.0, 1000.0, 1000.0)),
    ]
    [ratio] = sweep.ratios
    assert (ratio.label, ratio.x, ratio.y) == ("cuda:0", (8, 16, 32), (10.0, 20.0, 40.0))

    [chart] = sweep_charts("catdog-deep", rows)
    assert_valid_png(chart.png)
    assert chart.slug == "catdog-deep-sweep-depth"
    assert chart.title.endswith("GPU/CPU throughput ratio (x): cuda:0 [8=10.00, 16=20.00, 32=40.00].")
    assert "the deeper the network, the larger the GPU advantage" in chart.caption
    assert "cuda:0 10.00x at depth 8 to 40.00x at depth 32" in chart.caption


def test_no_varying_setting_no_sweep_figure(tmp_path):
    one_point = grid_session([point("cpu", [100.0, 100.0]), point("cuda:0", [1000.0, 1000.0])])
    assert sweep_series(compare([one_point])["mnist-cnn2"]) == []
    html = write_report([one_point], tmp_path / "report.html").read_text()
    assert "Sweeps" not in parse(html).text
    assert not [alt for alt in alt_texts(html) if "sweep" in alt]


def test_runs_outside_a_sweep_session_get_no_sweep_figure(tmp_path):
    """Runs at several batch sizes from `devicebench run` are rows of the table, not a sweep the user asked for."""
    plain = session(LAPTOP, [point("cpu", [100.0 * factor] * 2, batch_size=32 * factor) for factor in (1, 2, 4)])
    html = write_report([plain], tmp_path / "report.html").read_text()
    assert "Sweeps" not in parse(html).text and len(alt_texts(html)) == 3


def test_two_swept_settings_a_line_per_value_of_the_other():
    grid = grid_session(
        [
            point("cpu", [rate, rate], batch_size=batch_size, workers=workers)
            for batch_size, rate in ((32, 100.0), (64, 200.0))
            for workers in (0, 2)
        ]
    )
    by_batch_size, by_workers = sweep_series(compare([grid])["mnist-cnn2"])
    assert [(line.label, line.x, line.y) for line in by_batch_size.throughput] == [
        ("cpu, workers=0", (32, 64), (100.0, 200.0)),
        ("cpu, workers=2", (32, 64), (100.0, 200.0)),
    ]
    assert [(line.label, line.x, line.y) for line in by_workers.throughput] == [
        ("cpu, batch_size=32", (0, 2), (100.0, 100.0)),
        ("cpu, batch_size=64", (0, 2), (200.0, 200.0)),
    ]


def test_too_many_lines_hold_the_other_settings_at_their_first_value():
    workers = range(MOST_SWEEP_LINES // 2 + 1)  # two devices times this many workers values: too many lines
    grid = grid_session(
        [
            point(device, [rate * factor] * 2, batch_size=32 * factor, workers=count)
            for factor in (1, 2)
            for count in workers
            for device, rate in (("cpu", 10.0), ("cuda:0", 100.0))
        ]
    )
    [sweep] = sweep_series(compare([grid])["mnist-cnn2"])
    assert sweep.setting == "batch_size" and sweep.held == (("workers", "0"),)
    assert [(line.label, line.x, line.y) for line in sweep.throughput] == [
        ("cpu", (32, 64), (10.0, 20.0)),
        ("cuda:0", (32, 64), (100.0, 200.0)),
    ]
    assert [line.y for line in sweep.ratios] == [(10.0, 10.0)]
