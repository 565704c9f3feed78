"""What `run` says before it trains (a busy machine) and what it leads its end with: per workload, how much faster a
GPU would train it here, what that rests on, and whether this machine's own figure can carry it.

    python -m pytest tests/test_run_answer.py -q
"""

from __future__ import annotations

import psutil
import pytest
from typer.testing import CliRunner

from devicebench.cli import app

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "1", "--max-eval-steps", "1"]


def unwrapped(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("busy", [True, False])
def test_run_warns_before_training_when_other_processes_keep_the_cores_busy(busy, monkeypatch, tmp_path):
    """check's rule and numbers: a 1-minute load average above half the logical cores."""
    cores = psutil.cpu_count(logical=True)
    load = 2.0 * cores if busy else 0.0
    monkeypatch.setattr(psutil, "getloadavg", lambda: (load, load, load))
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 0, result.output
    said = unwrapped(result.stderr)
    warning = (f"This machine is busy: 1-minute load average {load:.2f} on {cores} logical cores: other processes "
               f"keep about {cores} of them busy. Stop other work (top shows it) before benchmarking the CPU: its "
               "figures will be low and vary.")
    assert (warning in said) == busy
    assert "load average" not in result.stdout  # a warning, with the others on stderr
    if busy:
        assert said.count(warning) == 1 and said.index(warning) < said.index("Epoch 1/2")
