"""The issue's own story, end to end through the CLI: two machines (two databases), one import, one report."""

from __future__ import annotations

import re

from typer.testing import CliRunner

import devicebench.cli
from devicebench.cli import EXIT_USAGE, app
from devicebench.results.store import Store

cli = CliRunner()
TINY = [
    "--devices",
    "cpu",
    "--data",
    "synthetic",
    "--epochs",
    "2",
    "--max-steps",
    "2",
    "--max-eval-steps",
    "1",
    "--quiet",
]


def run_on(machine: str, db, monkeypatch, *extra: str) -> None:
    monkeypatch.setenv("DEVICEBENCH_MACHINE", machine)
    result = cli.invoke(app, ["run", "cifar100-mlp", *TINY, "--repeats", "2", "--db", str(db), *extra])
    assert result.exit_code == 0, result.output


def test_two_machines_compare_in_one_report(tmp_path, monkeypatch):
    laptop_db, server_db = tmp_path / "laptop.sqlite", tmp_path / "server.sqlite"
    run_on("laptop", laptop_db, monkeypatch, "--threads", "1")
    run_on("server", server_db, monkeypatch)
    exported = tmp_path / "server.json"
    assert cli.invoke(app, ["export", str(exported), "--db", str(server_db)]).exit_code == 0
    imported = cli.invoke(app, ["import", str(exported), "--db", str(laptop_db)])
    assert imported.exit_code == 0 and "2 runs added" in imported.output
    again = cli.invoke(app, ["import", str(exported), "--db", str(laptop_db)])
    assert "0 runs added" in again.output  # importing twice adds nothing

    with Store(laptop_db) as store:
        machines = {result.machine["machine_name"] for result in store.results()}
        assert machines == {"laptop", "server"}

    monkeypatch.setattr(devicebench.cli.console, "width", 250)  # one line per table row, as on a wide terminal
    compared = cli.invoke(app, ["compare", "--db", str(laptop_db), "--baseline", "laptop/cpu"])
    assert compared.exit_code == 0
    assert re.search(r"laptop/cpu .*1\.00x \(baseline\)", compared.output)
    assert re.search(r"server/cpu .*\d\.\d\dx \[\d\.\d\d–\d\.\d\d\]", compared.output)  # interval from 2 repeats

    page = tmp_path / "report.html"
    reported = cli.invoke(app, ["report", "--db", str(laptop_db), "--out", str(page), "--baseline", "laptop/cpu"])
    assert reported.exit_code == 0 and "4 runs from 2 machines" in reported.output
    html = page.read_text()
    assert "laptop/cpu" in html and "server/cpu" in html and "data:image/png;base64," in html


def test_compare_with_prices_adds_cost_columns(tmp_path, monkeypatch):
    db = tmp_path / "runs.sqlite"
    run_on("laptop", db, monkeypatch)
    result = cli.invoke(app, ["compare", "--db", str(db), "--price", "cpu=0.36"])
    assert result.exit_code == 0 and "Cost/1M" in result.output


def test_compare_refusals_show_their_brackets(tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text("[default]\ngpu = 1\n")
    result = cli.invoke(app, ["compare", "--db", str(tmp_path / "x.sqlite"), "--price", str(prices)])
    assert result.exit_code == EXIT_USAGE
    assert "[default]" in result.output  # printed as text, not swallowed as rich markup
    empty = cli.invoke(app, ["compare", "--db", str(tmp_path / "empty.sqlite")])
    assert empty.exit_code == 0 and "No stored runs match" in empty.output


def test_reproduce_sets_measured_beside_published(tmp_path):
    result = cli.invoke(
        app,
        [
            "reproduce",
            "S4",
            "--quick",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--quiet",
            "--db",
            str(tmp_path / "runs.sqlite"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Published vs measured here" in result.output
    assert "Tesla T4" in result.output and "measured here" in result.output and "no GPU here" in result.output
    with Store(tmp_path / "runs.sqlite") as store:
        (stored,) = store.results()
    assert [run.workload for run in stored.runs] == ["cifar100-mlp"]
    assert stored.runs[0].settings.epochs == 3  # the quick suite


def test_reproduce_refuses_unknown_and_empty_seeds():
    unknown = cli.invoke(app, ["reproduce", "S9"])
    assert unknown.exit_code == EXIT_USAGE and "unknown seed experiment S9" in unknown.output


def test_run_writes_tensorboard_logs(tmp_path):
    logs = tmp_path / "tb"
    result = cli.invoke(
        app, ["run", "cifar100-mlp", *TINY, "--db", str(tmp_path / "r.sqlite"), "--tensorboard", str(logs)]
    )
    assert result.exit_code == 0, result.output
    assert list((logs / "cifar100-mlp").glob("cpu-repeat1-*/events.out.tfevents.*"))


def test_report_into_a_missing_folder_is_refused_and_creates_nothing(tmp_path):
    missing = tmp_path / "no-such-folder"
    result = cli.invoke(app, ["report", "--db", str(tmp_path / "r.sqlite"), "--out", str(missing / "r.html")])
    assert result.exit_code == EXIT_USAGE and "does not exist" in result.output
    assert not missing.exists()
