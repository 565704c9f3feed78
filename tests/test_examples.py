"""The examples run as a user runs them: the plugin installed by pip (into a folder of its own) and found by
devicebench through its entry point, the plugin's own tests, and the Python API script."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLUGIN_DISTRIBUTION = "devicebench-example-plugin"


def command(*arguments: str, env: dict[str, str], cwd: Path | None = None, timeout: int = 300):
    return subprocess.run(
        [sys.executable, *arguments], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_the_installed_plugin_is_listed_with_its_origin_and_joins_the_quick_suite(plugin_environment):
    listed = command("-m", "devicebench", "list", "lenet5-mnist", "--json", env=plugin_environment)
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert (entry["name"], entry["origin"], entry["seed"], entry["published"]) == (
        "lenet5-mnist",
        PLUGIN_DISTRIBUTION,
        None,
        None,
    )
    assert entry["parameter_count"] == 61_706
    suite = command(
        "-c",
        "from devicebench import RunConfig; print(*[w.name for w in RunConfig().selected_workloads()])",
        env=plugin_environment,
    )
    assert suite.stdout.split()[-1] == "lenet5-mnist" and "mnist-cnn2" in suite.stdout.split()


@pytest.mark.slow
def test_the_installed_plugin_trains_like_a_seed_workload(plugin_environment, tmp_path):
    out = tmp_path / "run.json"
    run = command(
        "-m",
        "devicebench",
        "run",
        "lenet5-mnist",
        "--devices",
        "cpu",
        "--data",
        "synthetic",
        "--epochs",
        "2",
        "--max-steps",
        "5",
        "--max-eval-steps",
        "2",
        "--quiet",
        "--json",
        str(out),
        env=plugin_environment,
    )
    assert run.returncode == 0, run.stderr
    [record] = json.loads(out.read_text())["runs"]
    assert (record["workload"], record["status"], record["seed_experiment"]) == ("lenet5-mnist", "ok", "")
    assert [epoch["steps"] for epoch in record["epochs"]] == [5, 5]
    assert record["flops_per_sample"] > 0 and record["parameter_count"] == 61_706


@pytest.mark.slow
def test_the_plugins_own_tests_pass_against_this_devicebench(plugin_environment, tmp_path):
    tests = shutil.copytree(EXAMPLES / "plugin" / "tests", tmp_path / "tests")
    result = command("-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests), env=plugin_environment, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


@pytest.mark.slow
def test_a_broken_plugin_is_reported_and_the_rest_still_works(tmp_path):
    """A plugin whose module raises on import is left out with its error; devicebench's workloads stay."""
    site = tmp_path / "site"
    (site / "broken_plugin").mkdir(parents=True)
    (site / "broken_plugin" / "__init__.py").write_text("raise RuntimeError('this plugin is broken')\n")
    metadata = site / "broken_plugin-1.0.dist-info"
    metadata.mkdir()
    (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text("[devicebench.workloads]\nbroken = broken_plugin\n")
    listed = command("-m", "devicebench", "list", env={**os.environ, "PYTHONPATH": str(site)})
    assert listed.returncode == 0, listed.stderr
    assert "mnist-cnn2" in listed.stdout
    assert "plugin broken (broken_plugin) could not be loaded" in listed.stderr
    assert "RuntimeError: this plugin is broken" in listed.stderr


@pytest.mark.slow
def test_the_own_model_script_trains_both_steps_and_stores_them(tmp_path):
    """The command docs/own-model.md gives, as written."""
    database = tmp_path / "results.sqlite"
    script = command(
        str(EXAMPLES / "own_model.py"), "--devices", "cpu", env={**os.environ, "DEVICEBENCH_DB": str(database)}
    )
    assert script.returncode == 0, script.stderr
    assert "MyNet: batch 64, 3 epochs of 32 steps, real data" in script.stdout
    assert "MyNet-clipped: batch 64, 3 epochs of 32 steps" in script.stdout
    assert f"Stored in {database}" in script.stdout
    accuracies = [float(share) for share in re.findall(r"│ cpu .*│ +1\.00x \(baseline\) │ +([\d.]+)% │", script.stdout)]
    assert len(accuracies) == 2 and min(accuracies) > 80, accuracies  # four classes: chance is 25%
    history = command("-m", "devicebench", "history", "--db", str(database), env=os.environ.copy())
    assert history.stdout.count("MyNet") == 2, history.stdout
