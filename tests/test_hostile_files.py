"""Hostile files against devicebench, as SECURITY.md lists them: archives whose members reach outside the data
folder, checkpoints that would run code, image decompression bombs, imported results carrying HTML or rich markup,
and a run that opens no socket. Each test here backs a statement of SECURITY.md.

    python -m pytest tests/test_hostile_files.py -q
"""

from __future__ import annotations

import gzip
import hashlib
import html
import io
import pickle
import socket
import struct
import tarfile
import zlib
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from image_fixtures import BRIGHTNESS, write_brightness_folder, write_image
from PIL import Image
from typer.testing import CliRunner

import devicebench
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.data import DataFormatError
from devicebench.data.download import DataUnavailable, RemoteFile, fetch
from devicebench.data.formats import (
    CIFAR10_BINARY,
    CIFAR_MAX_MEMBER_RECORDS,
    read_cifar_binary,
    read_release,
)
from devicebench.data.images import decode_image, read_image_folder
from devicebench.data.imdb import read_imdb
from devicebench.results.schema import Result
from devicebench.workloads import get_workload

cli = CliRunner()
PILLOW_DEFAULT_MAX_PIXELS = int(1024 * 1024 * 1024 // 4 // 3)  # Image.MAX_IMAGE_PIXELS as Pillow ships it


def unwrapped(text: str) -> str:
    """`text` with rich's line wrapping undone: every run of whitespace becomes one space."""
    return " ".join(text.split())


def files_under(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


# --- tar archives: the IMDB archive is extracted, CIFAR's is read in memory ----------------------------------------

IMDB_REVIEWS = {
    "aclImdb/train/neg/1_2.txt": b"A dull film.",
    "aclImdb/train/pos/2_9.txt": b"A great film.",
    "aclImdb/test/neg/3_1.txt": b"Dull.",
    "aclImdb/test/pos/4_8.txt": b"Great.",
}
IMDB_SIZES = {"vocab_size": 20, "sequence_length": 4}
CIFAR_MEMBERS = {name: bytes([1]) + bytes(3072) for name in CIFAR10_BINARY.train_members + CIFAR10_BINARY.test_members}


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, content: bytes = b"", link: str = "") -> tuple:
    """(TarInfo, file object or None) of one member of any kind: tarfile writes what it is told, as an attacker's
    tool would."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    if kind == tarfile.REGTYPE:
        info.size = len(content)
        return info, io.BytesIO(content)
    return info, None


def write_archive(path: Path, files: dict[str, bytes], hostile: tuple) -> Path:
    """A .tar.gz of `files`, with the `hostile` member in place of the file of its name (or after them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for name, content in files.items():
            if name != hostile[0].name:
                archive.addfile(*tar_member(name, content=content))
        archive.addfile(*hostile)
    return path


def extract_imdb(archive: Path) -> None:
    read_imdb(archive, **IMDB_SIZES)


def read_cifar(archive: Path) -> None:
    read_cifar_binary(archive, CIFAR10_BINARY)


READERS = {  # how each archive is opened: (reader, its archive's name, its files, a member name the reader wants)
    "imdb-extraction": (extract_imdb, "aclImdb_v1.tar.gz", IMDB_REVIEWS, "aclImdb/train/neg/1_2.txt"),
    "cifar-read": (read_cifar, CIFAR10_BINARY.archive_name, CIFAR_MEMBERS, "cifar-10-batches-bin/data_batch_1.bin"),
}
# Each way a member can reach outside the folder, as (member name or None for the wanted one, kind, link target);
# the data folder is tmp/data/, so "../../escape.txt" from a member three folders deep lands in tmp/.
UNSAFE_MEMBERS = {
    "dot-dot-name": ("../escape.txt", tarfile.REGTYPE, ""),
    "symlink-outside": (None, tarfile.SYMTYPE, "../../../../escape.txt"),
    "symlink-absolute": (None, tarfile.SYMTYPE, "/etc/passwd"),
    "hard-link-outside": (None, tarfile.LNKTYPE, "../escape.txt"),
    "hard-link-absolute": (None, tarfile.LNKTYPE, "/etc/passwd"),
    "character-device": (None, tarfile.CHRTYPE, ""),
    "block-device": (None, tarfile.BLKTYPE, ""),
    "fifo": (None, tarfile.FIFOTYPE, ""),
}


@pytest.mark.parametrize("reader_name", READERS)
@pytest.mark.parametrize("unsafe", UNSAFE_MEMBERS)
def test_an_unsafe_tar_member_is_refused_by_name_and_nothing_lands_outside(tmp_path, reader_name, unsafe):
    reader, archive_name, files, wanted = READERS[reader_name]
    name, kind, link = UNSAFE_MEMBERS[unsafe]
    member_name = name or wanted
    archive = write_archive(tmp_path / "data" / archive_name, files, tar_member(member_name, kind, b"outside", link))
    before = files_under(tmp_path)
    with pytest.raises(DataFormatError) as raised:
        reader(archive)
    message = str(raised.value)
    assert message.startswith(f"{archive}: ") and repr(member_name) in message  # the archive and the member
    assert "delete it and devicebench downloads a verified copy" in message  # and what to do
    created = files_under(tmp_path) - before
    assert all(tmp_path / "data" in path.parents for path in created), created
    assert not (tmp_path / "escape.txt").exists()
    assert not any(path.is_symlink() or (path.is_file() and path.stat().st_nlink > 1) for path in created)
    assert not (tmp_path / "data" / "aclImdb" / ".devicebench-extracted").exists()  # extraction is tried again


def test_an_absolute_member_name_never_lands_at_that_path(tmp_path):
    """tarfile's data filter makes IMDB's member relative (it lands inside the folder, and is no review, so is
    skipped); CIFAR reading refuses it outright."""
    outside = tmp_path / "outside" / "escape.txt"
    imdb_archive = write_archive(
        tmp_path / "imdb" / "aclImdb_v1.tar.gz", IMDB_REVIEWS, tar_member(str(outside), content=b"outside")
    )
    imdb = read_imdb(imdb_archive, **IMDB_SIZES)
    assert len(imdb.train_labels) == 2 and len(imdb.test_labels) == 2  # the reviews, and nothing else
    cifar = write_archive(
        tmp_path / "cifar" / CIFAR10_BINARY.archive_name, CIFAR_MEMBERS, tar_member(str(outside), content=b"outside")
    )
    with pytest.raises(DataFormatError, match=f"member '{outside}' points outside the archive"):
        read_cifar(cifar)
    assert not outside.exists() and not outside.parent.exists()


def test_reading_cifar_extracts_nothing_and_writes_nothing(tiny_cifar10, monkeypatch):
    def never(*arguments, **keywords):
        raise AssertionError("reading CIFAR must not extract members to disk")

    for method in ("extract", "extractall", "makefile", "makelink"):
        monkeypatch.setattr(tarfile.TarFile, method, never)
    before = {path: path.stat().st_mtime_ns for path in tiny_cifar10.folder.rglob("*")}
    splits = read_cifar_binary(tiny_cifar10.folder / CIFAR10_BINARY.archive_name, CIFAR10_BINARY)
    assert (splits.train_images == tiny_cifar10.expected.train_images).all()
    assert {path: path.stat().st_mtime_ns for path in tiny_cifar10.folder.rglob("*")} == before


def test_a_cifar_member_declaring_a_huge_size_is_refused_before_it_is_read(tmp_path):
    """A gzip bomb: the member's header claims more than the largest real member; the reader refuses it at the
    header instead of reading it into memory (the archive holds only the header, so reading would fail anyway)."""
    info = tarfile.TarInfo(CIFAR10_BINARY.train_members[0])
    info.size = (CIFAR_MAX_MEMBER_RECORDS + 1) * CIFAR10_BINARY.record_bytes
    archive = tmp_path / CIFAR10_BINARY.archive_name
    archive.write_bytes(gzip.compress(info.tobuf(tarfile.GNU_FORMAT) + bytes(tarfile.BLOCKSIZE)))
    with pytest.raises(DataFormatError, match=rf"'{info.name}' declares 153,653,073 bytes, more than 50,000 records"):
        read_cifar(archive)


def test_cifar_is_read_from_its_binary_release_without_unpickling(tiny_cifar10, monkeypatch):
    def never(*arguments, **keywords):
        raise AssertionError("nothing from the network may be unpickled")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, never)
    splits = read_release("cifar10", tiny_cifar10.folder)
    assert (splits.test_images == tiny_cifar10.expected.test_images).all()
    assert (splits.test_labels == tiny_cifar10.expected.test_labels).all()


# --- results from other machines: HTML report, notebook view, terminal tables ----------------------------------------

HTML_PAYLOADS = ("<script>alert('{field}')</script>", "\"><img src=x onerror=alert('{field}')>")


class Page(HTMLParser):
    """Every tag with its attributes, and the text a reader sees (entities decoded)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text = ""
        self.feed(page)

    def handle_starttag(self, tag: str, attributes: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attributes)))

    def handle_data(self, data: str) -> None:
        self.text += data


def hostile_results(make_result, make_run, payload: str) -> tuple[Result, dict[str, str]]:
    """A session whose every string a person reads carries `payload`, filled in with the field's name."""
    fields = {
        field: payload.format(field=field)
        for field in ("workload", "hostname", "machine_name", "device", "device_name", "error", "monitor_note")
    }
    runs = [
        make_run(fields["workload"], "cpu", device_name=fields["device_name"], monitor_note=fields["monitor_note"]),
        make_run(fields["workload"], fields["device"], status="failed", error=fields["error"]),
    ]
    return make_result(fields["machine_name"], runs, hostname=fields["hostname"]), fields


@pytest.mark.parametrize("payload", HTML_PAYLOADS)
def test_the_report_of_imported_results_shows_html_as_text(tmp_path, make_result, make_run, payload):
    """Extends tests/test_report.py::test_everything_from_other_machines_is_escaped (hostname, workload, error)
    to machine and device names, devices and notes, through `import` and `report` as a user runs them."""
    result, fields = hostile_results(make_result, make_run, payload)
    result.write_json(tmp_path / "from-elsewhere.json")
    assert cli.invoke(app, ["import", str(tmp_path / "from-elsewhere.json")]).exit_code == 0
    outcome = cli.invoke(app, ["report", "--out", str(tmp_path / "report.html")])
    assert outcome.exit_code == 0, outcome.output
    page_source = (tmp_path / "report.html").read_text()
    page = Page(page_source)
    for field, value in fields.items():
        assert value not in page_source, f"{field} is in the page as markup"
        assert value in page.text, f"{field} is not shown as text"
    assert not [tag for tag, _ in page.tags if tag == "script"]
    assert not [attributes for _, attributes in page.tags if "onerror" in attributes]


@pytest.mark.parametrize("payload", HTML_PAYLOADS)
def test_a_result_in_a_notebook_shows_html_as_text(make_result, make_run, payload):
    result, fields = hostile_results(make_result, make_run, payload)
    page_source = devicebench.Result.of(result)._repr_html_()
    page = Page(page_source)
    del fields["hostname"]  # the notebook tables name machines, not hosts
    for field, value in fields.items():
        assert value not in page_source and html.escape(value) in page_source, field
    assert not [tag for tag, _ in page.tags if tag in ("script", "img")]


RICH_MARKUP = ("[bold red]x[/]", "[link=https://example.invalid]click[/link]")


@pytest.mark.parametrize("markup", RICH_MARKUP)
def test_rich_markup_from_one_machine_is_printed_literally(tmp_path, make_result, make_run, markup):
    """`compare` of one machine's imported runs, and Result.table(): the workload's title, the device names and the
    notes show the markup as typed."""
    run = make_run(markup, "cpu", device_name=f"cpu {markup}", error=f"error {markup}", status="failed")
    result = make_result("laptop", [run, make_run(markup, "cuda:0")])
    result.write_json(tmp_path / "from-elsewhere.json")
    assert cli.invoke(app, ["import", str(tmp_path / "from-elsewhere.json")]).exit_code == 0
    outcome = cli.invoke(app, ["compare"])
    assert outcome.exit_code == 0, outcome.output
    for shown in (unwrapped(outcome.stdout), unwrapped(devicebench.Result.of(result).table())):
        assert f"{markup}: batch 50" in shown  # the title
        assert f"laptop/cpu: cpu {markup}" in shown  # the device line
        assert f"repeat 1: failed: error {markup}" in shown  # the note


def test_rich_markup_in_a_machine_name_is_printed_literally_when_machines_are_compared(tmp_path, make_result, make_run):
    for index, name in enumerate(("[bold red]x[/]", "other")):
        make_result(name, [make_run(), make_run(device="cuda:0")]).write_json(tmp_path / f"{index}.json")
        assert cli.invoke(app, ["import", str(tmp_path / f"{index}.json")]).exit_code == 0
    outcome = cli.invoke(app, ["compare"])
    assert outcome.exit_code == 0
    assert "│ [bold red]x[/]/cpu" in outcome.stdout  # the row label, as typed


def test_a_stray_closing_tag_in_a_machine_name_does_not_break_history(tmp_path, make_result, make_run):
    make_result("[/bold]", [make_run()]).write_json(tmp_path / "from-elsewhere.json")
    assert cli.invoke(app, ["import", str(tmp_path / "from-elsewhere.json")]).exit_code == 0
    outcome = cli.invoke(app, ["history"])
    assert outcome.exit_code == 0 and "[/bold]" in outcome.stdout


def test_terminal_escape_sequences_in_a_machine_name_never_reach_the_terminal(tmp_path, make_result, make_run):
    make_result("laptop\x1b]8;;https://example.invalid\x1b\\", [make_run()]).write_json(tmp_path / "elsewhere.json")
    assert cli.invoke(app, ["import", str(tmp_path / "elsewhere.json")]).exit_code == 0
    outcome = cli.invoke(app, ["compare"])  # without colour: rich itself writes no escape sequence
    assert outcome.exit_code == 0 and "\x1b" not in outcome.stdout


def test_a_workload_name_holding_mathtext_does_not_stop_the_report(tmp_path, make_result, make_run):
    name = "$\\frac$"
    make_result("laptop", [make_run(name), make_run(name, "cuda:0")]).write_json(tmp_path / "elsewhere.json")
    assert cli.invoke(app, ["import", str(tmp_path / "elsewhere.json")]).exit_code == 0
    outcome = cli.invoke(app, ["report", "--out", str(tmp_path / "report.html")])
    assert outcome.exit_code == 0 and name in Page((tmp_path / "report.html").read_text()).text


# --- checkpoints ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digit(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    return write_image(tmp_path_factory.mktemp("digit") / "digit.png", BRIGHTNESS["light"], rng, (28, 28))


class WritesAMarker:
    """Unpickling this calls open(marker, "w"): code from the file, run by loading it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable, tuple[str, str]]:
        return open, (str(self.marker), "w")


def edited_checkpoint(checkpoint: Path, out: Path, **changes: object) -> Path:
    payload = torch.load(checkpoint, weights_only=True)
    payload.update(changes)
    for key in [key for key, value in changes.items() if value is None]:
        del payload[key]
    torch.save(payload, out)
    return out


@pytest.mark.parametrize("as_plain_pickle", [False, True], ids=["torch-save", "plain-pickle"])
def test_a_checkpoint_carrying_code_is_refused_and_the_code_never_runs(checkpoint, digit, tmp_path, as_plain_pickle):
    marker = tmp_path / "the-code-ran"
    path = tmp_path / "model.pt"
    if as_plain_pickle:  # the pre-1.6 torch.save format: a bare pickle
        path.write_bytes(pickle.dumps({"format": "devicebench-checkpoint", "trap": WritesAMarker(marker)}, protocol=2))
    else:
        edited_checkpoint(checkpoint, path, trap=WritesAMarker(marker))
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE
    message = unwrapped(outcome.stderr)
    assert f"{path}: refused: PyTorch's safe loader (weights_only), which never runs code from the file" in message
    assert "save the model again with `devicebench run WORKLOAD --save FILE`" in message
    assert (
        "stopped at 'Unsupported global: GLOBAL io.open was not an allowed global by default'" in message
        or as_plain_pickle
    )  # a bare pickle is refused earlier, at its first opcode
    assert "weights_only` set to `False`" not in message  # PyTorch's advice to load it unsafely is left out
    assert not marker.exists()


def test_a_truncated_checkpoint_is_a_clear_error(checkpoint, digit, tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE
    assert f"{path}: damaged, or not a PyTorch checkpoint (" in unwrapped(outcome.stderr)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"state_dict": None}, "missing or malformed state_dict (want dict)"),
        ({"class_names": "cat"}, "missing or malformed class_names (want list)"),
        (
            {"image_shape": [1, 100_000, 100_000]},
            "images of shape (1, 100000, 100000), but mnist-cnn2 takes (1, 28, 28)",
        ),
        ({"preprocessing": {"kind": "os.system"}}, "unknown preprocessing 'os.system'"),
        ({"state_dict": {"layer.weight": torch.zeros(1)}}, "its settings or weights do not fit mnist-cnn2"),
    ],
    ids=["missing-weights", "class-names-not-a-list", "huge-image-shape", "unknown-preprocessing", "wrong-weights"],
)
def test_a_checkpoint_with_missing_or_made_up_fields_is_a_clear_error(checkpoint, digit, tmp_path, changes, message):
    path = edited_checkpoint(checkpoint, tmp_path / "model.pt", **changes)
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE
    assert message in unwrapped(outcome.stderr) and "save the model again" in unwrapped(outcome.stderr)


def test_what_a_checkpoint_says_of_its_training_is_printed_literally(checkpoint, digit, tmp_path):
    names = [f"[bold]{index}[/]" for index in range(10)]
    trained = {**torch.load(checkpoint, weights_only=True)["trained"], "device": "[link=https://example.invalid]x"}
    path = edited_checkpoint(checkpoint, tmp_path / "model.pt", class_names=names, trained=trained)
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == 0, outcome.output
    shown = unwrapped(outcome.stdout)
    assert "trained on [link=https://example.invalid]x, 1 epochs" in shown
    assert any(f"│ {name} │" in shown for name in names)  # the predicted class, as the file names it


def test_terminal_escapes_in_a_checkpoint_never_reach_the_terminal(checkpoint, digit, tmp_path):
    link = "\x1b]8;;https://example.invalid\x1b\\x\x1b]8;;\x1b\\"  # an ESC ]8 hyperlink around "x"
    names = [f"{index}\x1b[2J" for index in range(10)]  # each with a clear-the-screen
    trained = {**torch.load(checkpoint, weights_only=True)["trained"], "device": link}
    path = edited_checkpoint(checkpoint, tmp_path / "model.pt", class_names=names, trained=trained)
    outcome = cli.invoke(app, ["predict", str(path), str(digit)], terminal_width=200)
    assert outcome.exit_code == 0, outcome.output
    assert "\x1b" not in outcome.output
    assert "trained on ]8;;https://example.invalid\\x]8;;\\, 1 epochs" in outcome.stdout


def _weights_of_a_few_bytes(workload_name: str) -> dict[str, torch.Tensor]:
    """`workload_name`'s weights, every tensor of its full shape but a view of one zero (stride 0): a file of a few
    KB that declares the model's full size."""
    workload = get_workload(workload_name)
    with torch.device("meta"):
        shapes = workload.build_model(workload.defaults).state_dict()
    return {name: torch.zeros((), dtype=want.dtype).expand(want.shape) for name, want in shapes.items()}


@pytest.mark.parametrize("workload_name, classes", [("mnist-cnn2", 10), ("vgg16", 1000)])
def test_a_checkpoint_declaring_more_weights_than_its_file_holds_is_refused_before_any_is_built(
    checkpoint, digit, tmp_path, workload_name, classes
):
    """vgg16's 553 MB of weights in a file of 24 KB: refused from the file's size, before the model is built, its
    weights copied or an image run through it (the hostile round's took 90 s and 1.6 GB, and was killed)."""
    path = edited_checkpoint(
        checkpoint,
        tmp_path / "model.pt",
        workload=workload_name,
        hyperparameters={},
        image_shape=list(get_workload(workload_name).image_shape),
        class_names=[str(index) for index in range(classes)],
        state_dict=_weights_of_a_few_bytes(workload_name),
    )
    declared = sum(tensor.numel() * tensor.element_size() for tensor in _weights_of_a_few_bytes(workload_name).values())
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"declares {declared:,} bytes of weights in a file of {path.stat().st_size:,} bytes" in unwrapped(
        outcome.stderr
    )


@pytest.mark.parametrize("count", [3, 11])
def test_class_names_that_do_not_match_the_models_outputs_are_refused(checkpoint, digit, tmp_path, count):
    path = edited_checkpoint(checkpoint, tmp_path / "model.pt", class_names=[str(index) for index in range(count)])
    outcome = cli.invoke(app, ["predict", str(path), str(digit)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"{count} class names for a model of 10 classes" in unwrapped(outcome.stderr)


# --- image decompression bombs ---------------------------------------------------------------------------------


def png_header_only(width: int, height: int) -> bytes:
    """A valid PNG header declaring width x height 1-bit pixels, with no pixel data: a bomb as Image.open sees it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # bit depth 1, greyscale, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, bytes]:
    """Two PNGs of about 12 KB: one whose 100 million pixels really decode (above MAX_IMAGE_PIXELS, where Pillow
    only warns), and a header declaring 400 million (above twice it, where Pillow raises)."""
    decodable = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(decodable, "PNG")
    return {"warned": decodable.getvalue(), "raised": png_header_only(20_000, 20_000)}


@pytest.mark.parametrize("bomb", ["warned", "raised"])
def test_an_image_bomb_in_a_training_folder_is_left_out_as_unreadable(tmp_path, bombs, bomb):
    folder = write_brightness_folder(tmp_path / "images", train_per_class=2, test_per_class=1)
    (folder / "train" / "dark" / "bomb.png").write_bytes(bombs[bomb])
    dataset = read_image_folder(folder)
    assert dataset.skipped == (str(folder / "train" / "dark" / "bomb.png"),)
    assert len(dataset.train) == 4
    with pytest.raises(
        DataFormatError, match="bomb.png: not a readable image .too many pixels, a possible decompression bomb"
    ):
        decode_image(bombs[bomb], channels=1, size=(28, 28), name=str(folder / "bomb.png"))
    assert Image.MAX_IMAGE_PIXELS == PILLOW_DEFAULT_MAX_PIXELS


def test_a_training_run_on_a_folder_with_a_bomb_trains_on_the_rest_and_says_so(tmp_path, bombs):
    folder = write_brightness_folder(tmp_path / "images", train_per_class=2, test_per_class=1)
    (folder / "train" / "light" / "bomb.png").write_bytes(bombs["warned"])
    outcome = cli.invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--data-dir",
            str(folder),
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--max-eval-steps",
            "1",
            "--batch-size",
            "2",
            "--workers",
            "0",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    assert f"left out 1 unreadable image file(s), the first {folder / 'train' / 'light' / 'bomb.png'}" in unwrapped(
        outcome.stderr
    )
    assert Image.MAX_IMAGE_PIXELS == PILLOW_DEFAULT_MAX_PIXELS


@pytest.mark.parametrize("bomb", ["warned", "raised"])
def test_predict_reports_an_image_bomb_and_still_classifies_the_rest(checkpoint, digit, tmp_path, bombs, bomb):
    path = tmp_path / "bomb.png"
    path.write_bytes(bombs[bomb])
    outcome = cli.invoke(app, ["predict", "--json", str(checkpoint), str(path), str(digit)])
    assert outcome.exit_code == EXIT_FAILED_RUN
    assert f"{path}: not a readable image (too many pixels, a possible decompression bomb" in unwrapped(outcome.stderr)
    assert f'"path": "{digit}"' in outcome.stdout and '"class_name": null' in outcome.stdout


# --- the network --------------------------------------------------------------------------------------------------


@pytest.fixture
def connections(monkeypatch) -> Iterator[list[str]]:
    """Every attempt to look up a name, connect or send a datagram, recorded and refused."""
    attempts: list[str] = []

    def refusing(what: str) -> Callable:
        def refused(*arguments: object, **keywords: object):
            attempts.append(f"{what}{arguments}")
            raise OSError(f"this test allows no network access ({what})")

        return refused

    for name in ("connect", "connect_ex", "sendto"):
        monkeypatch.setattr(socket.socket, name, refusing(f"socket.{name}"))
    for name in ("create_connection", "getaddrinfo"):
        monkeypatch.setattr(socket, name, refusing(name))
    yield attempts


def test_the_guard_catches_a_download(connections, tmp_path):
    """The guard below is not blind: a dataset download is caught by it."""
    remote = RemoteFile("x.gz", ("https://example.invalid/x.gz",), "sha256:" + "0" * 64, 1)
    with pytest.raises(DataUnavailable):
        fetch(remote, tmp_path, progress=False)
    assert connections and "'example.invalid'" in connections[0]


def test_a_download_of_the_wrong_size_is_refused_even_with_the_pinned_checksum(loopback_server, tmp_path):
    content = b"a dataset file"
    (loopback_server.folder / "data.gz").write_bytes(content)
    remote = RemoteFile(
        "data.gz",
        (loopback_server.url("data.gz"),),
        "sha256:" + hashlib.sha256(content).hexdigest(),
        size_bytes=len(content) + 1,
    )
    with pytest.raises(DataUnavailable) as raised:
        fetch(remote, tmp_path / "cache", progress=False)
    assert "size" in raised.value.reasons and str(len(content)) in raised.value.reasons
    assert not (tmp_path / "cache" / "data.gz").exists()


def test_run_devices_list_compare_and_report_open_no_connection(connections, tmp_path):
    commands = [
        ["run", "mnist-cnn2", "--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "2"],
        ["devices"],
        ["list"],
        ["compare"],
        ["history"],
        ["report", "--out", str(tmp_path / "report.html")],
    ]
    for command in commands:
        outcome = cli.invoke(app, command)
        assert outcome.exit_code == 0, (command, outcome.output)
    assert (tmp_path / "report.html").is_file()
    assert connections == []
