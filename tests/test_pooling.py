"""Rows never mix software or workload definitions silently: runs under another torch or of a changed model get rows
of their own, runs that recorded no definition pool with a note, old databases and exports still read, and the
definition's fingerprint changes exactly when the definition does."""

from __future__ import annotations

import copy
import dataclasses
import json
import sqlite3
import subprocess
import sys

import pytest
from result_fixtures import machine, run, session
from torch import nn

from devicebench.report.tables import comparison_text
from devicebench.report.text import row_notes
from devicebench.results import migrations
from devicebench.results.compare import compare
from devicebench.results.migrations import APPLICATION_ID
from devicebench.results.store import Store
from devicebench.results.transfer import read_results_file, write_json_export
from devicebench.workloads import definition, get_workload
from devicebench.workloads.definition import definition_fingerprint, describe_definition

LAPTOP = machine("laptop", "aaaa1111")
OLD_TORCH = {**LAPTOP, "torch": "2.11.0"}  # the same machine, before an upgrade of torch


def defined(record, definition):
    record.definition = definition
    return record


# --- rows: split on software and definition -------------------------------------------------------------------


def test_runs_under_two_torch_versions_get_a_row_each_named_by_the_version_and_each_its_own_baseline():
    old = session(OLD_TORCH, [run("cpu", [12, 10, 10]), run("cuda:0", [5, 5, 5])])
    new = session(LAPTOP, [run("cpu", [12, 10, 10]), run("cuda:0", [5, 2, 2])])
    rows = compare([old, new])["mnist-cnn2"]
    assert [(row.device, row.differs_by) for row in rows] == [
        ("cpu", "torch 2.11.0"),
        ("cuda:0", "torch 2.11.0"),
        ("cpu", "torch 2.13.0"),
        ("cuda:0", "torch 2.13.0"),
    ]
    assert [len(row.runs) for row in rows] == [1, 1, 1, 1]  # nothing pooled across the upgrade
    old_gpu, new_gpu = rows[1], rows[3]
    assert old_gpu.baseline is rows[0] and old_gpu.speedup.ratio == pytest.approx(2.0)
    assert new_gpu.baseline is rows[2] and new_gpu.speedup.ratio == pytest.approx(5.0)
    assert all(row.pooling_notes == [] for row in rows)  # each set against its own software's CPU


def test_a_devicebench_or_cudnn_change_splits_a_row_too():
    cudnn = session({**LAPTOP, "cudnn": "9.1.0"}, [run("cpu", [12, 10, 10])])
    newer = dataclasses.replace(session(LAPTOP, [run("cpu", [12, 10, 10])]), devicebench_version="0.2.0")
    rows = compare([session(LAPTOP, [run("cpu", [12, 10, 10])]), cudnn, newer])["mnist-cnn2"]
    assert [row.differs_by for row in rows] == [
        "no cuDNN, devicebench 0.1.0",
        "cuDNN 9.1.0, devicebench 0.1.0",
        "no cuDNN, devicebench 0.2.0",
    ]


def test_a_baseline_only_under_other_software_is_used_and_says_so():
    rows = compare([session(OLD_TORCH, [run("cpu", [12, 10, 10])]), session(LAPTOP, [run("cuda:0", [5, 2, 2])])])
    cpu, gpu = rows["mnist-cnn2"]
    assert gpu.baseline is cpu and gpu.speedup.ratio == pytest.approx(5.0)
    assert gpu.pooling_notes == ["its speedup is against laptop/cpu, under torch 2.11.0 (this row's torch 2.13.0)"]
    assert f"{gpu.label}: {gpu.pooling_notes[0]}" in row_notes([cpu, gpu])


def test_runs_of_two_definitions_get_a_row_each_and_are_never_each_other_s_baseline():
    old = session(LAPTOP, [defined(run("cpu", [12, 10, 10]), "aaaaaaaaaaaa")])
    new = session(
        LAPTOP, [defined(run("cpu", [12, 8, 8]), "bbbbbbbbbbbb"), defined(run("cuda:0", [5, 2, 2]), "bbbbbbbbbbbb")]
    )
    rows = compare([old, new])["mnist-cnn2"]
    assert [(row.device, row.differs_by, len(row.runs)) for row in rows] == [
        ("cpu", "definition aaaaaaaaaaaa", 1),
        ("cpu", "definition bbbbbbbbbbbb", 1),
        ("cuda:0", "", 1),
    ]
    assert rows[2].baseline is rows[1] and rows[2].speedup.ratio == pytest.approx(4.0)
    lonely = compare([old, session(LAPTOP, [defined(run("cuda:0", [5, 2, 2]), "bbbbbbbbbbbb")])])["mnist-cnn2"]
    assert lonely[1].baseline is None and lonely[1].speedup is None  # the old model's CPU is other work


# --- runs that recorded no definition ---------------------------------------------------------------------------


def test_runs_without_a_definition_pool_with_the_recorded_one_and_the_row_says_so_in_every_table():
    old = session(LAPTOP, [run("cpu", [12, 10, 10]), run("cpu", [12, 10, 10], repeat=1)])
    new = session(LAPTOP, [defined(run("cpu", [12, 10, 10]), "cccccccccccc")])
    (row,) = compare([old, new])["mnist-cnn2"]
    assert len(row.runs) == 3 and row.settings["definition"] == "cccccccccccc" and row.differs_by == ""
    note = (
        "pools 2 of its 3 runs whose workload definition was not recorded (stored before devicebench recorded "
        "definitions) with runs of definition cccccccccccc: they may have trained another version of the model"
    )
    assert row.pooling_notes == [note]
    assert f"laptop/cpu: {note}" in row_notes([row])
    assert "whose workload definition was not recorded" in " ".join(comparison_text([old, new]).split())


def test_runs_that_all_lack_a_definition_read_as_before_with_no_note():
    (row,) = compare([session(LAPTOP, [run("cpu", [12, 10, 10]), run("cpu", [12, 10, 10], repeat=1)])])["mnist-cnn2"]
    assert len(row.runs) == 2 and row.settings["definition"] is None and row.pooling_notes == []


def test_runs_without_a_definition_join_the_first_recorded_one_where_two_were():
    runs = [
        defined(run("cpu", [12, 10, 10]), "aaaaaaaaaaaa"),
        run("cpu", [12, 10, 10]),
        defined(run("cpu", [12, 10, 10]), "bbbbbbbbbbbb"),
    ]
    first, second = compare([session(LAPTOP, runs)])["mnist-cnn2"]
    assert [len(first.runs), len(second.runs)] == [2, 1]
    assert first.pooling_notes and not second.pooling_notes


# --- the store and the export files -----------------------------------------------------------------------------


def _previous_schema_file(path) -> None:
    """A results file as schema 11 (the one before definitions) wrote it: one session, one run, two epochs."""
    database = sqlite3.connect(path)
    for migration in migrations.MIGRATIONS[:11]:
        migration(database)
    database.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    database.execute("PRAGMA user_version = 11")
    database.execute("INSERT INTO machines VALUES ('aaaa1111', 'laptop')")
    database.execute(
        "INSERT INTO sessions VALUES ('s1', 'aaaa1111', 'laptop-host', '2026-01-01T00:00:00Z', '0.1.0', 0, ?, '{}')",
        (json.dumps(LAPTOP),),
    )
    settings = dataclasses.asdict(run("cpu", [2.0, 1.0]).settings)
    database.execute(
        "INSERT INTO runs (run_id, result_id, position, workload, seed_experiment, device, device_name, repeat, "
        "started_utc, status, settings_json, tuning_s) VALUES ('r1', 's1', 0, 'mnist-cnn2', 'S1', 'cpu', "
        "'Some CPU', 0, '2026-01-01T00:00:00Z', 'ok', ?, 0.5)",
        (json.dumps(settings),),
    )
    for epoch, seconds in ((1, 2.0), (2, 1.0)):
        database.execute(
            "INSERT INTO epochs (run_id, epoch, phase, steps, samples, train_time_s, samples_per_s, step_time_ms, "
            "train_loss, train_accuracy, eval_samples) VALUES ('r1', ?, ?, 10, 1000, ?, ?, ?, 1.0, 0.5, 50)",
            (epoch, "warmup" if epoch == 1 else "steady", seconds, 1000 / seconds, seconds * 100),
        )
    database.commit()
    database.close()


def test_a_database_of_the_previous_schema_reads_with_the_definition_unknown_and_pools_with_a_note(tmp_path):
    path = tmp_path / "results.sqlite"
    _previous_schema_file(path)
    with Store(path) as store:
        [old] = store.results()
        assert old.runs[0].definition is None and old.runs[0].tuning_s == 0.5
        store.import_result(session(LAPTOP, [defined(run("cpu", [2.0, 1.0]), "dddddddddddd")]))
        results = store.results()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (len(migrations.MIGRATIONS),)
    assert [run.definition for result in results for run in result.runs] == [None, "dddddddddddd"]
    (row,) = compare(results)["mnist-cnn2"]
    assert len(row.runs) == 2 and row.pooling_notes[0].startswith("pools 1 of its 2 runs")


def test_a_database_of_schema_12_forgets_its_definitions_that_hashed_the_weights_torch_drew(tmp_path):
    path = tmp_path / "results.sqlite"
    _previous_schema_file(path)
    database = sqlite3.connect(path)
    migrations.MIGRATIONS[11](database)  # to schema 12, with a definition of the first kind recorded
    database.execute("UPDATE runs SET definition = 'ffffffffffff'")
    database.execute("PRAGMA user_version = 12")
    database.commit()
    database.close()
    with Store(path) as store:
        [old] = store.results()
    assert old.runs[0].definition is None  # pools with a recorded one, with a note (the test above)


def test_the_definition_goes_through_an_export_and_an_export_from_before_still_imports(tmp_path):
    path = tmp_path / "export.json"
    write_json_export(path, [session(LAPTOP, [defined(run("cpu", [2.0, 1.0]), "eeeeeeeeeeee")])])
    document = json.loads(path.read_text())
    assert document["results"][0]["runs"][0]["definition"] == "eeeeeeeeeeee"
    assert read_results_file(path)[0].runs[0].definition == "eeeeeeeeeeee"
    document["schema_version"] = document["results"][0]["schema_version"] = 4  # the first definitions: forgotten
    path.write_text(json.dumps(document))
    assert read_results_file(path)[0].runs[0].definition is None
    del document["results"][0]["runs"][0]["definition"]  # as devicebench wrote exports before schema 4
    document["schema_version"] = document["results"][0]["schema_version"] = 3
    path.write_text(json.dumps(document))
    assert read_results_file(path)[0].runs[0].definition is None


# --- the fingerprint --------------------------------------------------------------------------------------------

BASE = get_workload("catdog-original")


def test_the_fingerprint_is_the_same_for_two_builds_of_an_unchanged_definition():
    twin = copy.copy(BASE)  # another Workload object: built and hashed again, not taken from the cache
    assert twin is not BASE
    assert definition_fingerprint(twin) == definition_fingerprint(BASE) is not None
    assert len(definition_fingerprint(BASE)) == 12


@pytest.mark.slow
def test_the_fingerprint_is_the_same_in_another_process():
    code = "from devicebench.workloads import get_workload as g; from devicebench.workloads.definition import "
    code += "definition_fingerprint as f; print(f(g('catdog-original')))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == definition_fingerprint(BASE)


@pytest.mark.parametrize("name", ["mnist-cnn2", "cifar10-cnn", "imdb-transformer", "catdog-deep"])
def test_the_fingerprint_reads_how_a_model_is_initialised_not_the_numbers_drawn(name, monkeypatch):
    """torch 2.11 and 2.13 draw different initial weights for one seed, and word LayerNorm's extra_repr apart
    (2.13 adds `bias=True`): the fingerprints of these four differed between the two (benchmarks/definitions.py
    on an H200 and here), so runs of one model under the two could not be set against each other. Other draws
    and other wording leave it as it is."""
    workload = get_workload(name)
    before = describe_definition(workload)
    monkeypatch.setattr(definition, "DEFINITION_SEED", 1)  # other numbers drawn, as another torch draws them
    monkeypatch.setattr(nn.LayerNorm, "extra_repr", lambda self: "reworded, bias=True")
    assert describe_definition(workload) == before
    summarised = [tensor for module in before["model"] for tensor in module[3] if len(tensor) > 3]
    assert before["initialisation"] and not summarised  # every tensor's start is read from how it was made


def _reinitialised(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.weight.data.mul_(2)  # twice the seed's initial spread: only the initialisation changes
    return model


def _deeper(hyperparameters):
    return nn.Sequential(*BASE.build_model(hyperparameters).children(), nn.ReLU())  # one more module at the end


CHANGES = {
    "initialisation": {"build_model": lambda hyperparameters: _reinitialised(BASE.build_model(hyperparameters))},
    "structure": {"build_model": _deeper},
    "preprocessing": {"build_preprocessing": lambda hyperparameters: _halved(BASE, hyperparameters)},
    "loss": {"build_loss": lambda: nn.CrossEntropyLoss(label_smoothing=0.1)},
    "hyperparameters": {"defaults": {**BASE.defaults, "learning_rate": 0.5}},
}


class _Halved:
    """The seed's preprocessing with its output halved: a changed normalisation that no field shows."""

    def __init__(self, inner):
        self.inner = inner

    def train(self, images, generator):
        return self.inner.train(images, generator) / 2

    def test(self, images):
        return self.inner.test(images) / 2


def _halved(workload, hyperparameters):
    return _Halved(workload.build_preprocessing(hyperparameters))


@pytest.mark.parametrize("change", CHANGES)
def test_the_fingerprint_changes_when_the_definition_does(change, monkeypatch):
    if change == "preprocessing":  # both described alike, as the seed's kind and fields: only what they make differs
        monkeypatch.setattr(
            "devicebench.workloads.definition.describe", lambda found: repr(getattr(found, "inner", found))
        )
    changed = dataclasses.replace(BASE, **CHANGES[change])
    unchanged = copy.copy(BASE)  # fingerprinted afresh, under the same patches
    before, after = describe_definition(unchanged), describe_definition(changed)
    differing = {part for part in before if before[part] != after[part]}
    expected = {"structure": {"model"}, "hyperparameters": {change, "optimizer"}}
    assert differing == expected.get(change, {change})  # a learning rate is the optimizer's too
    assert definition_fingerprint(changed) != definition_fingerprint(unchanged)


def test_the_scaling_chart_draws_each_torch_version_as_a_series_of_its_own():
    from devicebench.report.workload_plots import scaling_series

    def processes(record, count):
        record.settings.world_size = count
        return record

    old = session(OLD_TORCH, [run("cpu", [2.0, 1.0, 1.0]), processes(run("cpu", [2.0, 0.5, 0.5]), 2)])
    new = session(LAPTOP, [run("cpu", [2.0, 0.5, 0.5]), processes(run("cpu", [2.0, 0.4, 0.4]), 2)])
    assert scaling_series(compare([old, new])["mnist-cnn2"]) == {
        "laptop/cpu (torch 2.11.0)": [(1, 1000.0), (2, 2000.0)],
        "laptop/cpu (torch 2.13.0)": [(1, 2000.0), (2, 2500.0)],
    }
