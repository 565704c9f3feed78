"""Hostile models and inputs: nothing read from a file (or given with --set) is trusted. A model's size is bounded
before anything is built, every checkpoint field is checked, an image file is read only if regular and small, a
truncated image is left out like any unreadable one, a cached dataset that is a device is refused, and a save
that fails on a full disk fails on its own while the run stays ok.

    python -m pytest tests/test_hostile_models.py -q
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from image_fixtures import BRIGHTNESS, write_brightness_folder, write_image
from PIL import Image, ImageFile
from typer.testing import CliRunner

import devicebench.data.download as download
import devicebench.workloads.catdog as catdog
from devicebench.checkpoint import MAX_IMAGE_BYTES
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.data import DataFormatError
from devicebench.data.download import DataUnavailable, RemoteFile, fetch
from devicebench.data.images import decode_image, read_image_folder

cli = CliRunner()


def unwrapped(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def digit(tmp_path_factory) -> Path:
    return write_image(
        tmp_path_factory.mktemp("digit") / "digit.png", BRIGHTNESS["light"], np.random.default_rng(0), (28, 28)
    )


def edited_checkpoint(checkpoint: Path, out: Path, **changes: object) -> Path:
    payload = torch.load(checkpoint, weights_only=True)
    payload.update(changes)
    torch.save(payload, out)
    return out


@pytest.fixture
def no_deep_model_is_built(monkeypatch):
    """catdog-deep's network, made to fail the test if it is ever built deeper than its bound (on any device)."""
    real = catdog.DeepCNN

    def guarded(depth: int, *arguments, **keywords):
        assert depth <= catdog.MAX_DEEP_DEPTH, f"DeepCNN built with depth={depth}: the bound was not checked first"
        return real(depth, *arguments, **keywords)

    monkeypatch.setattr(catdog, "DeepCNN", guarded)


# --- 1. model size, bounded before anything is built --------------------------------------------------------------


def test_run_set_depth_past_its_bound_is_refused_before_any_model_is_built(no_deep_model_is_built, tmp_path):
    outcome = cli.invoke(
        app,
        [
            "run",
            "catdog-deep",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--set",
            "depth=100000000",
            "--db",
            str(tmp_path / "r.sqlite"),
        ],
    )
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    message = unwrapped(outcome.stderr)
    assert "depth=100000000 is above its bound of 256" in message
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit)
    assert "Traceback" not in outcome.output


def test_a_checkpoint_naming_a_huge_model_is_refused_before_it_is_built(
    checkpoint, digit, tmp_path, no_deep_model_is_built
):
    hyperparameters = {**catdog.TRAINING, "depth": 100_000_000}
    path = edited_checkpoint(
        checkpoint,
        tmp_path / "deep.pt",
        workload="catdog-deep",
        image_shape=[3, 64, 64],
        output="binary_logit",
        hyperparameters=hyperparameters,
        state_dict={},
    )
    assert path.stat().st_size < 10_000  # a few kB naming a model of billions of parameters
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "depth=100000000 is above its bound of 256" in unwrapped(outcome.stderr)
    assert "Traceback" not in outcome.output


# --- 2. every checkpoint field checked --------------------------------------------------------------------------


def _with_nan(checkpoint: Path) -> dict:
    weights = torch.load(checkpoint, weights_only=True)["state_dict"]
    name = next(name for name, tensor in weights.items() if tensor.is_floating_point())
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = float("nan")
    return {"state_dict": weights}


def _with_a_list(checkpoint: Path) -> dict:
    weights = torch.load(checkpoint, weights_only=True)["state_dict"]
    name = next(iter(weights))
    return {"state_dict": {**weights, name: weights[name].tolist()}}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (lambda checkpoint: {"output": "values"}, "output 'values', but mnist-cnn2's output is 'logits'"),
        (lambda checkpoint: {"output": "os.system"}, "output 'os.system'"),
        (
            lambda checkpoint: {"hyperparameters": {"learning_rate": "fast"}},
            "hyperparameters: learning_rate is str 'fast'",
        ),
        (
            lambda checkpoint: {"hyperparameters": {"rm -rf": 1}},
            "hyperparameters: mnist-cnn2 has no parameter 'rm -rf'",
        ),
        (lambda checkpoint: {"class_names": [{"a": 1}] * 10}, "class_names holds dict"),
        (_with_nan, "holds NaN or infinite values"),
        (_with_a_list, "is list, not a tensor"),
    ],
    ids=[
        "output-of-another-kind",
        "output-unknown",
        "hyperparameter-type",
        "hyperparameter-unknown",
        "class-name-not-text",
        "nan-weights",
        "weights-not-a-tensor",
    ],
)
def test_every_checkpoint_field_is_checked_and_named(checkpoint, digit, tmp_path, changes, message):
    path = edited_checkpoint(checkpoint, tmp_path / "model.pt", **changes(checkpoint))
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    shown = unwrapped(outcome.stderr)
    assert message in shown and "save the model again" in shown
    assert "Traceback" not in outcome.output


# --- 3. bytes read from an image file, capped ---------------------------------------------------------------------


def test_predict_refuses_a_device_and_an_oversized_file_without_reading_them(checkpoint, digit, tmp_path, monkeypatch):
    huge = tmp_path / "huge.png"
    with open(huge, "wb") as file:  # sparse: no disk used
        file.truncate(MAX_IMAGE_BYTES + 1)
    real_read_bytes = Path.read_bytes

    def bounded_read_bytes(self: Path) -> bytes:
        assert os.stat(self).st_size <= MAX_IMAGE_BYTES and self != Path("/dev/zero"), f"{self} read whole"
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", bounded_read_bytes)
    outcome = cli.invoke(app, ["predict", str(checkpoint), "/dev/zero", str(huge), str(digit)])
    assert outcome.exit_code == EXIT_FAILED_RUN, outcome.output
    shown = unwrapped(outcome.stderr)
    assert "image /dev/zero is a character device, not a regular file" in shown
    assert f"{huge}: larger than 64 MiB, the most devicebench reads from one image" in shown
    assert "digit.png" in unwrapped(outcome.stdout)  # the good one is still classified
    assert "Traceback" not in outcome.output


# --- 4. truncated images, left out and counted ----------------------------------------------------------------


def _truncated(kind: str) -> bytes:
    noise = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, kind)  # noise compresses badly: half the file holds all its headers
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


@pytest.mark.parametrize("load_truncated", [False, True], ids=["pillow-default", "load-truncated-images-on"])
def test_truncated_images_are_left_out_and_counted_like_unreadable_ones(tmp_path, monkeypatch, load_truncated):
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", load_truncated)  # as another library may set it
    write_brightness_folder(tmp_path, train_per_class=3, test_per_class=2)
    truncated = [tmp_path / "train/dark/cut.png", tmp_path / "train/light/cut.jpg"]
    truncated[0].write_bytes(_truncated("PNG"))
    truncated[1].write_bytes(_truncated("JPEG"))
    dataset = read_image_folder(tmp_path)
    assert sorted(dataset.skipped) == sorted(str(path) for path in truncated)
    assert len(dataset.train) == 6
    assert any("left out 2 unreadable image file(s)" in note for note in dataset.notes)
    with pytest.raises(DataFormatError, match="not a readable image"):  # and never decoded as grey garbage
        decode_image(_truncated("PNG"), channels=3, size=(8, 8), name="cut.png")
    assert ImageFile.LOAD_TRUNCATED_IMAGES is load_truncated  # left as it was found


def test_a_training_run_on_a_folder_with_truncated_images_trains_on_the_rest(tmp_path):
    write_brightness_folder(tmp_path / "data", train_per_class=4, test_per_class=2)
    (tmp_path / "data/train/dark/cut.jpg").write_bytes(_truncated("JPEG"))
    (tmp_path / "data/train/light/cut.png").write_bytes(_truncated("PNG"))
    outcome = cli.invoke(
        app,
        [
            "run",
            "catdog-original",
            "--devices",
            "cpu",
            "--data-dir",
            str(tmp_path / "data"),
            "--epochs",
            "1",
            "--max-steps",
            "2",
            "--max-eval-steps",
            "1",
            "--workers",
            "2",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--json",
            str(tmp_path / "out.json"),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    assert "Traceback" not in outcome.output
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok"


# --- 5. a cached dataset that is a device -------------------------------------------------------------------------


class _BoundedHasher:
    """A hasher that fails the test past 64 MiB: hashing a link to /dev/zero must never get that far."""

    def __init__(self, real) -> None:
        self.real, self.seen = real, 0

    def update(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        assert self.seen <= 64 * 2**20, "hashed a device as if it were the cached file"
        self.real.update(chunk)

    def hexdigest(self) -> str:
        return self.real.hexdigest()


def test_a_cached_file_linked_to_a_device_is_refused_not_hashed_forever(tmp_path, monkeypatch):
    monkeypatch.setattr(download.hashlib, "new", lambda *a, **k: _BoundedHasher(hashlib.new(*a, **k)))
    (tmp_path / "payload.bin").symlink_to("/dev/zero")
    remote = RemoteFile("payload.bin", urls=("http://127.0.0.1:9/payload.bin",), checksum="sha256:" + "0" * 64)
    with pytest.raises(DataUnavailable) as raised:
        fetch(remote, tmp_path, progress=False, timeout_s=1)
    message = str(raised.value)
    assert "is a character device, not a regular file" in message and "payload.bin" in message
    assert (tmp_path / "payload.bin").is_symlink()  # refused, never deleted or followed into a write


# --- 6. --save to a full disk -------------------------------------------------------------------------------------


def test_save_to_a_full_disk_fails_on_its_own_and_the_run_stays_ok(tmp_path, caplog):
    target = tmp_path / "model.pt"
    (tmp_path / "model.pt.partial").symlink_to("/dev/full")  # where the save writes first: a disk that is full
    outcome = cli.invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--max-eval-steps",
            "1",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--json",
            str(tmp_path / "out.json"),
            "--save",
            str(target),
            "--quiet",
        ],
    )
    run = json.loads((tmp_path / "out.json").read_text())["runs"][0]
    assert run["status"] == "ok", run.get("error")
    assert outcome.exit_code == EXIT_FAILED_RUN  # the save's own failure; the run itself is not failed
    shown = unwrapped(outcome.stderr + caplog.text)  # logged: on stderr when nothing else handles the log (pytest does)
    assert f"could not save the model to {target}: no space left on device" in shown
    assert "inline_container" not in outcome.output and "Traceback" not in outcome.output
    assert "Model saved" not in shown
    assert not target.exists() and list(tmp_path.glob("*.partial")) == []
