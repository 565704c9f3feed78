"""Stopping devicebench from outside: the one rule for Ctrl-C (SIGINT), SIGTERM (kill, Slurm, Kubernetes,
`docker stop`, `timeout`) and SIGHUP (the terminal closed). Each means "stop, and keep what is finished".

The first of them raises KeyboardInterrupt in the main thread, as Ctrl-C always did: the current step ends, the
current run is marked `interrupted`, every finished epoch stays in the database and the JSON, and the command exits
with 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP.

A second one ends the process at once, with the same statuses and one line saying what was kept. Python runs signal
handlers only between bytecodes of the main thread, so a main thread inside one long torch operation (minutes, for
a huge model) would never run them; but the C-level handler also writes each signal's number to the wakeup fd
(signal.set_wakeup_fd), and a daemon thread reading it sees the second signal whatever the main thread does. It
calls os._exit: no exit handler runs (torch's printed a traceback when two Ctrl-C came 50 ms apart), nothing waits.
That loses nothing finished: the database commits each epoch as it ends, and every file is written atomically.

A signal that was ignored when devicebench started (`nohup` ignores SIGHUP, a shell's background job SIGINT) stays
ignored. Only the CLI installs this (around every command); a library call of devicebench.run() changes no handler.

    python -c "import devicebench.stopping as s; print(s.described(15), s.exit_status(15))"
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
NOTICE_AFTER_S = 2.0  # the first signal has not stopped the work by then: say that a second one stops it at once
DEFAULT_KEPT = (
    "what finished before is kept (the results database holds every finished epoch); no file was left half-written"
)

_active: list[int] | None = None  # the signals received while handling is installed; None when it is not
_kept = [DEFAULT_KEPT]  # what the line of a hard exit says was kept: the innermost kept_on_hard_exit's
_exiting = threading.Lock()  # one line and one exit, whichever thread gets there first


def exit_status(number: int) -> int:
    """The shell's status for a process stopped by signal `number`: 128 + it (130, 143, 129)."""
    return 128 + number


def named(number: int) -> str:
    """How a person knows signal `number`."""
    if number == signal.SIGINT:
        return "Ctrl-C (SIGINT)"
    if hasattr(signal, "SIGHUP") and number == signal.SIGHUP:
        return "SIGHUP (the terminal closed)"
    return signal.Signals(number).name


def described(number: int | None) -> str:
    """What happened to the work, for the one line a stopped command ends with: "stopped by SIGTERM"."""
    if number is None or number == signal.SIGINT:
        return "interrupted"
    return f"stopped by {named(number)}"


def received() -> int | None:
    """The first stop signal received while handling is installed, or None: an error raised after one is part of
    the stopping (a loader worker that the same signal killed), not a failure of its own."""
    return _active[0] if _active else None


@contextlib.contextmanager
def handling() -> Iterator[list[int]]:
    """While inside, SIGINT, SIGTERM and SIGHUP each raise KeyboardInterrupt in the main thread the first time and
    end the process at once the second. Yields the list of the stop signals received, in order (for the exit status).

    Re-entrant: inside an active one, it yields the same list. Outside the main thread nothing changes."""
    global _active
    if _active is not None:
        yield _active
        return
    signals: list[int] = []

    def interrupt(number: int, frame: object) -> None:
        signals.append(number)
        if len(signals) == 1:
            raise KeyboardInterrupt  # the second is the watcher's: it exits even while this thread is blocked

    if threading.current_thread() is not threading.main_thread():  # Python installs handlers only there
        yield signals
        return
    previous = {
        number: signal.signal(number, interrupt)
        for number in STOP_SIGNALS
        if signal.getsignal(number) is not signal.SIG_IGN
    }
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    wakeup_before = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(reader,), name="devicebench-stop", daemon=True).start()
    _active = signals
    try:
        yield signals
    finally:
        _active = None
        signal.set_wakeup_fd(wakeup_before)
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        writer.close()  # the watcher reads the end of it and stops


@contextlib.contextmanager
def kept_on_hard_exit(text: str) -> Iterator[None]:
    """While inside, a second stop signal says `text` (what was kept) instead of the general line."""
    _kept.append(text)
    try:
        yield
    finally:
        _kept.remove(text)


def _forget_in_child() -> None:
    """A forked child (a loader worker) inherits the wakeup fd: its signals must not land in the parent's socket,
    where one SIGTERM to the process group would count twice and end the parent at once."""
    global _active
    if _active is not None:
        _active = None
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _watch(reader: socket.socket) -> None:
    """Read the signal numbers the C-level handler writes; exit the process on the second stop signal."""
    first: int | None = None  # the first stop signal's number
    with reader:
        while True:
            try:
                data = reader.recv(64)
            except TimeoutError:  # still working a while after the first: say how to stop at once
                assert first is not None  # the timeout is set only once the first stop signal came
                _say(
                    f"devicebench: {named(first)} received; stopping after the current step. Send it again to stop "
                    "at once."
                )
                reader.settimeout(None)
                continue
            except OSError:
                return
            if not data:  # handling ended
                return
            for number in data:
                if number not in STOP_SIGNALS:  # SIGCHLD, for torch's loader workers
                    continue
                if first is not None:
                    _exit_now(number)
                first = number
                reader.settimeout(NOTICE_AFTER_S)


def _exit_now(number: int) -> None:
    with _exiting:
        _say(f"error: a second {named(number)} stopped devicebench at once; {_kept[-1]}")
        os._exit(exit_status(number))


def _say(line: str) -> None:
    """One line on stderr, written directly: the main thread may hold sys.stderr's lock, or be anywhere else."""
    with contextlib.suppress(OSError):  # the terminal is gone (SIGHUP): the status still says it
        os.write(2, (line + "\n").encode("ascii", errors="replace"))
