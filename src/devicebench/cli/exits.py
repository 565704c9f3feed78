"""How a command ends: its exit statuses, the one line on stderr that ends a refused or stopped command, and what an
error no command handled, or an output that was lost, becomes.

    devicebench history --last 0; echo $?
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from typing import IO, Any

import typer
from rich.markup import escape

from devicebench import stopping
from devicebench.cli.output import STDOUT, errors
from devicebench.errors import DevicebenchError

EXIT_FAILED_RUN = 1  # some run failed or ran out of memory; its reason is in the table and the JSON
EXIT_USAGE = DevicebenchError.exit_status  # 2: the request itself was wrong: unknown workload, device, suite or value
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); everything finished before it is kept
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM (kill, a scheduler, a container), kept the same way
EXIT_HUNG_UP = 129  # 128 + SIGHUP: the terminal closed, kept the same way (see devicebench.stopping)
EXIT_OUTPUT_LOST = 120  # standard output closed (`>&-`) or failing: Python's own status when it cannot flush it
EXIT_OUTPUT_CUT = 141  # 128 + SIGPIPE: the reader of the pipe left (`| head -1`), as the shell shows `yes | head -1`
DEBUG_VARIABLE = "DEVICEBENCH_DEBUG"  # set to 1: an unexpected error propagates with its traceback
KEPT = "what finished before is kept; nothing was left half-done"  # a command that says nothing more precise


def status_after_output(code: Any) -> Any:
    """The exit status of a command whose standard output was lost: its own when it failed (a failed run's 1
    says more), else 141 for a pipe its reader left, silently as other tools end, or 120 and one line on stderr
    for a closed or failing output, which the user may not know of."""
    lost = STDOUT.lost
    if lost is None or code not in (None, 0):
        return code
    if lost == "cut":
        return EXIT_OUTPUT_CUT
    reason = "is closed" if lost == "closed" else f"could not be written ({lost})"
    errors.print(
        f"[bold red]error:[/] standard output {escape(reason)}: the command ran to its end (what it stores "
        "is kept) but its output could not be printed; to discard the output, send it to /dev/null",
        highlight=False,
    )
    return EXIT_OUTPUT_LOST


def opened_file(stream: IO[str] | None) -> tuple[int, int] | None:
    """(device, inode) of the file `stream` writes to; None when it has no descriptor."""
    try:
        status = os.fstat(stream.fileno())  # type: ignore[union-attr]
    except (OSError, ValueError, AttributeError):
        return None
    return status.st_dev, status.st_ino


def cut_by_a_library(stdout: IO[str] | None, opened: tuple[int, int] | None) -> bool:
    """Whether the 1 a command ended with is click's or rich's answer to EPIPE, met while printing help or usage
    (their own consoles, not ours): click wraps sys.stdout to ignore the flush at exit, rich points descriptor 1
    at /dev/null; each then exits 1."""
    if sys.stdout is not stdout and getattr(sys.stdout, "wrapped", None) is stdout:
        return True
    devnull = os.stat(os.devnull)
    return opened not in (None, (devnull.st_dev, devnull.st_ino)) and opened_file(stdout) == (
        devnull.st_dev,
        devnull.st_ino,
    )


def explained(error: Exception) -> tuple[str, int]:
    """The one line and the exit status for an unexpected exception no command handled itself."""
    if isinstance(error, RecursionError):
        return (
            "the input is nested too deeply to read (RecursionError); give a file that nests less deeply",
            EXIT_USAGE,
        )
    if isinstance(error, OSError):
        path = error.filename if error.filename is not None else "a file"
        reason = (error.strerror or str(error)).lower()
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return (
                f"cannot write {path}: {reason}; free some space, or write elsewhere (--db, --json, --out)",
                EXIT_FAILED_RUN,
            )
        if error.errno == errno.EROFS:
            return f"cannot write {path}: {reason}; name a path on a writable disk", EXIT_FAILED_RUN
        if error.errno in (errno.EACCES, errno.EPERM):
            return (
                f"cannot use {path}: {reason}; change its permissions, or name a path you may read and write",
                EXIT_FAILED_RUN,
            )
        return f"cannot use {path}: {reason}", EXIT_FAILED_RUN
    detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return (
        f"devicebench hit an unexpected error: {detail}\nThis is a bug in devicebench: please report it, with the "
        f"command you ran, to its issue tracker; run again with {DEBUG_VARIABLE}=1 to see the traceback.",
        EXIT_FAILED_RUN,
    )


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print `message` as an error and return the Exit to raise with `code`."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # '[report]' is text, not markup
    return typer.Exit(code)


def stopped(kept: str) -> typer.Exit:
    """Print the line that ends a command a stop signal stopped ("stopped by SIGTERM; `kept`") and return the Exit
    with its status: 130 for Ctrl-C (also when no signal was seen: a KeyboardInterrupt raised by code), 143, 129."""
    number = stopping.received() or signal.SIGINT
    return fail(f"{stopping.described(number)}; {kept}", stopping.exit_status(number))
