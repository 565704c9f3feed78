"""Downloads and the data folder against servers and folders that are out to do harm, with tiny files and short
times: a kept download that is a hard link to a file elsewhere, a dataset folder that is a link into the user's own
tree, a server that sends more than the file, one that drips its bytes, and a kept download larger than the file.

    python -m pytest tests/test_hostile_downloads.py -q
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest
from http_fixtures import StatefulHTTPServer, serving
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.data import download, sources
from devicebench.data.download import DataUnavailable, RemoteFile, fetch, partial_path

CONTENT = bytes(range(256)) * 40  # the file: 10,240 bytes


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def remote(base_url: str, content: bytes = CONTENT) -> RemoteFile:
    return RemoteFile(
        "file.bin",
        urls=(base_url + "file.bin",),
        size_bytes=len(content),
        checksum=f"sha256:{hashlib.sha256(content).hexdigest()}",
    )


@dataclass
class Behaviour:
    """What the server sends for file.bin: `body`, announced as `announced` bytes (None: no Content-Length, the
    end is the connection's close), a piece of `drip` bytes every `pause_s` seconds (0: all at once)."""

    body: bytes = CONTENT
    announced: int | None = len(CONTENT)
    drip: int = 0
    pause_s: float = 0.0
    requests: int = 0
    released: threading.Event = field(default_factory=threading.Event)  # ends a drip when the test is over


class _Handler(BaseHTTPRequestHandler):
    server: StatefulHTTPServer

    def do_GET(self) -> None:  # the name http.server dispatches GET requests to
        state = self.server.state
        state.requests += 1
        self.send_response(200)
        if state.announced is not None:
            self.send_header("Content-Length", str(state.announced))
        self.end_headers()
        pieces = (
            [state.body[start : start + state.drip] for start in range(0, len(state.body), state.drip)]
            if state.drip
            else [state.body]
        )
        try:
            for piece in pieces:
                self.wfile.write(piece)
                self.wfile.flush()
                if state.released.wait(state.pause_s):
                    return
        except OSError:  # the client hung up: what a client that gives up does
            pass
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # the base class's signature
        pass


@pytest.fixture
def server():
    state = Behaviour()
    with serving(_Handler, state) as base_url:
        yield state, base_url
        state.released.set()


# --- a kept download that is a hard link, or larger than the file -------------------------------------------------


def test_a_kept_download_hard_linked_to_a_file_elsewhere_is_never_written_through(tmp_path, server):
    state, base_url = server
    outside = tmp_path / "my-thesis.txt"  # the user's own file, outside the data folder
    outside.write_bytes(b"chapter one, not the beginning of the file\n" * 10)
    before = outside.read_bytes()
    folder = tmp_path / "data"
    folder.mkdir()
    os.link(outside, partial_path(folder, remote(base_url)))  # the kept .file.bin.partial, another name of it
    assert fetch(remote(base_url), folder, progress=False).read_bytes() == CONTENT
    assert outside.read_bytes() == before  # neither appended to nor truncated
    assert os.stat(outside).st_nlink == 1 and sorted(path.name for path in folder.iterdir()) == ["file.bin"]


def test_a_kept_download_larger_than_the_file_is_dropped_unread(tmp_path, server, monkeypatch):
    state, base_url = server
    folder = tmp_path / "data"
    folder.mkdir()
    partial_path(folder, remote(base_url)).write_bytes(CONTENT + b"more than the file has")
    hashed = []
    hash_kept_bytes = download._PartialFile._hash_kept_bytes

    def watched(partial):
        hashed.append(partial.path.stat().st_size)
        return hash_kept_bytes(partial)

    monkeypatch.setattr(download._PartialFile, "_hash_kept_bytes", watched)
    assert fetch(remote(base_url), folder, progress=False).read_bytes() == CONTENT
    assert hashed == [0]  # a 50 GB kept file is not read for minutes before being dropped
    assert sorted(path.name for path in folder.iterdir()) == ["file.bin"]


# --- a server that sends more than the file ---------------------------------------------------------------------


@pytest.mark.parametrize("announced", [None, 6 * len(CONTENT)], ids=["until-it-closes", "announced"])
def test_a_server_sending_more_than_the_file_is_stopped_at_its_size_and_nothing_is_kept(
    tmp_path, server, announced, monkeypatch
):
    state, base_url = server
    state.body, state.announced = CONTENT * 6, announced  # 60 MB for a 9.9 MB file, at a smaller scale
    written = []
    append = download._PartialFile.append

    def watched(partial, chunk):
        append(partial, chunk)
        written.append(partial.received_bytes)

    monkeypatch.setattr(download._PartialFile, "append", watched)
    folder = tmp_path / "data"
    with pytest.raises(DataUnavailable) as raised:
        fetch(remote(base_url), folder, progress=False)
    message = unwrapped(str(raised.value))
    assert ("more than the file's 10,240" in message) and "the downloaded file was deleted" in message
    assert max(written, default=0) <= len(CONTENT)  # never a byte beyond the file's size on disk
    assert state.requests == 1  # not asked again: it is the server, not the connection
    assert list(folder.iterdir()) == []


# --- a server that drips its bytes ----------------------------------------------------------------------------------


def test_a_server_dripping_its_bytes_is_given_up_at_the_deadline(tmp_path, server):
    """A byte every 0.05 s never stalls a read for the 1 s it may wait, yet would take 8.5 minutes: the deadline
    of 0.5 s ends it, within a read's wait."""
    state, base_url = server
    state.drip, state.pause_s = 1, 0.05
    folder = tmp_path / "data"
    finished = threading.Event()
    failure = []

    def download():
        try:
            fetch(remote(base_url), folder, progress=False, timeout_s=1.0, deadline_s=0.5)
        except DataUnavailable as error:
            failure.append(str(error))
        finally:
            finished.set()

    threading.Thread(target=download, daemon=True).start()
    assert finished.wait(timeout=5), "the download outlived its deadline"  # 0.5 s, and 1 s of a read at most
    assert "gave up after 0.5 s, the time a URL has to deliver the file" in unwrapped(failure[0])
    assert state.requests == 1 and list(folder.iterdir()) == []


def _tiny(base_url: str) -> sources.DatasetSpec:
    """A dataset of one file, served by the test's server."""
    return sources.DatasetSpec(
        name="tiny",
        title="Tiny",
        files=(remote(base_url),),
        image_shape=None,
        num_classes=2,
        train_size=1,
        test_size=1,
        kind="table",
        features=1,
    )


def test_data_fetch_timeout_is_the_deadline_of_the_whole_download(tmp_path, server, monkeypatch):
    state, base_url = server
    state.drip, state.pause_s = 1, 0.05
    monkeypatch.setitem(sources.DATASETS, "tiny", _tiny(base_url))
    outcome = CliRunner().invoke(app, ["data", "fetch", "tiny", "--timeout", "0.5", "--data-dir", str(tmp_path)])
    assert outcome.exit_code != 0 and "gave up after 0.5 s" in unwrapped(outcome.output)


@pytest.mark.parametrize("timeout", ["inf", "1e10", "nan"])
def test_a_deadline_no_timer_can_keep_is_refused_before_anything_is_fetched(tmp_path, server, monkeypatch, timeout):
    """`inf` and 1e10 s once raised OverflowError in the deadline's thread, and the download went on without one."""
    state, base_url = server
    monkeypatch.setitem(sources.DATASETS, "tiny", _tiny(base_url))
    outcome = CliRunner().invoke(app, ["data", "fetch", "tiny", "--timeout", timeout, "--data-dir", str(tmp_path)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "Invalid value for '--timeout'" in outcome.output and "604800" in outcome.output
    assert state.requests == 0 and list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="give one above 0 and at most 604800 s"):
        fetch(remote(base_url), tmp_path, progress=False, deadline_s=float(timeout))
    assert state.requests == 0


# --- a dataset folder that is a link ----------------------------------------------------------------------------------


def test_remove_never_follows_a_dataset_folder_that_is_a_link_into_the_user_s_tree(tmp_path):
    mine = tmp_path / "my-projects"
    (mine / "aclImdb" / "train").mkdir(parents=True)  # named as what devicebench extracts, yet the user's own
    (mine / "aclImdb" / "train" / "review.txt").write_text("my own review")
    (mine / "aclImdb_v1.tar.gz").write_bytes(b"my own archive")
    root = tmp_path / "data"
    root.mkdir()
    (root / "imdb").symlink_to(mine, target_is_directory=True)
    outcome = CliRunner().invoke(app, ["data", "remove", "imdb", "--yes", "--data-dir", str(root)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"{root / 'imdb'} is a symbolic link (to {mine})" in unwrapped(outcome.output)
    assert "nothing was removed" in unwrapped(outcome.output)
    assert (mine / "aclImdb" / "train" / "review.txt").read_text() == "my own review"
    assert (mine / "aclImdb_v1.tar.gz").exists() and (root / "imdb").is_symlink()
    with pytest.raises(sources.DataFolderIsALink):
        sources.remove_dataset("imdb", root)  # the library refuses too, not only the command


def test_remove_deletes_a_link_inside_the_folder_and_never_what_it_points_to(tmp_path):
    mine = tmp_path / "my-reviews"
    mine.mkdir()
    (mine / "review.txt").write_text("my own review")
    folder = tmp_path / "data" / "imdb"
    (folder / "aclImdb").mkdir(parents=True)
    (folder / "aclImdb" / "mine").symlink_to(mine, target_is_directory=True)  # a link inside what was extracted
    (folder / "imdb-v1-l2.npz").symlink_to(mine / "review.txt")
    outcome = CliRunner().invoke(app, ["data", "remove", "imdb", "--yes", "--data-dir", str(tmp_path / "data")])
    assert outcome.exit_code == 0, outcome.output
    assert (mine / "review.txt").read_text() == "my own review" and not folder.exists()


# --- a stop signal midway ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("after_bytes", [False, True], ids=["before-the-first-byte", "after-some-bytes"])
def test_a_fetch_stopped_midway_says_truly_what_it_kept(tmp_path, server, monkeypatch, after_bytes):
    """Stopped (SIGTERM and Ctrl-C end a command as KeyboardInterrupt) before the first byte, nothing is kept and it
    says so; after some, it names the bytes kept, which the next fetch takes up."""
    state, base_url = server
    monkeypatch.setitem(sources.DATASETS, "tiny", _tiny(base_url))
    request = download._request

    def stopped_midway(url, partial, *, show, **rest):
        def shown(received_bytes, expected_bytes):
            show(received_bytes, expected_bytes)
            raise KeyboardInterrupt  # as the first bytes are shown

        if not after_bytes:
            raise KeyboardInterrupt  # as the request is about to be sent
        return request(url, partial, show=shown, **rest)

    monkeypatch.setattr(download, "_request", stopped_midway)
    outcome = CliRunner().invoke(app, ["data", "fetch", "tiny", "--data-dir", str(tmp_path)])
    kept = partial_path(tmp_path / "tiny", remote(base_url))
    assert outcome.exit_code == 130, outcome.output
    if after_bytes:
        assert kept.stat().st_size > 0
        assert f"the {kept.stat().st_size:,} bytes of tiny downloaded so far are kept" in unwrapped(outcome.output)
    else:
        assert not kept.exists() and list((tmp_path / "tiny").iterdir()) == []
        assert "no byte of tiny's download had arrived, so none was kept" in unwrapped(outcome.output)
        assert "downloaded so far are kept" not in outcome.output
