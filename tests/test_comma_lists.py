"""Every comma-list option of every command: nothing named, an empty item or a name given twice is a usage error
(exit 2) with a line that says what to write, never "an unexpected error ... a bug", and nothing is stored.

    python -m pytest tests/test_comma_lists.py -q
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app

# (command line before the list, the flag, what a good list looks like): each fails or stops before any training
LISTS = [
    (["estimate", "cifar10-mlp", "--data", "synthetic"], "--on", "t4,l4"),
    (["estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic"], "--price", "t4=0.35"),
    (["compare"], "--price", "cpu=0.10,cuda=2.50"),
    (["report"], "--price", "cpu=0.10,cuda=2.50"),
    (["run", "mnist-cnn2", "--data", "synthetic", "--dry-run"], "--devices", "cpu"),
    (["reproduce", "S1", "--data", "synthetic"], "--devices", "cpu"),
    (["check"], "--devices", "cpu"),
    (["calibrate"], "--devices", "cpu"),
    (["sweep", "mnist-cnn2", "--devices", "cpu"], "--batch-size", "32,64"),
    (["sweep", "mnist-cnn2", "--devices", "cpu"], "--workers", "0,2"),
    (["sweep", "mnist-cnn2", "--devices", "cpu"], "--mode", "seed,tuned"),
    (["sweep", "catdog-deep", "--devices", "cpu"], "--set", "depth=8,16"),
]
# nothing at all, only commas or blanks, an item left out in the middle or at the end
EMPTY = ["", ",", " , ", "{first},,{first}", "{first},"]


def first_item(good: str) -> str:
    return good.split(",")[0]


@pytest.mark.parametrize("bad", EMPTY, ids=["nothing", "comma", "blank", "double-comma", "trailing-comma"])
@pytest.mark.parametrize(("before", "flag", "good"), LISTS, ids=[f"{line[0]} {flag}" for line, flag, _ in LISTS])
def test_a_list_with_an_empty_item_is_a_usage_error(tmp_path, monkeypatch, before, flag, good, bad):
    monkeypatch.chdir(tmp_path)  # a list taken as good would let `report` write report.html here
    value = bad.format(first=first_item(good))
    db = tmp_path / "db.sqlite"
    outcome = CliRunner().invoke(
        app,
        [*before, flag, value, "--db", str(db)] if before[0] not in ("check", "calibrate") else [*before, flag, value],
    )
    text = " ".join(outcome.output.split())
    assert outcome.exit_code == EXIT_USAGE, text
    assert "error:" in text and "bug" not in text and "unexpected" not in text, text
    assert not db.exists()


@pytest.mark.parametrize("twice", ["t4,t4", "t4,T4", "t4, t4 ", "h100-sxm,H100 SXM"])
def test_estimate_on_a_gpu_named_twice_is_a_usage_error(tmp_path, twice):
    outcome = CliRunner().invoke(
        app, ["estimate", "cifar10-mlp", "--on", twice, "--data", "synthetic", "--db", str(tmp_path / "db.sqlite")]
    )
    text = " ".join(outcome.output.split())
    assert outcome.exit_code == EXIT_USAGE, text
    assert "is named twice" in text and "name each GPU once" in text and "bug" not in text
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize("nothing", ["", ",", " , "])
def test_estimate_on_nothing_says_how_to_name_gpus(tmp_path, nothing):
    outcome = CliRunner().invoke(app, ["estimate", "--on", nothing, "--db", str(tmp_path / "db.sqlite")])
    text = " ".join(outcome.output.split())
    assert outcome.exit_code == EXIT_USAGE, text
    assert "No GPU named: write keys separated by commas (e.g. `--on t4,a100-80gb`) or `--on all`" in text
