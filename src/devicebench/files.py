"""The files devicebench reads and writes, checked in one place: only regular files are read (a FIFO or a device
would hang a read or never end one), and no output ever destroys an input.

    python -c "from devicebench.files import require_regular_file; require_regular_file('/dev/zero', 'an image')"
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnusableFile(ValueError):
    """A path devicebench will not read or write; the message names it, what it is, and what to do."""


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a stat mode describes, in words: "a regular file", "a FIFO (named pipe)", ..."""
    return next((words for test, words in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else
                "not a regular file")


def require_regular_file(path: str | os.PathLike, what: str) -> None:
    """Raise UnusableFile unless `path` (links followed) is a regular file; FileNotFoundError when it is missing.

    `what` names the file for the message: "the results database", "the price file", "an image"."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise UnusableFile(f"{what} {Path(path)} is {file_kind(mode)}, not a regular file: devicebench reads only "
                           "regular files (a pipe or a device could hang it); name a file")
