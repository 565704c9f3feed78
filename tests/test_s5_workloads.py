"""S5 as a user drives it: the text models and the boosted trees through `run`, your own texts, the real IMDB
download path, a missing xgboost, and `reproduce S5`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys

import numpy as np
import pytest
import torch
from rich.console import Console
from test_data_text import MINI_IMDB_REVIEWS, MINI_IMDB_SIZES, mini_imdb, write_texts  # noqa: F401 (a fixture)
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench.cli import EXIT_USAGE, app
from devicebench.data.augmentation import Unchanged
from devicebench.data.download import RemoteFile
from devicebench.data.pipeline import HostBatches, batches_for
from devicebench.data.sources import DATASETS
from devicebench.data.text import TokenDataset
from devicebench.report.reproduction import reproduction_table
from devicebench.reproduce import reproductions
from devicebench.results.compare import compare

cli = CliRunner()
SHORT = ["--devices", "cpu", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "2"]
TINY_TEXT = ("vocab_size=500", "sequence_length=40")


def test_text_models_train_on_your_own_texts(tmp_path):
    folder = write_texts(
        tmp_path,
        {
            **{f"train/bad/{index}.txt": f"awful boring mess number {index}" for index in range(12)},
            **{f"train/good/{index}.txt": f"great fun delight number {index}" for index in range(12)},
            "test/bad/0.txt": "boring awful",
            "test/good/0.txt": "great delight",
        },
    )
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("imdb-transformer", "imdb-bilstm"),
                devices="cpu",
                data_dir=str(folder),
                epochs=2,
                batch_size=8,
                overrides=TINY_TEXT,
            )
        )
    )
    assert [run.status for run in result.runs] == ["ok", "ok"], [run.error for run in result.runs]
    for run in result.runs:
        assert run.settings.data_source == "real" and run.settings.workers == 0
        assert [epoch.samples for epoch in run.epochs] == [24, 24] and run.epochs[0].eval_samples == 2


def test_imdb_downloads_reads_and_trains(mini_imdb, loopback_server, tmp_path, monkeypatch):  # noqa: F811
    """`--data real`: the registry's URL (the loopback server), its checksum, the reader, a run."""
    data = mini_imdb.read_bytes()
    remote = RemoteFile(
        mini_imdb.name, (loopback_server.publish(mini_imdb),), f"sha256:{hashlib.sha256(data).hexdigest()}"
    )
    monkeypatch.setitem(DATASETS, "imdb", dataclasses.replace(DATASETS["imdb"], files=(remote,)))
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("imdb-transformer",),
                devices="cpu",
                data="real",
                data_dir=str(tmp_path / "cache"),
                epochs=1,
                batch_size=2,
                overrides=tuple(f"{key}={value}" for key, value in MINI_IMDB_SIZES.items()),
            )
        )
    )
    [run] = result.runs
    assert run.status == "ok", run.error
    assert run.epochs[0].samples == sum(1 for name in MINI_IMDB_REVIEWS if "/train/" in name)


def test_boosted_trees_run_like_every_other_workload(tmp_path):
    pytest.importorskip("xgboost")
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("gbdt-synthetic",),
                devices="cpu",
                epochs=2,
                threads=1,
                overrides=("rows=2000", "features=8", "rounds_per_epoch=4"),
            )
        )
    )
    [run] = result.runs
    assert run.status == "ok", run.error
    assert run.settings.batch_size == 0 and run.parameter_count is None
    assert [(epoch.steps, epoch.samples) for epoch in run.epochs] == [(4, 1600 * 4), (4, 1600 * 4)]
    assert run.epochs[-1].test_accuracy > 0.6 and run.settings.data_source == "synthetic"
    assert run.input_verdict is None  # no batches to wait for


def test_without_xgboost_the_trees_are_listed_unavailable_skipped_by_the_suite_and_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)  # `import xgboost` now raises ImportError
    listed = cli.invoke(app, ["list", "gbdt-*", "--json"])
    assert [row["unavailable"] for row in json.loads(listed.stdout)] == [
        "needs xgboost: pip install 'devicebench[gbdt-cpu]' (with an NVIDIA GPU: 'devicebench[gbdt]')"
    ] * 2
    named = cli.invoke(app, ["run", "gbdt-synthetic", *SHORT])
    assert named.exit_code == EXIT_USAGE and "pip install 'devicebench[gbdt-cpu]'" in named.output
    assert "gbdt-synthetic" not in [entry.name for entry in RunConfig().selected_workloads()]
    assert [entry.name for entry, _ in RunConfig().skipped()] == ["gbdt-covertype", "gbdt-synthetic"]


def test_a_text_workload_refuses_a_vocabulary_it_cannot_build():
    result = cli.invoke(app, ["run", "imdb-bilstm", "--set", "vocab_size=2", *SHORT])
    assert result.exit_code == EXIT_USAGE and "vocab_size must be at least 3" in result.output


def test_reproduce_s5_sets_both_published_ratios_beside_the_measured_ones():
    pytest.importorskip("xgboost")
    quick = {"devices": "cpu", "epochs": 2, "max_steps": 2, "max_eval_steps": 1, "data": "synthetic", "threads": 1}
    text = runner.run(planning.plan(RunConfig(workloads=("imdb-transformer",), overrides=TINY_TEXT, **quick)))
    trees = runner.run(
        planning.plan(RunConfig(workloads=("gbdt-synthetic",), overrides=("rows=2000", "features=8"), **quick))
    )
    console = Console(width=200, record=True)
    console.print(reproduction_table(reproductions(compare([text, trees]))))
    shown = console.export_text()
    assert "13.76x" in shown and "23.2x" in shown
    assert "imdb-transformer" in shown and "gbdt-synthetic" in shown


def test_token_datasets_feed_the_fast_in_memory_path():
    tokens = np.arange(40, dtype=np.int64).reshape(10, 4) % 7
    dataset = TokenDataset(
        "t",
        "synthetic",
        tokens,
        np.arange(10) % 2,
        tokens[:4],
        np.arange(4) % 2,
        2,
        ("a", "b"),
        ("<pad>", "<unk>", *"cdefg"),
    )
    train, test = batches_for(dataset, None, Unchanged(), 4, torch.device("cpu"), workers=3, seed=0)
    assert isinstance(train, HostBatches) and isinstance(test, HostBatches)
    first, _ = next(iter(test.epoch(0)))
    assert first.dtype == torch.int64 and first.tolist() == tokens[:4].tolist()  # ids unchanged, not scaled
