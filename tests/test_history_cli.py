"""`devicebench history`, `export`, `import` and `run --db` as a user meets them, errors included.

python -m pytest tests/test_history_cli.py -q
"""

from __future__ import annotations

import csv
import hashlib
import json

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app, console
from devicebench.results.schema import SCHEMA_VERSION
from devicebench.results.store import Store

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1"]


@pytest.fixture
def stored(default_results_db, make_result, make_run):
    """The default database holding a laptop session (2 runs) and a server session (1 interrupted GPU run)."""
    laptop = make_result(
        "laptop",
        [
            make_run("mnist-cnn2", run_id="1aptop0mnist", started_utc="2026-03-01T10:00:00Z"),
            make_run(
                "cifar10-mlp",
                run_id="1aptop0cifar",
                started_utc="2026-03-01T10:05:00Z",
                status="failed",
                epoch_times_s=(),
                error="RuntimeError: boom",
            ),
        ],
        created_utc="2026-03-01T10:00:00Z",
    )
    gpu_run = make_run(
        "mnist-cnn2",
        "cuda:0",
        run_id="5erver0gpu",
        started_utc="2026-03-02T11:00:00Z",
        status="interrupted",
        epoch_times_s=(0.5, 0.25),
    )
    gpu_run.settings.epochs = 3  # two of three epochs finished
    server = make_result("server", [gpu_run], created_utc="2026-03-02T11:00:00Z")
    with Store(default_results_db) as store:
        store.import_results([laptop, server])
    return [laptop, server]


def as_dicts(results):
    return [result.to_dict() for result in results]


def unwrapped(text: str) -> str:
    """`text` with rich's line wrapping undone: every run of whitespace becomes one space."""
    return " ".join(text.split())


# --- history -----------------------------------------------------------------------------------------------------


def test_history_of_an_empty_database_says_so_and_where_it_is(default_results_db):
    result = cli.invoke(app, ["history"])
    assert result.exit_code == 0, result.output
    assert f"No runs stored in {default_results_db} yet." in unwrapped(result.stdout)


def test_history_shows_one_line_per_run_with_its_figures(stored, monkeypatch):
    monkeypatch.setattr(console, "width", 80)  # a terminal of 80 columns: the time of day may wrap, no figure does
    result = cli.invoke(app, ["history"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    laptop_mnist = next(line for line in lines if "1aptop0m" in line)
    # steady epochs of 1.0 s and 1.25 s for 1000 samples: medians 900 samples/s and 1.12 s; last test accuracy 0.7,
    # in percent as every other view shows it
    assert [word for word in laptop_mnist.split() if word != "10:00"] == [
        "1aptop0m",
        "03-01",  # the year once, in the title (every run here started in 2026)
        "laptop",
        "mnist-cnn2",
        "cpu",
        "ok",
        "900",
        "70.0%",
    ]
    assert "3 runs in" in result.stdout and max(len(line) for line in lines) <= 80
    monkeypatch.setattr(console, "width", 200)
    wide = cli.invoke(app, ["history", "--wide"])
    lines = wide.stdout.splitlines()
    laptop_mnist = next(line for line in lines if "1aptop0m" in line)
    assert laptop_mnist.split() == [
        "1aptop0m",
        "03-01",
        "10:00",
        "laptop",
        "mnist-cnn2",
        "cpu",
        "ok",
        "3/3",
        "900",
        "1.12",
        "70.0%",
        "synthetic",
        "50",
    ]
    failed = next(line for line in lines if "1aptop0c" in line)
    assert failed.split()[3:9] == ["laptop", "cifar10-mlp", "cpu", "failed", "0/0", "—"]
    gpu = next(line for line in lines if "5erver0g" in line)
    assert gpu.split()[3:11] == ["server", "mnist-cnn2", "cuda:0", "interrupted", "2/3", "4,000", "0.25", "60.0%"]


@pytest.mark.parametrize(
    "flags, shown",
    [
        (["--machine", "server"], ["5erver0g"]),
        (["--workload", "mnist-*"], ["1aptop0m", "5erver0g"]),
        (["--status", "failed"], ["1aptop0c"]),
        (["--last", "2"], ["1aptop0c", "5erver0g"]),
    ],
)
def test_history_filters(stored, flags, shown):
    result = cli.invoke(app, ["history", *flags])
    assert result.exit_code == 0, result.output
    assert [run_id for run_id in ("1aptop0m", "1aptop0c", "5erver0g") if run_id in result.stdout] == shown


def test_history_with_filters_matching_nothing_says_so(stored):
    result = cli.invoke(app, ["history", "--machine", "nowhere"])
    assert result.exit_code == 0 and "match these filters" in result.stdout


def test_history_json_is_an_export_document(stored):
    result = cli.invoke(app, ["history", "--json", "--machine", "laptop"])
    document = json.loads(result.stdout)
    assert document["kind"] == "devicebench-export" and document["schema_version"] == SCHEMA_VERSION
    assert document["results"] == as_dicts(stored[:1])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--status", "exploded"], "unknown status 'exploded'"),
        (["--last", "0"], "--last"),
    ],
)
def test_history_refuses_impossible_filters(flags, message):
    result = cli.invoke(app, ["history", *flags])
    assert result.exit_code == EXIT_USAGE and message in unwrapped(result.output)


def test_a_corrupt_database_is_a_clear_error_and_left_alone(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"my notes, not a database\n" * 20)
    result = cli.invoke(app, ["history", "--db", str(path)])
    assert result.exit_code == EXIT_USAGE
    assert f"{path} is not a devicebench results database: it is not an SQLite file" in unwrapped(result.output)
    assert "pass another --db" in unwrapped(result.output)
    assert path.read_bytes() == b"my notes, not a database\n" * 20


# --- export and import ---------------------------------------------------------------------------------------------


def test_export_then_import_elsewhere_then_again_adds_nothing(stored, tmp_path):
    exported = cli.invoke(app, ["export", str(tmp_path / "all.json")])
    assert exported.exit_code == 0, exported.output
    assert "Wrote 3 runs" in exported.stdout
    other = tmp_path / "other.sqlite"
    first = cli.invoke(app, ["import", str(tmp_path / "all.json"), "--db", str(other)])
    assert first.exit_code == 0, first.output
    assert "all.json: 3 runs added, 0 already present" in first.stdout
    again = cli.invoke(app, ["import", str(tmp_path / "all.json"), "--db", str(other)])
    assert "all.json: 0 runs added, 3 already present" in again.stdout
    with Store(other) as store:
        assert as_dicts(store.results()) == as_dicts(stored)


def test_export_with_filters_writes_only_the_matching_runs(stored, tmp_path):
    result = cli.invoke(app, ["export", str(tmp_path / "gpu.json"), "--machine", "server", "--workload", "mnist-*"])
    assert result.exit_code == 0 and "Wrote 1 run " in result.stdout
    document = json.loads((tmp_path / "gpu.json").read_text())
    assert document["results"] == as_dicts(stored[1:])


def test_export_csv_has_one_row_per_epoch_with_the_run_machine_and_settings(stored, tmp_path):
    result = cli.invoke(app, ["export", str(tmp_path / "epochs.csv")])
    assert result.exit_code == 0, result.output
    with open(tmp_path / "epochs.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 3 + 0 + 2  # the failed run finished no epoch
    assert [(row["machine_name"], row["run_id"], row["epoch"], row["phase"]) for row in rows[3:]] == [
        ("server", "5erver0gpu", "1", "warmup"),
        ("server", "5erver0gpu", "2", "steady"),
    ]
    last = rows[-1]
    assert float(last["train_time_s"]) == 0.25 and float(last["samples_per_s"]) == 4000
    assert last["device"] == "cuda:0" and last["batch_size"] == "50" and last["status"] == "interrupted"
    assert last["machine_id"] == stored[1].machine["machine_id"]
    assert json.loads(last["hyperparameters"]) == {"learning_rate": 0.001, "layers": [32, 64], "dropout": None}


def test_export_to_an_unknown_format_is_refused(stored, tmp_path):
    result = cli.invoke(app, ["export", str(tmp_path / "runs.xlsx")])
    assert result.exit_code == EXIT_USAGE
    assert "must end in .json or .csv" in unwrapped(result.output) and not (tmp_path / "runs.xlsx").exists()


def test_import_accepts_a_run_json_file(tmp_path, make_result, make_run):
    session = make_result("laptop", [make_run(), make_run(device="cuda:0")])
    session.write_json(tmp_path / "run.json")
    result = cli.invoke(app, ["import", str(tmp_path / "run.json")])
    assert result.exit_code == 0 and "run.json: 2 runs added, 0 already present" in result.stdout


def _bad_version(path):
    path.write_text(json.dumps({"schema_version": 99, "kind": "devicebench-export", "results": []}))


def _invalid_json(path):
    path.write_text('{"schema_version": 1, "results": [')


def _not_results(path):
    path.write_text('{"name": "a shopping list"}')


@pytest.mark.parametrize(
    "make_file, message",
    [
        (None, "no such file"),
        (_invalid_json, "is not valid JSON"),
        (_bad_version, "schema version 99"),
        (_not_results, "neither a devicebench export nor"),
    ],
)
def test_an_unreadable_import_file_is_named_and_the_others_still_import(
    tmp_path, make_result, make_run, make_file, message
):
    bad = tmp_path / "bad.json"
    if make_file is not None:
        make_file(bad)
    make_result("laptop", [make_run()]).write_json(tmp_path / "good.json")
    result = cli.invoke(app, ["import", str(bad), str(tmp_path / "good.json")])
    assert result.exit_code == EXIT_USAGE
    assert f"{bad}" in unwrapped(result.output) and message in unwrapped(result.output)
    assert "good.json: 1 run added" in result.output


def test_a_file_with_one_unreadable_result_imports_none_of_it(tmp_path, make_result, make_run):
    good = make_result("laptop", [make_run()]).to_dict()
    broken = make_result("server", [make_run()]).to_dict()
    del broken["runs"][0]["workload"]
    path = tmp_path / "mixed.json"
    path.write_text(
        json.dumps({"schema_version": SCHEMA_VERSION, "kind": "devicebench-export", "results": [good, broken]})
    )
    result = cli.invoke(app, ["import", str(path)])
    assert result.exit_code == EXIT_USAGE
    assert "mixed.json holds a result devicebench cannot read" in unwrapped(result.output)
    assert "No runs stored" in cli.invoke(app, ["history"]).stdout


# --- run --db ------------------------------------------------------------------------------------------------------


def test_run_stores_every_run_in_the_database_it_is_given(tmp_path):
    path = tmp_path / "bench.sqlite"
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(path), "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    assert f"Runs stored in {path}" in unwrapped(result.output)
    with Store(path) as store:
        [session] = store.results()
    assert session.to_dict() == json.loads((tmp_path / "r.json").read_text())
    assert [(run.status, len(run.epochs)) for run in session.runs] == [("ok", 2)]


def test_run_stores_in_the_default_database_without_db(default_results_db):
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN])
    assert result.exit_code == 0, result.output
    with Store(default_results_db) as store:
        assert [run.workload for session in store.results() for run in session.runs] == ["mnist-cnn2"]


def test_run_with_a_database_that_is_not_ours_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    path = tmp_path / "photo.jpg"
    path.write_bytes(bytes(range(256)) * 8)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(path)])
    assert result.exit_code == EXIT_USAGE and f"{path} is not a devicebench results database" in unwrapped(
        result.output
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
