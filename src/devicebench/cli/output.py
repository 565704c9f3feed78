"""What every command prints to: the standard output and error consoles, which degrade to plain characters on a
terminal that cannot show ours and never stop a command whose stream is gone (closed, cut by the pipe's reader,
failing); `lost` says what happened, for the exit status.

    devicebench history | head -1
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import IO, Any, cast

from rich.console import Console

WIDTH_WHEN_PIPED = 200  # columns for logs with no terminal, where rich would otherwise fold the 12-column tables

# What an ASCII-only (or Latin-1) terminal gets instead of the characters the tables and messages use.
_PLAIN = str.maketrans(
    {
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u2026": "...",
        "\u2502": "|",
        "\u00d7": "x",
        "\u00b7": ".",
        "\u2192": "->",
        "\u2190": "<-",
        "\u2248": "~",
        "\u00b1": "+/-",
        "\u2265": ">=",
        "\u2264": "<=",
        "\u00b5": "u",
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2022": "*",
        "\u2714": "ok",
        "\u2718": "x",
    }
)


class _Degrading:
    """sys.stdout or sys.stderr as they are now (a test's CliRunner swaps them), for a rich Console: text the
    stream cannot encode (PYTHONIOENCODING=ascii, a C locale) is written plainly ('-' for '–', '?' for the rest)
    instead of raising UnicodeEncodeError after the work is done. Rich itself draws ASCII boxes for such a stream.

    A stream that cannot be written at all (closed: None; its pipe's reader gone; a full disk) never stops the
    command: what it would print is dropped and `lost` says why ("closed", "cut" or the error), for the exit
    status (exits.status_after_output). A run goes on and stores its results."""

    def __init__(self, stream: Callable[[], IO[str] | None]) -> None:
        self._stream = stream
        self.lost: str | None = None

    def write(self, text: str) -> int:
        stream = self._stream()
        if stream is None:
            self.lost = self.lost or "closed"
        if self.lost is not None or stream is None:
            return len(text)
        try:
            try:
                return stream.write(text)
            except UnicodeEncodeError:  # raised while encoding, before anything was written
                encoding = getattr(stream, "encoding", None) or "ascii"
                plain = text.translate(_PLAIN).encode(encoding, errors="replace").decode(encoding)
                return stream.write(plain)
        except OSError as error:
            self._lose(stream, error)
            return len(text)

    def flush(self) -> None:
        stream = self._stream()
        if stream is not None and self.lost is None:
            try:
                stream.flush()
            except OSError as error:
                self._lose(stream, error)

    def _lose(self, stream: IO[str], error: OSError) -> None:
        self.lost = "cut" if error.errno == errno.EPIPE else (error.strerror or str(error)).lower()
        discard_from_now_on(stream)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self._stream(), name)


def discard_from_now_on(stream: IO[str] | None) -> None:
    """Point `stream`'s descriptor at /dev/null, so that what is still buffered in it, which Python flushes at
    exit, goes nowhere instead of raising again (Python's advice in the note on SIGPIPE of its signal module)."""
    try:
        descriptor = stream.fileno() if stream is not None else None
    except (OSError, ValueError, AttributeError):  # no descriptor: a test's in-memory stream
        return
    if descriptor is not None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)


STDOUT = _Degrading(lambda: sys.stdout)
STDERR = _Degrading(lambda: sys.stderr)
# rich writes through write() and flush() and reads the stream's isatty, fileno and encoding, which __getattr__ hands
# on: a stand-in for IO[str] that is not one of its subclasses
console = Console(file=cast(IO[str], STDOUT))
# messages and paths stay whole lines in logs; panels still fit
errors = Console(file=cast(IO[str], STDERR), soft_wrap=True)


def width_when_piped() -> int:
    """The columns of the terminal the command was typed in, where its output goes to a pipe or a file (`| less`,
    `| tee run.log`): the same lines as on the screen, not 200-column paragraphs on an 80-column one; with no
    terminal at all (a cron job, CI), WIDTH_WHEN_PIPED."""
    for stream in (sys.stderr, sys.stdin, sys.stdout):
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):  # not a terminal, closed, or a stand-in without a descriptor
            continue
    return WIDTH_WHEN_PIPED


for _stream in (console, errors):
    if not _stream.is_terminal and "COLUMNS" not in os.environ:
        _stream.width = width_when_piped()
