"""The resumable, verified download of one file of a dataset release (`fetch`), its checksum and its errors.

A download streams into a hidden `.<file>.*.partial` beside its destination while it is hashed, is checked for size
and checksum, and only then is moved into place atomically: a file at its final name has always been verified. A
transfer the server cuts off midway is taken up again where it stopped (HTTP Range), a few times at most; a data
folder that is full or read-only stops the download at once with an error that says so. A download stopped by
Ctrl-C is kept as `.<file>.partial`, and the next fetch of that file takes it up where it stopped (HTTP Range).
Which files make up which dataset, and where they are cached, is the catalog's (sources.py).

    devicebench data fetch mnist
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import math
import os
import stat
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from devicebench.data import connection
from devicebench.data.connection import Deadline, InsecureRedirect, describe_network_error
from devicebench.files import DATA_VARIABLE, UnusableFile, require_regular_file

CHUNK_BYTES = 1 << 20  # 1 MiB per read: small enough for a smooth progress bar, large enough to be cheap
DIGEST_HEX_LENGTHS = {"md5": 32, "sha256": 64}  # the checksum kinds we accept, and their hex lengths
DOWNLOAD_ATTEMPTS = 3  # requests per URL: a transfer cut off midway is taken up again twice at most
RETRY_PAUSE_S = 1.0  # seconds before taking it up again, so a server that just dropped the connection can recover
STALL_TIMEOUT_S = 15.0  # seconds a connection or a read may wait for the server before the URL is given up
# seconds a URL has to deliver a whole file, attempts included: a server sending a byte now and then, never stalling,
# cannot hold a download for ever. 30 min brings the largest release (CIFAR-100, 169 MB) at 94 kB/s
DOWNLOAD_DEADLINE_S = 1800.0
T = TypeVar("T")


class DataUnavailable(RuntimeError):
    """No URL gave a file that verifies; the message says what each URL answered and where to put the file."""

    folder: Path | None  # where the file was looked for; None where no file was (RealDataUnreadable)

    def __init__(self, filename: str, folder: Path, failures: list[tuple[str, str]], checksum: str) -> None:
        self.filename = filename
        self.folder = folder
        self.failures = tuple(failures)  # (url, reason) for each URL tried, in order
        self.checksum = checksum
        tried = "\n".join(f"  - {url}: {reason}" for url, reason in failures) or "  (no URLs are known for it)"
        super().__init__(
            f"could not download {filename} from any of its {len(failures)} URL(s):\n{tried}\n"
            f"To use it offline, download it yourself and put it in folder {folder} as file {filename}\n"
            f"(that is, {folder / filename}); it must match {checksum}."
        )

    def __reduce__(self) -> tuple[type[DataUnavailable], tuple[Any, ...]]:
        # rebuilt from our own arguments, so the error survives crossing a process boundary (DataLoader workers, DDP)
        return (DataUnavailable, (self.filename, self.folder, list(self.failures), self.checksum))

    @property
    def reasons(self) -> str:
        """One line: each URL and why it failed."""
        return "; ".join(f"{url}: {reason}" for url, reason in self.failures) or "no URLs are known"


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset release, the mirrors that serve it, and the checksum it must have."""

    filename: str
    urls: tuple[str, ...]  # mirrors, tried in order
    checksum: str  # "sha256:<hex>" or "md5:<hex>"
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        algorithm, _, hex_digest = self.checksum.partition(":")
        if DIGEST_HEX_LENGTHS.get(algorithm) != len(hex_digest) or not all(
            character in "0123456789abcdef" for character in hex_digest
        ):
            raise ValueError(
                f"{self.filename}: checksum must be 'md5:<32 hex>' or 'sha256:<64 hex>', got {self.checksum!r}"
            )

    @property
    def algorithm(self) -> str:
        return self.checksum.partition(":")[0]

    @property
    def hex_digest(self) -> str:
        return self.checksum.partition(":")[2]


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks so a 170 MB archive never sits in memory twice. Only a regular file is
    hashed (UnusableFile otherwise): a link to /dev/zero would be hashed forever."""
    require_regular_file(path, "the cached file")
    hasher = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def partial_path(folder: Path, remote: RemoteFile) -> Path:
    """Where a download of `remote` stopped by Ctrl-C waits for the next fetch to take it up: `.<file>.partial`."""
    return Path(folder) / f".{remote.filename}.partial"


def regular_file_size(path: Path) -> int | None:
    """The size of the regular file at `path` (a link to one counts), or None when there is none."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def kept_download_in_words(name: str, folder: Path, remotes: Iterable[RemoteFile]) -> str:
    """What a download of dataset `name` into `folder` stopped midway kept of its `remotes`, in words: the bytes kept
    for the next fetch to take up, or that none had arrived (a stop before the first byte keeps nothing)."""
    kept_bytes = sum(regular_file_size(partial_path(folder, remote)) or 0 for remote in remotes)
    if not kept_bytes:
        return (
            f"no byte of {name}'s download had arrived, so none was kept; fetch it with `devicebench data fetch {name}`"
        )
    return f"the {kept_bytes:,} bytes of {name} downloaded so far are kept; resume with `devicebench data fetch {name}`"


def fetch(
    remote: RemoteFile,
    folder: Path,
    *,
    progress: bool = True,
    timeout_s: float = STALL_TIMEOUT_S,
    deadline_s: float | None = DOWNLOAD_DEADLINE_S,
) -> Path:
    """Return `folder/remote.filename`, verified, downloading it from the first mirror that serves it intact.

    `timeout_s`: how long connecting or any one read may wait; `deadline_s`: how long each mirror has to deliver
    the whole file, attempts included (None: no limit). A data folder that takes no more bytes (full, read-only)
    ends the search at once: no other mirror can help.
    """
    folder = Path(folder)
    target = folder / remote.filename
    failures: list[tuple[str, str]] = []
    try:
        if _cached(target, remote):
            return target
        _writing(folder, folder.mkdir, parents=True, exist_ok=True)
        for url in remote.urls:
            reason = _download(url, remote, target, progress=progress, timeout_s=timeout_s, deadline_s=deadline_s)
            if reason is None:
                return target
            failures.append((url, reason))
    except _CacheUnusable as error:
        failures = [(url, f"not downloaded: {error}") for url in remote.urls]
        raise DataUnavailable(remote.filename, folder, failures, remote.checksum) from None
    raise DataUnavailable(remote.filename, folder, failures, remote.checksum)


class _CacheUnusable(Exception):
    """The data folder cannot hold the file (full, read-only, unreadable); the message says which and what to do."""


def _writing(folder: Path, operation: Callable[..., T], *arguments: Any, **options: Any) -> T:
    """`operation(*arguments, **options)`, an operation on the data folder: its OSError becomes _CacheUnusable."""
    try:
        return operation(*arguments, **options)
    except OSError as error:
        raise _CacheUnusable(_unwritable(folder, error)) from None


def _cached(target: Path, remote: RemoteFile) -> bool:
    """Whether `target` is already in the cache and verifies; a corrupt copy is deleted, with a warning."""
    if not target.exists():
        return False
    try:
        found = file_digest(target, remote.algorithm)
    except UnusableFile as error:  # a device, a FIFO, a folder, or a link to one: never read, never deleted
        raise _CacheUnusable(
            f"{error}; remove {target} from the cache, or choose another data folder with --data-dir or "
            f"${DATA_VARIABLE}"
        ) from None
    except OSError as error:  # unreadable
        raise _CacheUnusable(
            f"{target} is in the cache but cannot be read ({error.strerror or error}); remove it, or choose another "
            f"data folder with --data-dir or ${DATA_VARIABLE}"
        ) from None
    if found == remote.hex_digest:
        return True
    corrupt = f"{target} is corrupt (expected {remote.checksum}, found {remote.algorithm}:{found})"
    try:
        target.unlink()
    except OSError as error:
        raise _CacheUnusable(f"{corrupt} and cannot be deleted: {_unwritable(target.parent, error)}") from None
    warnings.warn(f"{corrupt}; deleted it, downloading it again", stacklevel=3)
    return False


class _PartialFile:
    """The hidden temporary file a download streams into, hashed as it grows; only a verified one is renamed.

    It is private to this download (a random name), so that two processes fetching the same file never write into
    one. A download kept from an earlier fetch (`partial_path`) is claimed by renaming it to that private name, and
    continued: its bytes are hashed, and the first request asks for the rest."""

    def __init__(self, folder: Path, remote: RemoteFile) -> None:
        self.folder = folder
        self.algorithm = remote.algorithm
        self.kept_path = partial_path(folder, remote)
        handle, name = _writing(folder, tempfile.mkstemp, dir=folder, prefix=f".{remote.filename}.", suffix=".partial")
        self.path = Path(name)
        self.expected_bytes = remote.size_bytes
        if not self.kept_path.is_symlink() and regular_file_size(self.kept_path):
            os.close(handle)
            try:
                os.replace(self.kept_path, self.path)
            except FileNotFoundError:
                pass  # another process claimed it first: this one starts afresh
            except OSError as error:
                self.path.unlink(missing_ok=True)
                raise _CacheUnusable(_unwritable(folder, error)) from None
            handle = self._claimed(_writing(folder, os.open, self.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)))
        self._file = os.fdopen(handle, "wb")
        self.arrived_bytes = 0  # every byte any attempt brought, kept or not: whether retrying still helps
        self.oversized = False  # the server sent (or announced) more bytes than the file has
        self.moved = False
        self.hasher = hashlib.new(self.algorithm, usedforsecurity=False)
        self.received_bytes = self.resumed_bytes = self._hash_kept_bytes()

    def _claimed(self, handle: int) -> int:
        """`handle`, open on a kept download, if it may be taken up; else a new, empty file's in its place.

        It is written to and may be truncated, so it must be this folder's alone: a regular file with no other name
        (a hard link would make a file elsewhere, outside the data folder, the one written). One longer than the
        whole file is no beginning of it: it is dropped unread, not hashed (it may be 50 GB)."""
        info = os.fstat(handle)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size <= (self.expected_bytes or math.inf):
            return handle
        os.close(handle)
        _writing(self.folder, self.path.unlink)  # the name only: another name of a hard link keeps its bytes
        return _writing(
            self.folder, os.open, self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
        )

    def _hash_kept_bytes(self) -> int:
        """Hash the bytes an earlier fetch kept in the file (none for a new one); their count. Ends at the end."""
        with open(self.path, "rb") as kept:
            while chunk := kept.read(CHUNK_BYTES):
                self.hasher.update(chunk)
        return _writing(self.folder, self._file.seek, 0, os.SEEK_END)

    def restart(self) -> None:
        """Forget the bytes received: the server is sending the whole file again."""
        if self.received_bytes:
            _writing(self.folder, self._file.seek, 0)
            _writing(self.folder, self._file.truncate)
        self.hasher = hashlib.new(self.algorithm, usedforsecurity=False)
        self.received_bytes = self.resumed_bytes = 0

    def append(self, chunk: bytes) -> None:
        _writing(self.folder, self._file.write, chunk)
        self.hasher.update(chunk)
        self.received_bytes += len(chunk)
        self.arrived_bytes += len(chunk)

    def move_to(self, target: Path) -> None:
        """Put the whole file, on disk for good, at `target`, atomically."""
        _writing(self.folder, self._file.flush)
        _writing(self.folder, os.fsync, self._file.fileno())  # a power cut after the rename keeps every byte
        _writing(self.folder, self._file.close)
        _writing(self.folder, os.replace, self.path, target)
        self.moved = True

    def close(self, *, keep: bool) -> None:
        """Close it, and either keep its bytes at `kept_path` for the next fetch or delete it; gone after move_to."""
        if self.moved:
            return
        try:
            self._file.close()
        except OSError:
            keep = False  # the bytes it could not flush (a full disk) cannot be trusted, nor kept
        if keep and self.received_bytes:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.kept_path)
                return
        self.path.unlink(missing_ok=True)


def _download(
    url: str, remote: RemoteFile, target: Path, *, progress: bool, timeout_s: float, deadline_s: float | None
) -> str | None:
    """Download `url` to `target` through a verified temporary file; None on success, else why it failed.

    A transfer cut off midway is taken up where it stopped (an HTTP Range request) or, from a server that ignores
    ranges, from the start: up to DOWNLOAD_ATTEMPTS requests, as long as each one brings new bytes, all within
    `deadline_s`. Stopped by Ctrl-C, or failing to add to bytes an earlier fetch kept, it keeps what it has for the
    next fetch to take up. A server sending more bytes than the file has is stopped there, and its bytes deleted.
    """
    partial = _PartialFile(target.parent, remote)
    interrupted = False
    try:
        with _progress_bar(enabled=progress) as bar, Deadline(deadline_s) as deadline:
            task = bar.add_task(remote.filename, total=remote.size_bytes, completed=partial.received_bytes)

            def show(received_bytes: int, expected_bytes: int | None) -> None:
                bar.update(task, completed=received_bytes, total=expected_bytes or remote.size_bytes)

            # kept whole (stopped just before its move into place): nothing is left to ask for
            already_whole = bool(partial.resumed_bytes) and partial.resumed_bytes == remote.size_bytes
            for attempt in range(1, 0 if already_whole else DOWNLOAD_ATTEMPTS + 1):
                arrived_before = partial.arrived_bytes
                reason = _request(url, partial, timeout_s=timeout_s, show=show, deadline=deadline)
                kept = (
                    f"; kept its first {partial.received_bytes:,} bytes for the next fetch"
                    if partial.resumed_bytes
                    else ""
                )
                if deadline.passed.is_set() and partial.received_bytes != remote.size_bytes:
                    return (
                        f"gave up after {deadline_s:g} s, the time a URL has to deliver the file, with "
                        f"{partial.received_bytes:,} bytes received"
                    ) + kept
                if partial.oversized:
                    partial.restart()
                    return f"{reason}; the downloaded file was deleted"
                if reason is None:
                    break
                if partial.arrived_bytes == arrived_before or attempt == DOWNLOAD_ATTEMPTS:
                    return (reason if attempt == 1 else f"{reason} (gave up after {attempt} attempts)") + kept
                time.sleep(RETRY_PAUSE_S)
        return _verified_into_place(partial, remote, target)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:  # a new download that failed is never left behind; one stopped by Ctrl-C or resumed is kept
        partial.close(keep=interrupted or partial.resumed_bytes > 0)


def _verified_into_place(partial: _PartialFile, remote: RemoteFile, target: Path) -> str | None:
    """Move the downloaded file to `target` if its size and checksum are the release's; else delete it and say why."""
    deleted = "; the downloaded file was deleted"
    if partial.resumed_bytes:
        deleted += (
            f" (it continued {partial.resumed_bytes:,} bytes an earlier, interrupted download kept; "
            "the next fetch starts afresh)"
        )
    if remote.size_bytes is not None and partial.received_bytes != remote.size_bytes:
        problem = f"size mismatch: expected {remote.size_bytes} bytes, received {partial.received_bytes}{deleted}"
        partial.restart()
        return problem
    actual = partial.hasher.hexdigest()
    if actual != remote.hex_digest:
        partial.restart()
        return f"checksum mismatch: expected {remote.checksum}, got {remote.algorithm}:{actual}{deleted}"
    partial.move_to(target)
    return None


def _request(
    url: str, partial: _PartialFile, *, timeout_s: float, show: Callable[[int, int | None], None], deadline: Deadline
) -> str | None:
    """One request for the bytes `partial` still lacks; None once it holds the whole file, else why not. Never more
    than the file's size is read: a server sending more is stopped there (`partial.oversized`)."""
    headers = {"User-Agent": "devicebench"}
    if partial.received_bytes:
        headers["Range"] = f"bytes={partial.received_bytes}-"  # resume where the last attempt stopped
    expected_bytes = None
    try:
        with connection.OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as response:
            if response.status == HTTPStatus.PARTIAL_CONTENT:
                sent = response.headers.get("Content-Range", "")
                if not sent.startswith(f"bytes {partial.received_bytes}-"):
                    return f"asked for the bytes from {partial.received_bytes} on, the server sent {sent!r}"
            else:
                partial.restart()  # the server ignores ranges: it is sending the whole file again
            if response.length is not None:  # Content-Length, or None when the server does not say
                expected_bytes = partial.received_bytes + response.length
            size = partial.expected_bytes
            if size is not None and (expected_bytes or 0) > size:
                partial.oversized = True
                return f"the server announced {expected_bytes:,} bytes, more than the file's {size:,}: not read"
            with deadline.watching(response):
                # one byte beyond the file's end is asked for, to tell a server that sends more
                while chunk := response.read(
                    CHUNK_BYTES if size is None else min(CHUNK_BYTES, size - partial.received_bytes + 1)
                ):
                    if size is not None and partial.received_bytes + len(chunk) > size:
                        partial.oversized = True
                        return f"the server sent more than the file's {size:,} bytes: stopped reading there"
                    partial.append(chunk)
                    show(partial.received_bytes, expected_bytes)
    except InsecureRedirect as error:
        return str(error.reason)
    except urllib.error.HTTPError as error:
        error.close()  # the error page's body is of no use to us
        return f"HTTP {error.code} {error.reason}"
    except urllib.error.URLError as error:
        return describe_network_error(error.reason, timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as error:  # reset, timeout mid-body, malformed URL
        return describe_network_error(error, timeout_s)
    # http.client returns a short body silently when the server closes early, so count the bytes ourselves
    if expected_bytes is not None and partial.received_bytes < expected_bytes:
        return f"truncated: received {partial.received_bytes} of {expected_bytes} bytes"
    return None


def _unwritable(folder: Path, error: OSError) -> str:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"the disk holding the data folder {folder} is full ({error.strerror or error}); free some space there, "
            f"or choose another folder with --data-dir or ${DATA_VARIABLE}"
        )
    return (
        f"the data folder {folder} cannot be written ({error.strerror or error}); "
        f"choose another with --data-dir or ${DATA_VARIABLE}"
    )


def _progress_bar(*, enabled: bool) -> Progress:
    """Bytes, speed and time left on stderr; vanishes when done, so stdout stays for results. Only on a terminal: in
    a pipe or a log file it cannot vanish, and rich leaves a blank line for each download tried (two before a
    fallback to synthetic data from two mirrors, at the top of the output)."""
    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not (enabled and (console.is_terminal or console.is_jupyter)),
    )
