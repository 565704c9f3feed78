"""What `run` says before it trains (a busy machine) and what it leads its end with: per workload, how much faster a
GPU would train it here, what that rests on, and whether this machine's own figure can carry it.

    python -m pytest tests/test_run_answer.py -q
"""

from __future__ import annotations

import dataclasses
import io

import psutil
import pytest
from result_fixtures import machine, run, session
from rich.console import Console
from typer.testing import CliRunner

from devicebench.cli import app, errors
from devicebench.report.answer import Answer, answer_parts, answers, flags_text, gpu_text
from devicebench.report.text import speedup_text
from devicebench.reproduce import factor_text
from devicebench.results.compare import compare
from devicebench.workloads import get_workload, register_own
from devicebench.workloads.own import ORIGIN as OWN_MODEL

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
    monkeypatch.setattr(errors, "width", 80)  # a terminal of 80 columns: the warning wraps between its words
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(tmp_path / "runs.db")])
    assert result.exit_code == 0, result.output
    said = unwrapped(result.stderr)
    warning = (
        f"This machine is busy: 1-minute load average {load:.2f} on {cores} logical cores: other processes "
        f"keep about {cores} of them busy. Stop other work (top shows it) before benchmarking the CPU: its "
        "figures will be low and vary."
    )
    assert (warning in said) == busy
    assert "load average" not in result.stdout  # a warning, with the others on stderr
    if busy:
        assert said.count(warning) == 1 and said.index(warning) < said.index("Epoch 1/2")
        lines = result.stderr[: result.stderr.index("Epoch 1/2")].splitlines()
        assert max(map(len, lines)) <= 80, "a line longer than the terminal: the terminal cuts it mid-word"
        assert set(warning.split()) <= {word for line in lines for word in line.split()}


# --- the answer that leads the end of `run` --------------------------------------------------------------------


def cpu_run(workload: str, epoch_times: list[float], *, steps: int = 10, device: str = "cpu", **settings):
    """A stored run of `workload` (epoch 1 warm-up, SAMPLES_PER_EPOCH samples an epoch) with `steps` per epoch."""
    record = run(device, epoch_times, workload=workload, **settings)
    record.epochs = [dataclasses.replace(epoch, steps=steps) for epoch in record.epochs]
    return record


def answer_of(*records) -> tuple[Answer, str]:
    rows = compare([session(machine("vm", "m1"), list(records))])
    (found,) = answers(rows)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    for part in answer_parts(rows):
        console.print(part)
    return found, console.export_text()


def test_the_posts_gpu_is_carried_to_this_cpu_with_the_range_of_its_steady_epochs():
    # steady epochs of 9.8, 10 and 10.2 s for 1,000 samples: 102, 100 and 98 samples/s, 2% apart: steady enough
    found, text = answer_of(cpu_run("cifar10-mlp", [12.0, 9.8, 10.0, 10.2], batch_size=32))
    post_gpu = get_workload("cifar10-mlp").published.samples_per_s["gpu"]  # S2: 50,000 images in 9 s
    assert found.carried.ratio == pytest.approx(post_gpu / 100.0)
    assert (found.carried.low, found.carried.high) == (
        pytest.approx(post_gpu / (1000 / 9.8)),
        pytest.approx(post_gpu / (1000 / 10.2)),
    )
    assert (
        gpu_text(found)
        == (
            f"about {factor_text(post_gpu / 100)} ({factor_text(post_gpu * 9.8 / 1000)[:-1]}–"
            f"{factor_text(post_gpu * 10.2 / 1000)}) (real data there, synthetic here: not a speedup)"
        )
        == "about 56x (54–57x) (real data there, synthetic here: not a speedup)"  # the post trained on CIFAR-10
    )
    assert found.basis == "S2's GPU over this CPU" and flags_text(found) == "—"
    flat = unwrapped(text)
    assert "How much faster would a GPU train these here? (this CPU: cpu model)" in flat
    assert "cifar10-mlp: this CPU ran 100 samples/s, 0.12x the post's CPU (847 samples/s)" in flat  # what it rests on
    assert "Noisy" not in flat and "Short" not in flat and "devicebench estimate cifar10-mlp` predicts" in flat
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_noisy_and_short_cpu_figure_is_flagged_with_what_to_do():
    # steady epochs of 1, 1.5 and 1 s: a coefficient of variation of 25%; 3 steps each, the fewest a budget gives
    found, text = answer_of(cpu_run("cifar10-mlp", [2.0, 1.0, 1.5, 1.0], steps=3, batch_size=32))
    assert found.short_steps == 3 and [round(cv, 2) for _, cv in found.noisy] == [0.25]
    assert flags_text(found) == "noisy 25%, 3-step epochs"
    flat = unwrapped(text)
    assert (
        "Noisy: steady epoch time varied more than 5% (cifar10-mlp 25%), and every figure above moves with it: "
        "close other programs, or add --repeats 3, and run again."
    ) in flat
    assert "Short: steady epochs of 3 steps, the fewest a budget gives" in flat and "--budget 5m gives" in flat
    # 1,000 samples/s at the median, 667 at the slowest
    assert gpu_text(found) == "about 5.6x (5.6–8.3x) (real data there, synthetic here: not a speedup)"
    assert max(len(line) for line in text.splitlines()) <= 80


def test_epochs_longer_than_the_budgets_fewest_are_not_short():
    found, _ = answer_of(cpu_run("cifar10-mlp", [2.0, 1.0, 1.0, 1.0], steps=4, batch_size=32))
    assert found.short_steps is None and flags_text(found) == "—"


def test_a_post_without_a_cpu_figure_gives_no_number_and_names_the_estimate():
    found, text = answer_of(cpu_run("mnist-cnn2", [2.0, 1.0, 1.0]))
    assert found.carried is None and gpu_text(found) == "—"
    assert found.basis == "S1's 8x: no CPU samples/s to carry it"  # the post's 8x is over its own CPU, not this one
    flat = unwrapped(text)
    assert "`devicebench estimate mnist-cnn2` predicts named GPUs (T4, L4, A100, H100) from this CPU" in flat
    # the basis is a line beneath, not a fifth column of 80 wrapped over five lines
    assert "mnist-cnn2 rests on S1's 8x: no CPU samples/s to carry it." in flat and "Rests on" not in text
    assert len([line for line in text.splitlines() if line.startswith("│")]) == 1  # the workload's row: one line
    assert "About:" not in flat and "8x this" not in flat


def test_nothing_published_says_so():
    found, _ = answer_of(cpu_run("catdog-original", [2.0, 1.0, 1.0]))
    assert gpu_text(found) == "—" and found.basis == "nothing published to carry"


def test_a_gpu_measured_here_answers_with_its_own_speedup_and_interval():
    # CPU steady epochs of 2.0 and 2.2 s, GPU of 0.5 and 0.55 s: 4x, the published figures not needed
    found, text = answer_of(
        cpu_run("cifar10-mlp", [3.0, 2.0, 2.2], batch_size=32),
        cpu_run("cifar10-mlp", [1.0, 0.5, 0.55], device="cuda:0", batch_size=32),
    )
    (gpu,) = found.measured
    assert found.carried is None and found.basis == "measured here"
    assert gpu.speedup.ratio == pytest.approx(4.0) and gpu_text(found) == speedup_text(gpu)
    assert gpu_text(found).startswith("4.00x [") and "Measured here: the ratio of median steady samples/s" in unwrapped(
        text
    )


def test_a_gpu_alone_has_no_cpu_to_be_set_against():
    found, _ = answer_of(cpu_run("cifar10-mlp", [1.0, 0.5, 0.5], device="cuda:0", batch_size=32))
    assert found.cpu is None and found.basis == "no CPU samples/s here" and gpu_text(found) == "—"


def test_the_seed_mode_cpu_row_is_the_one_carried():
    seed, tuned = (
        cpu_run("cifar10-mlp", [2.0, 10.0, 10.0], batch_size=32),
        cpu_run("cifar10-mlp", [2.0, 5.0, 5.0], batch_size=32),
    )
    tuned.settings.mode = "tuned"
    found, _ = answer_of(tuned, seed)
    assert found.cpu.settings["mode"] == "seed" and found.cpu.samples_per_s.median == pytest.approx(100.0)


def test_the_estimate_is_named_only_for_workloads_it_can_take_by_name():
    """Boosted trees have no kernels to count, and a model of the user's is given to estimate as --model."""
    _, trees = answer_of(cpu_run("gbdt-covertype", [2.0, 1.0, 1.0]))
    assert "devicebench estimate" not in unwrapped(trees)
    own = dataclasses.replace(get_workload("mnist-cnn2"), name="mypkg.models:build", origin=OWN_MODEL, published=None)
    register_own(own)  # as `run --model` does, for the session
    found, text = answer_of(cpu_run("mypkg.models:build", [2.0, 1.0, 1.0]))
    assert found.basis == "nothing published to carry" and "devicebench estimate" not in unwrapped(text)


def test_on_a_machine_with_only_a_cpu_run_ends_with_two_tables_and_no_one_row_baselines():
    """The answer, then one table of every workload on the CPU: not a one-row table each reading 1.00x (baseline)."""
    from rich.table import Table

    from devicebench.cli.run import run_tables
    from devicebench.report.fitting import FittedTable

    records = [
        cpu_run(name, [2.0, 1.0, seconds], batch_size=32)
        for name, seconds in (("cifar10-mlp", 1.0), ("mnist-cnn2", 2.0), ("catdog-original", 4.0))
    ]
    parts = list(run_tables(session(machine("vm", "m1"), records), wide=False))
    tables = [part for part in parts if isinstance(part, (Table, FittedTable))]
    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    for part in parts:
        console.print(part)
    text = console.export_text()
    assert len(tables) == 2 and "1.00x (baseline)" not in text and "Speedup" not in text
    assert (
        "Every workload on cpu (cpu model) on synthetic data: the only device here, so no speedup is measured" in text
    )
    figures = text[text.index("Every workload on cpu") :]
    for name, rate in (("cifar10-mlp", "1,000"), ("mnist-cnn2", "750"), ("catdog-original", "625")):
        (line,) = [" ".join(line.split()) for line in figures.splitlines() if line.startswith(f"│ {name} ")]
        assert line.startswith(f"│ {name} │ batch 32, 3 epochs of 10 steps │ {rate} │")  # the data in the title
    with_gpu = list(
        run_tables(
            session(
                machine("vm", "m1"), [*records, cpu_run("mnist-cnn2", [1.0, 0.5, 0.5], device="cuda:0", batch_size=32)]
            ),
            wide=False,
        )
    )
    assert len([part for part in with_gpu if isinstance(part, (Table, FittedTable))]) == 4  # the answer, a table each
