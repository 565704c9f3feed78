"""The command line as a user meets it: every command, the errors, and what a run writes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import fakes
import pytest
import torch
from typer.testing import CliRunner

from devicebench import __version__
from devicebench.cli import EXIT_USAGE, app
from devicebench.workloads import list_workloads

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1"]


def test_version():
    result = cli.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"devicebench {__version__}"


def test_devices_describes_the_cpu_and_says_why_there_is_no_gpu(monkeypatch):
    gpu_here = torch.cuda.is_available()
    if not gpu_here:  # a CPU-only build, whichever build runs the test (a CUDA one gives its own reason)
        fakes.install_machine(monkeypatch, fakes.this_machine(cuda_build=None, hip_build=None))
    result = cli.invoke(app, ["devices"])
    assert result.exit_code == 0, result.output
    assert "CPU" in result.stdout and "Torch threads" in result.stdout
    if not gpu_here:
        assert "No GPU" in result.stdout and "CPU-only build" in result.stdout


def test_devices_json_is_the_machine_fingerprint():
    result = cli.invoke(app, ["devices", "--json"])
    fingerprint = json.loads(result.stdout)
    assert fingerprint["cpu"]["logical_cores"] >= 1
    assert fingerprint["torch"] == torch.__version__


def test_list_shows_every_workload_with_published_figures():
    result = cli.invoke(app, ["list"])
    assert result.exit_code == 0
    for entry in list_workloads():
        assert entry.name in result.stdout
    assert "3,274,634" in result.stdout  # mnist-cnn2's parameters
    assert "6.6x" in result.stdout  # S2's published speedup


def test_list_json_and_pattern():
    result = cli.invoke(app, ["list", "*mlp", "--json"])
    rows = json.loads(result.stdout)
    assert [row["name"] for row in rows] == ["cifar10-mlp", "cifar100-mlp"]
    assert rows[0]["parameter_count"] == 12_230_010 and rows[0]["defaults"]["batch_size"] == 32
    assert rows[1]["published"]["end_to_end_s"] == {"cpu": 1075.0, "gpu": 343.0}


def test_list_of_an_unknown_pattern_is_an_error():
    result = cli.invoke(app, ["list", "vit*"])
    assert result.exit_code == EXIT_USAGE
    assert "no workload matches 'vit*'" in result.output


def test_run_prints_epoch_lines_and_a_table_and_writes_json(tmp_path):
    output = tmp_path / "run.json"
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--repeats", "2", "--json", str(output)])
    assert result.exit_code == 0, result.output
    assert "Epoch 2/2  3/3" in result.output and "(warm-up)" in result.output
    assert "1.00x (baseline)" in result.stdout and "SYNTHETIC DATA" in result.stdout
    data = json.loads(output.read_text())
    assert [run["status"] for run in data["runs"]] == ["ok", "ok"]
    run = data["runs"][0]
    assert run["settings"]["data_source"] == "synthetic" and run["settings"]["batch_size"] == 50
    assert [epoch["phase"] for epoch in run["epochs"]] == ["warmup", "steady"]
    assert run["epochs"][1]["samples"] == 150 and run["summary"]["steady_samples_per_s"] > 0
    assert data["machine"]["cpu"]["logical_cores"] >= 1


def test_run_with_an_unknown_workload_names_the_known_ones():
    result = cli.invoke(app, ["run", "resnet18", *TINY_RUN])
    assert result.exit_code == EXIT_USAGE
    assert "unknown workload 'resnet18'" in result.output and "mnist-cnn2" in result.output


@pytest.mark.parametrize("device", ["cuda:7", "tpu"])
def test_run_on_a_missing_device_lists_the_present_ones(device):
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN[:0], "--devices", device, "--data", "synthetic"])
    assert result.exit_code == EXIT_USAGE
    assert device in result.output and "cpu" in result.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--epochs", "0"], "--epochs must be"),
        (["--suite", "huge"], "unknown suite 'huge'"),
        (["--data", "imaginary"], "unknown data source"),
        (["--batch-size", "-1"], "--batch-size must be"),
    ],
)
def test_run_refuses_impossible_values(flags, message):
    result = cli.invoke(app, ["run", "mnist-cnn2", *flags])
    assert result.exit_code == EXIT_USAGE
    assert message in result.output


def test_run_without_real_data_fails_clearly_when_real_is_demanded(tmp_path, monkeypatch):
    import devicebench.data as data

    def unavailable(*arguments, **keywords):
        raise data.DataUnavailable(
            "t10k.gz", tmp_path / "somewhere", [("https://x.invalid/t10k.gz", "refused")], "md5:00"
        )

    monkeypatch.setattr("devicebench.runner.load_dataset", unavailable)
    result = cli.invoke(app, ["run", "mnist-cnn2", "--devices", "cpu", "--data", "real", "--epochs", "2"])
    assert result.exit_code == 1
    assert "failed" in result.output and "https://x.invalid/t10k.gz: refused" in result.output
    assert str(tmp_path / "somewhere") in result.output  # where to put the file by hand


def test_json_into_a_missing_folder_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--json", str(tmp_path / "no" / "out.json")])
    assert result.exit_code == EXIT_USAGE
    assert "does not exist" in result.output


def test_set_changes_the_training_and_is_recorded(tmp_path):
    output = tmp_path / "run.json"
    result = cli.invoke(app, ["run", "cifar100-mlp", *TINY_RUN, "--set", "learning_rate=0.01", "--json", str(output)])
    assert result.exit_code == 0, result.output
    settings = json.loads(output.read_text())["runs"][0]["settings"]
    assert settings["overrides"] == {"learning_rate": 0.01}
    assert settings["hyperparameters"]["learning_rate"] == 0.01


def test_set_of_an_unknown_parameter_lists_the_known_ones():
    result = cli.invoke(app, ["run", "cifar100-mlp", *TINY_RUN, "--set", "depth=40"])
    assert result.exit_code == EXIT_USAGE
    assert "cifar100-mlp has no parameter 'depth'" in result.output and "learning_rate" in result.output


def model_that_breaks(monkeypatch, name: str, at_step: int, error: Exception | None = None) -> None:
    """Make `name`'s model raise `error` in its `at_step`-th training forward pass (counted over the whole run), or
    with no error, return NaNs there: out of memory or a diverging loss at a step the test chooses."""
    import dataclasses
    import itertools
    import math

    from devicebench import workloads
    from devicebench.workloads import _registry

    entry = workloads.get_workload(name)

    def build(hyperparameters):
        model = entry.build_model(hyperparameters)
        training_calls = itertools.count(1)

        def at_the_step(module, inputs, output):
            if inputs[0].device.type == "meta" or not module.training:  # FLOP counting, evaluation
                return None
            if next(training_calls) == at_step:
                if error is not None:
                    raise error
                return output * math.nan
            return None

        model.register_forward_hook(at_the_step)
        return model

    monkeypatch.setitem(_registry._REGISTRY, name, dataclasses.replace(entry, build_model=build))


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            "out of memory at batch size 8 on cpu",
        ),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9437184000 bytes"),
            "out of host memory at batch size 8",
        ),
    ],
)
def test_out_of_memory_mid_run_marks_the_row_keeps_the_epochs_and_exits_1(tmp_path, monkeypatch, error, said):
    model_that_breaks(monkeypatch, "mnist-cnn2", at_step=5, error=error)  # 3 steps an epoch: epoch 2's 2nd step
    output = tmp_path / "run.json"
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--batch-size", "8", "--json", str(output)])
    assert result.exit_code == 1, result.output  # README: 1 some run failed or ran out of memory
    shown = " ".join(result.stdout.split())
    assert f"repeat 1: oom: {said}" in shown and "try a smaller --batch-size" in shown
    run = json.loads(output.read_text())["runs"][0]
    assert run["status"] == "oom" and run["settings"]["batch_size"] == 8
    assert [epoch["epoch"] for epoch in run["epochs"]] == [1]  # the epoch before it is kept


def test_a_nan_loss_marks_the_row_diverged_at_its_step_and_exits_0(tmp_path, monkeypatch):
    model_that_breaks(monkeypatch, "mnist-cnn2", at_step=5)  # NaN outputs at step 5: epoch 2, its 2nd step
    output = tmp_path / "run.json"
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--json", str(output)])
    assert result.exit_code == 0, result.output  # README: a diverged run is a result, shown as diverged
    assert "repeat 1: diverged: loss became nan at step 5 (epoch 2)" in " ".join(result.stdout.split())
    run = json.loads(output.read_text())["runs"][0]
    assert run["status"] == "diverged" and run["diverged_at_step"] == 5 and len(run["epochs"]) == 2


def test_the_command_needs_no_click_package_beside_a_typer_that_carries_its_own(tmp_path):
    """typer 0.29 carries its own click (typer._click) and installs no click package: with none to import, the
    listing, a command and a refused value answer as always."""
    if importlib.util.find_spec("typer._click") is None:
        pytest.skip("this typer runs on the click package")
    script = (
        "import sys; sys.modules['click'] = None  # from now on `import click` raises ImportError\n"
        "from devicebench.__main__ import main; main()"
    )

    def devicebench(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=120)

    listed = devicebench("--help")
    assert listed.returncode == 0, listed.stderr
    assert "history" in listed.stdout and "Delete stored runs by id" in listed.stdout
    database = tmp_path / "results.sqlite"
    history = devicebench("history", "--db", str(database))
    assert history.returncode == 0, history.stderr
    refused = devicebench("history", "--db", str(database), "--last", "0")
    assert refused.returncode == EXIT_USAGE, refused.stderr
    assert "0 is no count of runs" in refused.stderr


@pytest.mark.parametrize("command", ["run", "export", "forget", "compare"])
def test_help_on_80_columns_names_no_python_types_and_breaks_no_sentence(command):
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert "list[" not in shown.output and "<bool>" not in shown.output
    if command == "run":  # the docstring's source lines ended after `143`: its paragraph is one, wrapped at 80
        assert "<str>..." in shown.output
        assert "143 stopped by SIGTERM" in shown.output  # at 80 columns the paragraph wraps elsewhere


def test_piped_output_takes_the_width_of_the_terminal_the_command_was_typed_in(monkeypatch):
    """`devicebench compare | less` on an 80-column terminal wrapped its paragraphs at 200 columns."""
    import os
    import sys
    from types import SimpleNamespace

    from devicebench.cli import output

    def terminal_size(descriptor: int) -> os.terminal_size:
        if descriptor == 2:  # stderr is still the terminal; stdout the pipe
            return os.terminal_size((80, 24))
        raise OSError("not a terminal")

    monkeypatch.setattr(output.os, "get_terminal_size", terminal_size)
    for name, descriptor in (("stderr", 2), ("stdin", 0), ("stdout", 1)):
        monkeypatch.setattr(sys, name, SimpleNamespace(fileno=lambda descriptor=descriptor: descriptor))
    assert output.width_when_piped() == 80
    monkeypatch.setattr(sys, "stderr", SimpleNamespace(fileno=lambda: 5))  # no terminal anywhere: a log, CI
    assert output.width_when_piped() == output.WIDTH_WHEN_PIPED == 200
