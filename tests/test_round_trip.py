"""What a run stores reads back, for every kind of workload and every command that reads the database.

Every registered workload (the seeds, the text models, the boosted trees, an installed plugin) and a model of the
user's own train briefly into one database; then every reading command runs on it: history, compare, export (JSON
and CSV), import into another database, report, estimate --validate and reproduce. And a run the reader would
refuse is refused when it is written, never after.

    python -m pytest tests/test_round_trip.py -q
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devicebench.results.schema import NO_BATCHES
from devicebench.results.store import Store
from devicebench.results.store_errors import UnreadableRun

SIDE_BY_SIDE = 3
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BRIEFLY = ["--devices", "cpu", "--epochs", "2", "--max-steps", "2", "--max-eval-steps", "1", "--quiet"]
# The reference models, by family, at sizes that train in seconds (their own: a step of minutes on 2 cores)
REFERENCE_MODELS_SMALL = {
    ("resnet50", "resnet152", "vgg16"): ["image_size=32"],
    ("bert-base", "bert-large", "gpt2-small"): [
        "layers=2",
        "width=64",
        "heads=2",
        "sequence_length=32",
        "vocab_size=1024",
    ],
    ("gnmt",): ["width=64", "vocab_size=64", "source_length=7", "target_length=5"],
}
REFERENCE_MODELS = [name for family in REFERENCE_MODELS_SMALL for name in family]
# The two slowest of the rest at their own sizes (catdog-deep: 7 s a step of 32 images, the Covertype trees: 3 s a
# round of depth 8, on 2 cores), trained small beside the reference families
SEEDS_SMALL = {"catdog-deep": ["--batch-size", "2"], "gbdt-covertype": ["--set=max_depth=2"]}


def devicebench(*arguments: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "devicebench", *arguments], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def side_by_side(commands: dict[str, list[str]], env: dict[str, str]) -> dict[str, subprocess.CompletedProcess]:
    """Each of `commands` run, SIDE_BY_SIDE at a time (a few interpreters with torch fit any CI machine's memory),
    waited for: name -> its completed process."""
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        running = {name: pool.submit(devicebench, *arguments, env=env) for name, arguments in commands.items()}
        return {name: future.result() for name, future in running.items()}


@pytest.fixture(scope="module")
def every_kind_stored(plugin_environment, tmp_path_factory) -> tuple[dict[str, str], list[str]]:
    """A database holding a short run of every registered workload and of examples/own_model.py's MyNet."""
    folder = tmp_path_factory.mktemp("round-trip")
    env = {**plugin_environment, "DEVICEBENCH_DB": str(folder / "results.sqlite"), "COLUMNS": "80"}
    listed = devicebench("list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    names = [entry["name"] for entry in json.loads(listed.stdout) if not entry.get("unavailable")]
    assert {"mnist-cnn2", "imdb-bilstm", "gbdt-synthetic", "lenet5-mnist"} <= set(names)  # seed, text, trees, plugin
    assert set(REFERENCE_MODELS) <= set(names)
    trained = devicebench(
        "run",
        *[name for name in names if name not in REFERENCE_MODELS and name not in SEEDS_SMALL],
        "--data",
        "synthetic",
        *BRIEFLY,
        env=env,
    )
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    # each family at a tiny size of its own, and the model of examples/own_model.py, side by side: several
    # sessions writing one database at once, as a user's terminals may
    own = ["run", "--model", "own_model:MyNet", "--data", "own_model:make_data", *BRIEFLY]
    families = {
        ", ".join(family): [
            "run",
            *family,
            *(f"--set={size}" for size in sizes),
            "--batch-size",
            "2",
            "--data",
            "synthetic",
            *BRIEFLY,
        ]
        for family, sizes in REFERENCE_MODELS_SMALL.items()
    }
    own_env = {**env, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), env["PYTHONPATH"]])}
    small = {name: ["run", name, *sizes, "--data", "synthetic", *BRIEFLY] for name, sizes in SEEDS_SMALL.items()}
    for name, completed in side_by_side({**families, **small, "own_model:MyNet": own}, env=own_env).items():
        assert completed.returncode == 0, name + ": " + completed.stdout[-2000:] + completed.stderr[-2000:]
    return env, names


@pytest.mark.slow  # trains twenty workloads and a model of the user's own: about two minutes on 2 cores
def test_every_reading_command_reads_what_every_kind_of_workload_stored(every_kind_stored, tmp_path):
    env, names = every_kind_stored
    history = devicebench("history", "--json", env=env)
    assert history.returncode == 0, history.stderr
    stored = [run["workload"] for result in json.loads(history.stdout)["results"] for run in result["runs"]]
    assert sorted(stored) == sorted([*names, "own_model:MyNet"])  # every run, once
    assert all(run["status"] == "ok" for result in json.loads(history.stdout)["results"] for run in result["runs"])
    exported, table, page = tmp_path / "runs.json", tmp_path / "runs.csv", tmp_path / "report.html"
    # The commands that only read the database run side by side, as two terminals would: SQLite serves readers at
    # once, and two cores start their interpreters (seconds each, importing torch) side by side
    readers = {
        "history": ["history"],
        "compare": ["compare"],
        "compare --wide": ["compare", "--wide"],
        "export json": ["export", str(exported)],
        "export csv": ["export", str(table)],
        "report": ["report", "--out", str(page)],
        "estimate --validate": ["estimate", "--validate"],
    }
    done = side_by_side(readers, env=env)
    for name, completed in done.items():
        assert completed.returncode == 0, f"{name}: {completed.stderr}"
    for name in ("history", "compare", "compare --wide"):
        assert "gbdt-synthetic" in done[name].stdout and "MyNet" in done[name].stdout, name
    with table.open(newline="") as rows:
        assert len({row["run_id"] for row in csv.DictReader(rows)}) == len(stored)  # a line per epoch of every run
    other = {**env, "DEVICEBENCH_DB": str(tmp_path / "other.sqlite")}
    imported = devicebench("import", str(exported), env=other)
    assert imported.returncode == 0, imported.stderr
    again = devicebench("history", "--json", env=other)
    assert json.loads(again.stdout) == json.loads(history.stdout)  # nothing lost or changed on the way
    assert "gbdt-synthetic" in page.read_text()
    reproduce = devicebench(  # its epochs sized to a short budget: 9 s on 2 cores, where --quick alone took 54 s
        "reproduce", "S4", "--quick", "--budget", "10s", "--devices", "cpu", "--data", "synthetic", "--quiet", env=env
    )
    assert reproduce.returncode == 0, reproduce.stderr
    after = devicebench("history", "--json", env=env)
    assert after.returncode == 0, after.stderr  # what reproduce stored reads back too
    assert len([run for result in json.loads(after.stdout)["results"] for run in result["runs"]]) > len(stored)


def test_a_boosted_tree_run_stored_by_the_previous_release_reads(default_results_db, make_result, make_run):
    """The previous release stored boosted trees' batch as 0 ("every row each round") and refused to read it."""
    trees = make_run("gbdt-synthetic")
    trees.settings.batch_size = NO_BATCHES
    with Store(default_results_db) as store:
        store.import_results([make_result("laptop", [trees])])
    with Store(default_results_db, reading_only=True) as store:
        [result] = store.results()
    assert result.runs[0].settings.batch_size == NO_BATCHES


def test_a_run_the_reader_would_refuse_is_refused_when_written(default_results_db, make_result, make_run):
    session, refused = make_result("laptop", []), "nothing was stored: devicebench could not read this run back"
    negative_batch = make_run("mnist-cnn2", epochs=[])
    negative_batch.settings.batch_size = -1
    started = make_run("mnist-cnn2", epochs=[], status="running")
    [good, above_one] = make_run("mnist-cnn2", epoch_times_s=(2.0, 1.0)).epochs
    above_one.test_accuracy = 1.5
    with Store(default_results_db) as store:
        store.add_session(session)
        with pytest.raises(UnreadableRun, match=r"settings\.batch_size: expected a whole number ≥ 0, got -1"):
            store.start_run(session.result_id, negative_batch)
        store.start_run(session.result_id, started)
        store.add_epoch(started.run_id, good)
        with pytest.raises(UnreadableRun, match=rf"{refused}.*epochs\[1\]\.test_accuracy: expected a finite"):
            store.add_epoch(started.run_id, above_one)
        started.epochs = [good, above_one]
        started.status = "ok"
        with pytest.raises(UnreadableRun, match=refused):
            store.finish_run(started)
        [result] = store.results()  # what was refused was rolled back: what is stored still reads
    assert [(run.run_id, run.status, len(run.epochs)) for run in result.runs] == [(started.run_id, "running", 1)]
