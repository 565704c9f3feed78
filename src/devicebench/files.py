"""The files devicebench reads and writes, checked in one place: only regular files are read (a FIFO or a device
would hang a read or never end one), and no output ever destroys an input.

    python -c "from devicebench.files import require_regular_file; require_regular_file('/dev/zero', 'an image')"
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import stat
import sys
from pathlib import Path
from typing import Literal

import platformdirs

from devicebench.errors import DevicebenchError


class UnusableFile(DevicebenchError, ValueError):
    """A path devicebench will not read or write; the message names it, what it is, and what to do."""


# devicebench's own variables for each file or folder it keeps in the user's folders, and what each names
DB_VARIABLE = "DEVICEBENCH_DB"
DATA_VARIABLE = "DEVICEBENCH_DATA"
CALIBRATION_VARIABLE = "DEVICEBENCH_CALIBRATION_DIR"
_NAMED_BY = {
    DB_VARIABLE: "the results database file",
    DATA_VARIABLE: "the datasets' folder",
    CALIBRATION_VARIABLE: "the calibration folder",
}
# The variable through which a user names each of platformdirs' folders on Linux and the BSDs (macOS and Windows do
# not read them).
_XDG_VARIABLES = {"data": "XDG_DATA_HOME", "cache": "XDG_CACHE_HOME"}


def user_folder(kind: Literal["data", "cache"], what: str) -> Path:
    """devicebench's folder of `kind` in the user's folders (platformdirs), for `what` ("the results database").

    Where HOME is not set on a POSIX system (a service, `env -i`, a cron job, a container), Python would take the
    home folder from the password database: a guess (`/`, `/root`, a home that is not this session's), into which
    nothing is written. Then an $XDG_*_HOME naming the folder is used where platformdirs reads it, and otherwise
    UnusableFile names every variable that says where devicebench's files go."""
    home_given = bool(os.environ.get("HOME", "").strip())  # HOME="" would put the folder under the working folder
    xdg = _XDG_VARIABLES[kind] if sys.platform not in ("darwin", "win32") else None
    if os.name == "posix" and not home_given and not (xdg and os.path.isabs(os.environ.get(xdg, "").strip())):
        own = ", ".join(f"{variable} ({words})" for variable, words in _NAMED_BY.items())
        raise UnusableFile(
            f"HOME is not set, so devicebench will not guess where to keep {what}; set HOME"
            f"{f' or {xdg}' if xdg else ''}, or devicebench's own variables: {own}"
        )
    return Path(
        platformdirs.user_data_dir("devicebench") if kind == "data" else platformdirs.user_cache_dir("devicebench")
    )


def expanded(path: str | os.PathLike, what: str) -> Path:
    """`path` with a leading `~` or `~user` made the home folder, or UnusableFile naming `what` ("--db", "$DEVICEBENCH_DATA")
    where there is none to make it: `~nobody-here/x` names no folder, and Python's RuntimeError would end in a
    traceback."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "Could not determine home directory."
        user = Path(path).parts[0]
        raise UnusableFile(
            f"{what} {path}: {user} names no home folder on this machine (no such user, or no HOME); name the folder "
            "whole"
        ) from None


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a stat mode describes, in words: "a regular file", "a FIFO (named pipe)", ..."""
    return next(
        (words for test, words in _KINDS if test(mode)),
        "a regular file" if stat.S_ISREG(mode) else "not a regular file",
    )


def require_regular_file(path: str | os.PathLike, what: str) -> None:
    """Raise UnusableFile unless `path` (links followed) is a regular file; FileNotFoundError when it is missing.

    `what` names the file for the message: "the results database", "the price file", "an image"."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise UnusableFile(
            f"{what} {Path(path)} is {file_kind(mode)}, not a regular file: devicebench reads only "
            "regular files (a pipe or a device could hang it); name a file"
        )


class UnwritableFile(UnusableFile, OSError):
    """A path devicebench will not write (a device, a terminal, a read-only file); an OSError too, so that a caller
    that reports failed writes reports this one the same way."""


# --- what devicebench writes -------------------------------------------------------------------------------------


def _resolved(path: str | os.PathLike) -> Path:
    """`path` absolute, with every link followed (as far as the links exist)."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(path))))


def check_writable(path: str | os.PathLike, what: str) -> Path:
    """Raise UnusableFile unless `path` can be written as a whole file; return where the bytes will go.

    A link is followed (the link stays a link; the file it names is written). What exists there must be a regular
    file that may be written: a device (/dev/null, /dev/full), a pipe or a terminal (/dev/stdout) would be replaced
    by a plain file, and a read-only file would be replaced behind its mode's back (as root, or through the
    rename that every atomic write ends with). `what` names the path for the message: "--json", "the report"."""
    target = _resolved(path)
    try:
        status = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as error:
        raise UnwritableFile(
            f"cannot write {what} {Path(path)}: {error.strerror or error}; name another path"
        ) from None
    if stat.S_ISDIR(status.st_mode):
        raise UnwritableFile(f"cannot write {what} {Path(path)}: it is a folder; name a file inside it")
    if not stat.S_ISREG(status.st_mode):
        shown = f"{Path(path)}" + (f" (a link to {target})" if target != Path(os.path.abspath(path)) else "")
        raise UnwritableFile(
            f"cannot write {what} {shown}: it is {file_kind(status.st_mode)}, not a regular file; "
            "devicebench writes only regular files (it would replace this one with a plain file); "
            "name a file"
        )
    as_root = getattr(os, "geteuid", lambda: -1)() == 0  # root may write anything: the mode bits still say what the
    read_only = not status.st_mode & 0o222 if as_root else not os.access(target, os.W_OK)  # owner wants kept
    if read_only:
        raise UnwritableFile(
            f"cannot write {what} {Path(path)}: it is read-only (mode {stat.filemode(status.st_mode)})"
            f"; make it writable (chmod u+w {Path(path)}) or name another file"
        )
    return target


def write_atomically(path: str | os.PathLike, content: str | bytes) -> None:
    """Write `content` (text as UTF-8, line endings exactly as given) to `path` so that a crash mid-write leaves the
    previous file, never half a file, and a failed write (a full disk) leaves no `.partial` file behind.

    Refuses, with UnusableFile, what check_writable refuses; a link is written through and stays a link."""
    target = check_writable(path, "the file")
    partial = target.with_name(target.name + ".partial")
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def _inside(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _same_file(first: Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)  # hard links too
    except OSError:  # one of them does not exist (yet): compare where they lead
        return _resolved(first) == _resolved(second)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite file: a results database, in use or not


def _is_a_database(path: Path) -> bool:
    """Whether `path` is an SQLite file (a results database `--db` could name), by its first bytes."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # missing, or not readable: nothing devicebench could read as a database either
        return False


def check_outputs(
    outputs: dict[str, str | os.PathLike | None],
    inputs: dict[str, str | os.PathLike | None],
    *,
    input_folders: dict[str, str | os.PathLike | None] | None = None,
    kept_folders: dict[str, str | os.PathLike | None] | None = None,
    output_folders: dict[str, str | os.PathLike | None] | None = None,
) -> None:
    """The one rule for every file a command writes: no output destroys an input, or another output.

    `outputs` maps a flag ("--json") to the path it names; `inputs` maps a description ("the results database") to
    a file the command reads or keeps. `input_folders`: folders whose existing files are inputs (--data-dir);
    `kept_folders`: folders nothing may be written into (the calibration folder). Each output must also be
    writable (check_writable), and none may replace an SQLite file: a results database, even one this command does
    not use, is a file devicebench reads. `output_folders`: folders the command writes into (--tensorboard), none of
    which may be an input file. Raises UnusableFile naming both paths; None values are left out."""
    given = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    for flag, folder in (output_folders or {}).items():
        for name, source in inputs.items():
            if folder is not None and source is not None and _same_file(Path(folder), Path(source)):
                raise UnusableFile(
                    f"{flag} {folder} is {name}: it would be taken for a folder to write into; name another folder"
                )
    for flag, path in given.items():
        check_writable(path, flag)
        for name, source in inputs.items():
            if source is not None and _same_file(path, Path(source)):
                raise UnusableFile(f"{flag} {path} is {name}: writing there would destroy it; name another file")
        if _is_a_database(path):
            raise UnusableFile(
                f"{flag} {path} is an SQLite database (a devicebench results database, which --db can name): "
                "writing there would destroy it; name another file"
            )
        for name, folder in (input_folders or {}).items():
            if folder is not None and path.exists() and _inside(_resolved(path), _resolved(folder)):
                raise UnusableFile(
                    f"{flag} {path} is a file inside {name} {folder}: writing there would replace "
                    "it; name a file outside that folder"
                )
        for name, folder in (kept_folders or {}).items():
            if folder is not None and _inside(_resolved(path), _resolved(folder)):
                raise UnusableFile(
                    f"{flag} {path} is inside {name} {folder}, which devicebench keeps for itself; "
                    "name a file outside that folder"
                )
    flags = list(given)
    for index, flag in enumerate(flags):
        for other in flags[index + 1 :]:
            if _same_file(given[flag], given[other]):
                raise UnusableFile(
                    f"{flag} and {other} name the same file {given[flag]}: one would overwrite the "
                    "other; name two files"
                )


def module_sources(spec: str) -> list[Path]:
    """The source files that importing the MODULE of a `MODULE:FUNCTION` spec (`--model mypkg.models:build`) runs:
    each package's __init__.py and the module's own file, looked for as devicebench imports them (the current
    folder first, then sys.path), without importing anything. [] for a spec that names no such file (`--data
    synthetic`, a module only installed as a compiled extension keeps its file too)."""
    module, colon, _ = spec.partition(":")
    if not colon or not module:
        return []
    sources: list[Path] = []
    search = [os.getcwd(), *sys.path]
    for part in module.split("."):
        try:
            found = importlib.machinery.PathFinder.find_spec(part, search)
        except (ImportError, ValueError):  # a name no import could take ('..', '')
            return sources
        if found is None:
            return sources
        if found.has_location and found.origin:
            sources.append(Path(found.origin))
        search = list(found.submodule_search_locations or [])
    return sources


def database_files(path: str | os.PathLike) -> dict[str, Path]:
    """The results database and the files SQLite keeps beside it, as inputs for check_outputs."""
    path = Path(path)
    return {
        "the results database": path,
        **{
            f"the results database's {suffix} file": path.with_name(f"{path.name}-{suffix}")
            for suffix in ("wal", "shm", "journal")
        },
    }
