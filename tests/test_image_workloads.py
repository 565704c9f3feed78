"""The S3 image workflow end to end, as a user drives it: your own image folder for any workload, sweeps over
batch size and workers, saving a model and predicting with exactly its training preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from image_fixtures import BRIGHTNESS, write_brightness_folder, write_image
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench.checkpoint import load_checkpoint, predict, prepare
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.cli.sweep import parse_set_grid
from devicebench.results.store import Store

cli = CliRunner()
SHORT = ["--devices", "cpu", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_brightness_folder(tmp_path_factory.mktemp("images"))


def test_any_image_workload_trains_on_a_folder_converted_to_what_its_model_takes(folder):
    """Colour JPEGs of many sizes become 1x28x28 for an MNIST net; the runs say real data and get a verdict."""
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("mnist-cnn2",),
                devices="cpu",
                data_dir=str(folder),
                epochs=2,
                max_steps=3,
                max_eval_steps=1,
                batch_size=8,
                workers=0,
            )
        )
    )
    [record] = result.runs
    assert record.status == "ok", record.error
    assert record.settings.data_source == "real" and record.settings.workers == 0
    assert record.epochs[-1].samples == 24 and record.epochs[-1].eval_samples == 8
    assert record.input_verdict in ("input-bound", "compute-bound") and "waited for batches" in record.input_diagnosis


def test_a_folder_with_more_classes_than_the_model_fails_that_run_clearly(tmp_path):
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in ("a", "b", "c"):
            write_image(tmp_path / split / name / "0.png", 100, rng)
    result = runner.run(
        planning.plan(RunConfig(workloads=("catdog-original",), devices="cpu", data_dir=str(tmp_path), epochs=1))
    )
    [record] = result.runs
    assert record.status == "failed"
    assert "tells 2 classes apart" in record.error and "has 3" in record.error


def test_a_folder_without_a_test_split_fails_every_run_with_the_expected_layout(tmp_path):
    write_image(tmp_path / "train" / "a" / "0.png", 100, np.random.default_rng(0))
    result = runner.run(
        planning.plan(RunConfig(workloads=("catdog-original",), devices="cpu", data_dir=str(tmp_path), epochs=1))
    )
    assert [record.status for record in result.runs] == ["failed"]
    assert "test" in result.runs[0].error and "DIR/train/<class>" in result.runs[0].error


def test_augmentation_is_switchable_and_decides_the_default_loader(tmp_path):
    """CIFAR-10 CNN: augmenting needs per-image work, so loader workers; without it the fast in-memory path."""
    on, off = (
        runner.run(
            planning.plan(
                RunConfig(
                    workloads=("cifar10-cnn",),
                    devices="cpu",
                    data="synthetic",
                    epochs=1,
                    max_steps=1,
                    max_eval_steps=1,
                    batch_size=4,
                    overrides=overrides,
                )
            )
        )
        for overrides in ((), ("augment=false",))
    )
    assert on.runs[0].settings.hyperparameters["augment"] is True and on.runs[0].settings.workers >= 1
    assert off.runs[0].settings.hyperparameters["augment"] is False and off.runs[0].settings.workers == 0
    assert on.runs[0].status == off.runs[0].status == "ok"


def test_set_depth_below_what_the_deep_net_can_build_is_refused_before_training():
    result = cli.invoke(app, ["run", "catdog-deep", "--set", "depth=2", *SHORT])
    assert result.exit_code == EXIT_USAGE
    assert "depth must be at least 4" in result.output


def test_set_grid_is_every_combination():
    assert parse_set_grid(["depth=8,16", "augment=false"]) == [
        ("depth=8", "augment=false"),
        ("depth=16", "augment=false"),
    ]
    assert parse_set_grid([]) == [()]


def test_sweep_runs_stores_and_tables_every_grid_point(folder, tmp_path):
    out = tmp_path / "sweep.json"
    result = cli.invoke(
        app,
        [
            "sweep",
            "catdog-original",
            "--batch-size",
            "8,16",
            "--workers",
            "0,1",
            "--data-dir",
            str(folder),
            *SHORT,
            "--json",
            str(out),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(out.read_text())["runs"]
    points = [(run["settings"]["batch_size"], run["settings"]["workers"]) for run in runs]
    assert points == [(8, 0), (8, 1), (16, 0), (16, 1)]
    assert all(run["status"] == "ok" and run["input_verdict"] for run in runs)
    with Store(Path(result.output.split("Runs stored in ")[1].split()[0])) as store:
        assert len(store.results()[0].runs) == 4
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]] for line in result.stdout.splitlines() if line.startswith("│")
    ]
    assert [(int(row[0]), int(row[1])) for row in cells] == points  # batch size, workers: a row per point
    assert all(any(cell.endswith("-bound") for cell in row) for row in cells)  # the waiting share and its verdict


def test_sweep_refuses_values_that_are_not_numbers():
    result = cli.invoke(app, ["sweep", "catdog-original", "--batch-size", "32,big", *SHORT])
    assert result.exit_code == EXIT_USAGE and "whole numbers separated by single commas" in " ".join(
        result.output.split()
    )


@pytest.fixture(scope="module")
def saved_model(folder, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "model.pt"
    result = cli.invoke(
        app,
        [
            "run",
            "catdog-original",
            "--devices",
            "cpu",
            "--data-dir",
            str(folder),
            "--epochs",
            "4",
            "--batch-size",
            "8",
            "--workers",
            "0",
            "--set",
            "augment=false",
            "--save",
            str(path),
            "--db",
            str(path.parent / "results.sqlite"),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output  # its own database: a module fixture runs before the autouse ones
    return path


def held_out(tmp_path: Path) -> dict[Path, str]:
    """Eight new images per class, of sizes the model never saw."""
    rng = np.random.default_rng(7)
    return {
        write_image(tmp_path / f"{name}{index}.jpg", brightness, rng, (100 + index, 70)): name
        for name, brightness in BRIGHTNESS.items()
        for index in range(8)
    }


def test_predict_classifies_held_out_images_with_the_training_preprocessing(saved_model, tmp_path):
    images = held_out(tmp_path)
    checkpoint = load_checkpoint(saved_model)
    assert checkpoint.class_names == ("dark", "light") and checkpoint.image_shape == (3, 64, 64)
    predictions = predict(checkpoint, list(images))
    assert [prediction.class_name for prediction in predictions] == list(images.values())
    assert all(prediction.probability > 0.5 for prediction in predictions)


def test_skipping_the_rescale_tilts_every_answer_one_way(saved_model, tmp_path):
    """The S3 tutorial's bug: raw 0-255 pixels into a model trained on [0, 1]."""
    images = held_out(tmp_path)
    checkpoint = load_checkpoint(saved_model)

    def raw_pixels(checkpoint, data, name):
        return prepare(checkpoint, data, name) * 255  # undo the 1/255

    answers = [prediction.class_name for prediction in predict(checkpoint, list(images), inputs=raw_pixels)]
    assert answers != list(images.values())
    assert len(set(answers)) == 1  # every image called the same class


def test_predict_cli_reports_bad_files_and_still_classifies_the_rest(saved_model, tmp_path):
    good = write_image(tmp_path / "ok.png", BRIGHTNESS["light"], np.random.default_rng(1))
    not_an_image = tmp_path / "notes.jpg"
    not_an_image.write_text("hello")
    result = cli.invoke(
        app, ["predict", str(saved_model), str(not_an_image), str(good), str(tmp_path / "missing.png"), "--json"]
    )
    assert result.exit_code == EXIT_FAILED_RUN
    rows = json.loads(result.stdout)
    assert [row["class_name"] for row in rows] == [None, "light", None]
    assert "notes.jpg" in rows[0]["error"] and "missing.png" in rows[2]["error"]
    assert "notes.jpg" in result.stderr


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", None])
def test_predict_refuses_a_file_that_is_not_a_checkpoint(tmp_path, content):
    path = tmp_path / "model.pt"
    if content is None:
        torch.save({"something": torch.zeros(2)}, path)  # a real torch file, but not ours
    else:
        path.write_bytes(content)
    result = cli.invoke(app, ["predict", str(path), str(path)])
    assert result.exit_code == EXIT_USAGE
    assert "checkpoint" in result.output


def test_save_needs_exactly_one_workload(tmp_path):
    result = cli.invoke(app, ["run", "catdog-*", "--save", str(tmp_path / "m.pt"), *SHORT])
    assert result.exit_code == EXIT_USAGE and "one model" in result.output


def test_save_refuses_a_model_of_token_ids_before_training(tmp_path):
    """`predict` classifies image files: a text model's checkpoint could never be used, so --save says so first."""
    path = tmp_path / "m.pt"
    result = cli.invoke(app, ["run", "imdb-bilstm", "--data", "synthetic", "--save", str(path), *SHORT])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "--save keeps image models for `devicebench predict`; imdb-bilstm takes no images" in result.output
    assert "Epoch" not in result.output and not path.exists()


def test_a_run_asked_to_save_a_model_of_token_ids_stays_ok_and_writes_nothing(tmp_path, caplog):
    """Past the command line (runner.run with save_to), the save is refused on its own: the run is kept."""
    path = tmp_path / "m.pt"
    config = RunConfig(
        workloads=("imdb-bilstm",), devices="cpu", data="synthetic", epochs=1, max_steps=2, max_eval_steps=1
    )
    [record] = runner.run(planning.plan(config), save_to=path).runs
    assert record.status == "ok", record.error
    assert not path.exists()
    assert "imdb-bilstm is not an image model" in caplog.text


def test_files_left_out_and_empty_classes_are_shown_before_training(tmp_path):
    rng = np.random.default_rng(0)
    for name, brightness in BRIGHTNESS.items():
        for index in range(2):
            write_image(tmp_path / "train" / name / f"{index}.jpg", brightness, rng)
    write_image(tmp_path / "test" / "dark" / "0.jpg", BRIGHTNESS["dark"], rng)
    (tmp_path / "train" / "dark" / "broken.jpg").write_text("not a picture")
    result = cli.invoke(app, ["run", "catdog-original", "--data-dir", str(tmp_path), "--workers", "0", *SHORT])
    assert result.exit_code == 0, result.output
    assert "left out 1 unreadable image file(s)" in result.stderr and "broken.jpg" in result.stderr
    assert "class 'light' has no readable images in test" in result.stderr
