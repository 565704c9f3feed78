"""benchmarks/engine_vs_plain.py on the CPU, shrunk: the plainest loop and devicebench measured on the tiny Linear
16-16-4, the CUDA-graph side skipped with its reason, each side's host work written, ratios to `plain-resident`,
and the file written after every measurement, so a run stopped part way keeps what it measured.

    python -m pytest tests/test_engine_vs_plain.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks are scripts, not a package

import engine_vs_plain  # noqa: E402

SHRUNK = ["--steps", "3", "--epochs", "2", "--rounds", "1", "--threads", "1"]


def run_benchmark(monkeypatch: pytest.MonkeyPatch, output: Path, sides: str) -> dict:
    argv = ["engine_vs_plain.py", engine_vs_plain.LINEAR, "--sides", sides, *SHRUNK, "--output", str(output)]
    monkeypatch.setattr(sys, "argv", argv)
    engine_vs_plain.main()
    return json.loads(output.read_text())


@pytest.mark.slow  # a devicebench run through its Python API: ~4 s, 13 s on the loaded 2-core VM
def test_the_plainest_loop_and_devicebench_are_measured_and_the_graph_side_says_why_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    written = run_benchmark(monkeypatch, tmp_path / "out.json", "plain-resident,plain-graph,seed")
    measured = written["samples_per_s"][engine_vs_plain.LINEAR]
    assert set(measured) == {"plain-resident", "seed"}
    assert all(rate > 0 for rates in measured.values() for rate in rates)
    assert "CUDA" in written["skipped"]["plain-graph"]
    assert set(written["host_work"]) == {"plain-resident", "plain-graph", "seed"}
    assert written["reference"][engine_vs_plain.LINEAR] == "plain-resident"
    assert written["ratio_to_reference"][engine_vs_plain.LINEAR]["plain-resident"]["median"] == 1.0
    assert written["threads"] == 1


def test_a_run_stopped_part_way_keeps_what_it_measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def measure(side: str, name: str, arguments: object) -> list[float]:
        if side == "seed":
            raise KeyboardInterrupt
        return [100.0, 120.0]

    monkeypatch.setattr(engine_vs_plain, "measure", measure)
    output = tmp_path / "stopped.json"
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(monkeypatch, output, "plain-resident,seed")
    written = json.loads(output.read_text())
    assert written["samples_per_s"] == {engine_vs_plain.LINEAR: {"plain-resident": [110.0]}}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_on_a_gpu_the_graph_side_captures_and_replays_the_step() -> None:
    """Capture needs a capturable optimizer, a warm-up on a side stream and static buffers: any slip raises."""
    rates = engine_vs_plain.plain_samples_per_s(engine_vs_plain.LINEAR, "plain-graph", torch.device("cuda"), 20, 2, 0)
    assert len(rates) == 1 and rates[0] > 0  # the warm-up epoch left out
