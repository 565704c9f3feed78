"""`devicebench data` against a real loopback HTTP server, and the quick suite's rule on large downloads.

python -m pytest tests/test_data_command.py -q
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from http_fixtures import StatefulHTTPServer, serving
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench.cli import EXIT_FAILED_RUN, EXIT_INTERRUPTED, EXIT_USAGE, app
from devicebench.data import download, load_dataset, sources
from devicebench.data.download import RemoteFile
from devicebench.data.formats import CIFAR10_BINARY, MNIST_FILES
from devicebench.data.sources import DatasetSpec

CONTENT = {  # two files of a made-up dataset; the first spans several 1 MiB reads, so a download can stop midway
    "tiny-a.bin": np.random.default_rng(5).integers(0, 256, size=3 * 2**20 + 321, dtype=np.uint8).tobytes(),
    "tiny-b.bin": b"the second file of the tiny release\n" * 100,
}


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def remote_for(filename: str, content: bytes, url: str) -> RemoteFile:
    return RemoteFile(
        filename, urls=(url,), checksum=f"sha256:{hashlib.sha256(content).hexdigest()}", size_bytes=len(content)
    )


# --- a server that honours Range requests and remembers every request -----------------------------------------------


@dataclass
class RangeServer:
    """Serves `files` (name -> bytes); `Range: bytes=N-` gets 206 and the bytes from N on."""

    files: dict[str, bytes]
    base_url: str = ""
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (file name, Range header or None)

    def requested(self, filename: str) -> list[str | None]:
        return [asked for name, asked in self.requests if name == filename]


class _RangeHandler(BaseHTTPRequestHandler):
    server: StatefulHTTPServer

    def do_GET(self) -> None:  # the name http.server dispatches GET requests to
        state = self.server.state
        name, asked = self.path.lstrip("/"), self.headers.get("Range")
        state.requests.append((name, asked))
        if name not in state.files:
            self.send_error(404)
            return
        content = state.files[name]
        start = int(asked.removeprefix("bytes=").removesuffix("-")) if asked else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        self.send_header("Content-Length", str(len(content) - start))
        self.end_headers()
        self.wfile.write(content[start:])

    def log_message(self, format: str, *args: object) -> None:  # the base class's signature
        pass


@pytest.fixture
def range_server() -> Iterator[RangeServer]:
    state = RangeServer(files=dict(CONTENT))
    with serving(_RangeHandler, state) as state.base_url:
        yield state


@pytest.fixture
def tiny(range_server, monkeypatch, tmp_path) -> Path:
    """A dataset "tiny" in the registry, served by `range_server`; the data root (empty) it is fetched into."""
    files = tuple(remote_for(name, content, range_server.base_url + name) for name, content in CONTENT.items())
    spec = DatasetSpec(
        name="tiny",
        title="Tiny",
        files=files,
        image_shape=None,
        num_classes=2,
        train_size=1,
        test_size=1,
        kind="table",
        features=1,
    )
    monkeypatch.setitem(sources.DATASETS, "tiny", spec)
    monkeypatch.setattr(download, "RETRY_PAUSE_S", 0.0)
    root = tmp_path / "data"
    monkeypatch.setenv(sources.DATA_DIR_ENVIRONMENT_VARIABLE, str(root))
    return root


def data(*arguments: str):
    return CliRunner().invoke(app, ["data", *arguments])


def state_of(name: str, listing: str) -> str:
    """The state `devicebench data list` shows for `name`."""
    row = next(line for line in listing.splitlines() if re.match(rf"\W*{re.escape(name)}\s", line))
    return row.split("│")[-2].strip()


# --- list -------------------------------------------------------------------------------------------------------


def test_list_on_a_fresh_machine_shows_every_dataset_missing_with_its_size(tmp_path, monkeypatch):
    monkeypatch.setenv(sources.DATA_DIR_ENVIRONMENT_VARIABLE, str(tmp_path / "nothing-yet"))
    outcome = data("list")
    assert outcome.exit_code == 0, outcome.output
    for name, megabytes in (
        ("mnist", "11.6"),
        ("cifar10", "170"),
        ("cifar100", "169"),
        ("cats-vs-dogs", "825"),
        ("imdb", "84.1"),
        ("covertype", "11.2"),
    ):
        assert re.search(rf"│ {re.escape(name)}\s.*│\s+{re.escape(megabytes)} │ missing", outcome.output), name
    assert f"Datasets in {tmp_path / 'nothing-yet'}" in outcome.output
    assert "`devicebench data verify` checks their sha256" in unwrapped(outcome.output)
    assert not (tmp_path / "nothing-yet").exists()  # listing creates nothing

    other = data("list", "--data-dir", str(tmp_path / "elsewhere"), "--json")
    listed = {entry["name"]: entry for entry in json.loads(other.stdout)}
    assert listed["cifar10"]["state"] == "missing" and listed["cifar10"]["size_bytes"] == 170_052_171
    assert listed["cifar10"]["folder"] == str(tmp_path / "elsewhere" / "cifar10")


def test_fetch_downloads_verifies_and_then_list_says_cached(tiny, range_server):
    outcome = data("fetch", "tiny")
    assert outcome.exit_code == 0, outcome.output
    for name, content in CONTENT.items():
        assert (tiny / "tiny" / name).read_bytes() == content
    assert sorted(path.name for path in (tiny / "tiny").iterdir()) == sorted(CONTENT)  # nothing hidden left behind
    assert state_of("tiny", data("list").output) == "cached"

    again = data("fetch", "tiny")
    assert again.exit_code == 0 and "was cached already" in again.output
    assert len(range_server.requests) == len(CONTENT)  # nothing downloaded twice


def test_a_fetch_stopped_midway_is_kept_and_the_next_fetch_takes_it_up(tiny, range_server, monkeypatch):
    real_append = download._PartialFile.append

    def stopped_after_a_mebibyte(partial, chunk: bytes) -> None:
        real_append(partial, chunk)
        if partial.received_bytes >= 2**20:
            raise KeyboardInterrupt  # what the CLI's stop handling turns Ctrl-C into

    monkeypatch.setattr(download._PartialFile, "append", stopped_after_a_mebibyte)
    stopped = data("fetch", "tiny")
    assert stopped.exit_code == EXIT_INTERRUPTED
    assert "resume with `devicebench data fetch tiny`" in unwrapped(stopped.output)
    folder = tiny / "tiny"
    kept = folder / ".tiny-a.bin.partial"
    assert sorted(path.name for path in folder.iterdir()) == [kept.name]  # no random leftovers, no final file
    assert kept.read_bytes() == CONTENT["tiny-a.bin"][: 2**20]
    assert state_of("tiny", data("list").output) == "partial (1.0 of 3.1 MB)"

    monkeypatch.setattr(download._PartialFile, "append", real_append)
    resumed = data("fetch", "tiny")
    assert resumed.exit_code == 0, resumed.output
    assert range_server.requested("tiny-a.bin") == [None, f"bytes={2**20}-"]  # only the rest was asked for
    assert (folder / "tiny-a.bin").read_bytes() == CONTENT["tiny-a.bin"]
    assert sorted(path.name for path in folder.iterdir()) == sorted(CONTENT)


def test_a_kept_partial_that_fails_the_checksum_is_discarded_and_said_so(tiny, range_server):
    folder = tiny / "tiny"
    folder.mkdir(parents=True)
    (folder / ".tiny-a.bin.partial").write_bytes(b"not the beginning of the file")
    outcome = data("fetch", "tiny")
    assert outcome.exit_code == EXIT_FAILED_RUN
    message = unwrapped(outcome.output)
    assert "checksum mismatch" in message and "the downloaded file was deleted" in message
    assert "an earlier, interrupted download kept; the next fetch starts afresh" in message
    assert range_server.requested("tiny-a.bin") == ["bytes=29-"]
    assert not (folder / ".tiny-a.bin.partial").exists() and not (folder / "tiny-a.bin").exists()

    assert data("fetch", "tiny").exit_code == 0  # afresh: the whole file
    assert range_server.requested("tiny-a.bin")[-1] is None
    assert (folder / "tiny-a.bin").read_bytes() == CONTENT["tiny-a.bin"]


def test_fetch_with_every_url_failing_names_them_and_where_to_put_the_files(tiny, dead_base_url, monkeypatch):
    spec = sources.DATASETS["tiny"]
    dead = tuple(dataclasses.replace(remote, urls=(dead_base_url + remote.filename,)) for remote in spec.files)
    monkeypatch.setitem(sources.DATASETS, "tiny", dataclasses.replace(spec, files=dead))
    outcome = data("fetch", "tiny", "--timeout", "5")
    assert outcome.exit_code == EXIT_FAILED_RUN
    message = unwrapped(outcome.output)
    assert f"{dead_base_url}tiny-a.bin: connection refused" in message
    assert f"put it in folder {tiny / 'tiny'} as file tiny-a.bin" in message


def test_a_kept_partial_outlives_a_fetch_without_network(tiny, dead_base_url, monkeypatch):
    spec = sources.DATASETS["tiny"]
    dead = tuple(dataclasses.replace(remote, urls=(dead_base_url + remote.filename,)) for remote in spec.files)
    monkeypatch.setitem(sources.DATASETS, "tiny", dataclasses.replace(spec, files=dead))
    kept = tiny / "tiny" / ".tiny-a.bin.partial"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(CONTENT["tiny-a.bin"][:1000])
    outcome = data("fetch", "tiny", "--timeout", "5")
    assert outcome.exit_code == EXIT_FAILED_RUN
    assert "connection refused; kept its first 1,000 bytes for the next fetch" in unwrapped(outcome.output)
    assert kept.read_bytes() == CONTENT["tiny-a.bin"][:1000]  # offline is no reason to throw it away


# --- verify, path, remove ----------------------------------------------------------------------------------------


def test_verify_fails_on_a_corrupted_file_and_says_how_to_fix_it(tiny, range_server):
    assert data("fetch", "tiny").exit_code == 0
    assert data("verify", "tiny").exit_code == 0
    corrupt = tiny / "tiny" / "tiny-b.bin"
    corrupt.write_bytes(b"X" + CONTENT["tiny-b.bin"][1:])  # the right size: only hashing can tell
    assert state_of("tiny", data("list").output) == "cached"

    outcome = data("verify", "tiny")
    assert outcome.exit_code == EXIT_FAILED_RUN
    message = unwrapped(outcome.output)
    assert "tiny: tiny-b.bin: checksum mismatch" in message
    assert "`devicebench data remove tiny` then `devicebench data fetch tiny`" in message

    corrupt.write_bytes(CONTENT["tiny-b.bin"][:-1])  # one byte short: the size alone tells
    assert state_of("tiny", data("list").output) == "wrong size"


def test_path_prints_the_data_folder_and_a_dataset_s_folder(tiny):
    assert data("path").stdout == f"{tiny}\n"
    assert data("path", "tiny").stdout == f"{tiny / 'tiny'}\n"


def test_remove_deletes_only_what_devicebench_manages_and_says_what_it_freed(tiny, range_server):
    assert data("fetch", "tiny").exit_code == 0
    folder = tiny / "tiny"
    (folder / ".tiny-b.bin.partial").write_bytes(b"kept")
    (folder / "my-notes.txt").write_text("mine")

    refused = data("remove", "tiny")  # the test's stdin is not a terminal
    assert refused.exit_code == EXIT_USAGE and "add --yes" in unwrapped(refused.output)
    assert (folder / "tiny-a.bin").exists()

    outcome = data("remove", "tiny", "--yes")
    assert outcome.exit_code == 0, outcome.output
    freed = sum(len(content) for content in CONTENT.values()) + len(b"kept")
    assert f"({freed:,} bytes) freed" in outcome.output
    assert sorted(path.name for path in folder.iterdir()) == ["my-notes.txt"]
    assert state_of("tiny", data("list").output) == "missing"


@pytest.mark.parametrize("command", ["fetch", "verify", "path", "remove"])
def test_an_unknown_dataset_is_a_usage_error_listing_the_known_ones(command, tiny):
    outcome = data(command, "svhn", *(["--yes"] if command == "remove" else []))
    assert outcome.exit_code == EXIT_USAGE
    assert "unknown dataset svhn; known datasets: mnist, cifar10, cifar100" in unwrapped(outcome.output)


# --- the quick suite downloads nothing large unasked -----------------------------------------------------------------


@pytest.fixture
def served_mnist_and_cifar(tiny_mnist, tiny_cifar10, loopback_server, monkeypatch) -> int:
    """The tiny MNIST and CIFAR-10 releases as "mnist" and "cifar10", on the loopback server; a download limit
    between their sizes."""
    for name, folder, filenames in (
        ("mnist", tiny_mnist.folder, MNIST_FILES.values()),
        ("cifar10", tiny_cifar10.folder, (CIFAR10_BINARY.archive_name,)),
    ):
        files = tuple(
            remote_for(filename, (folder / filename).read_bytes(), loopback_server.publish(folder / filename))
            for filename in filenames
        )
        monkeypatch.setitem(sources.DATASETS, name, dataclasses.replace(sources.DATASETS[name], files=files))
    small, large = sources.DATASETS["mnist"].size_bytes, sources.DATASETS["cifar10"].size_bytes
    assert small < large
    return (small + large) // 2


def test_auto_with_a_limit_fetches_a_small_dataset_and_not_a_large_one(
    served_mnist_and_cifar, loopback_server, tmp_path
):
    limit = served_mnist_and_cifar
    small = load_dataset("mnist", "auto", data_dir=tmp_path, progress=False, largest_download_bytes=limit)
    assert small.source == "real" and small.fallback_reason is None
    assert sorted(loopback_server.requested) == sorted(MNIST_FILES.values())

    large = load_dataset("cifar10", "auto", data_dir=tmp_path, progress=False, largest_download_bytes=limit)
    assert large.source == "synthetic"
    assert CIFAR10_BINARY.archive_name not in loopback_server.requested  # the network was not tried for it
    size = sources.megabytes(sources.DATASETS["cifar10"].size_bytes)
    assert large.fallback_reason == (
        f"CIFAR-10 ({size} MB) is not downloaded by the quick suite; "
        "`devicebench data fetch cifar10` gets it, or `--data real`"
    )
    assert not (tmp_path / "cifar10").exists()

    unlimited = load_dataset("cifar10", "auto", data_dir=tmp_path, progress=False)
    assert unlimited.source == "real" and CIFAR10_BINARY.archive_name in loopback_server.requested


def test_a_cached_large_dataset_is_used_whatever_the_limit(
    served_mnist_and_cifar, tiny_cifar10, loopback_server, tmp_path
):
    (tmp_path / "cifar10").mkdir()
    shutil.copy(tiny_cifar10.folder / CIFAR10_BINARY.archive_name, tmp_path / "cifar10")
    dataset = load_dataset("cifar10", "auto", data_dir=tmp_path, progress=False, largest_download_bytes=1)
    assert dataset.source == "real" and dataset.fallback_reason is None
    np.testing.assert_array_equal(dataset.test_labels, tiny_cifar10.expected.test_labels)
    assert loopback_server.requested == []


def test_real_downloads_whatever_the_size(served_mnist_and_cifar, loopback_server, tmp_path):
    dataset = load_dataset("cifar10", "real", data_dir=tmp_path, progress=False, largest_download_bytes=1)
    assert dataset.source == "real" and loopback_server.requested == [CIFAR10_BINARY.archive_name]


def test_the_quick_suite_on_auto_plans_the_limit_and_named_workloads_or_real_data_do_not(monkeypatch):
    def limit(**options) -> int | None:
        (job,) = planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cpu", **options)).jobs
        return job.data.largest_download_bytes

    assert limit(suite="quick") == sources.QUICK_SUITE_DOWNLOAD_LIMIT_BYTES
    assert limit() is None  # a named workload: the seeds' settings, whatever it takes
    assert limit(suite="quick", data="real") is None
    assert limit(suite="quick", data="synthetic") is None
    assert RunConfig(devices="cpu").largest_download_bytes == sources.QUICK_SUITE_DOWNLOAD_LIMIT_BYTES  # the suite

    plan = planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cpu", suite="quick"))
    again = planning.Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again.jobs == plan.jobs  # the limit crosses to the other processes of --nproc

    asked = {}
    monkeypatch.setattr(runner, "load_dataset", lambda *arguments, **options: asked.update(options))
    runner.load_data(plan.jobs[0])
    assert asked["largest_download_bytes"] == sources.QUICK_SUITE_DOWNLOAD_LIMIT_BYTES


def test_the_limit_fetches_mnist_and_covertype_and_nothing_larger():
    fetched = {
        name
        for name, spec in sources.DATASETS.items()
        if spec.files and spec.size_bytes <= sources.QUICK_SUITE_DOWNLOAD_LIMIT_BYTES
    }  # some have none
    assert fetched == {"mnist", "covertype"}
