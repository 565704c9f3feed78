"""The `devicebench` command: flags become a config, one library call does the work, tables show it.

One module per command; each registers itself on `app` when imported, and is imported only when its command runs
(COMMANDS): most import torch, which takes seconds, and `--help`, `history` or `compare` should answer at once.

    devicebench --help
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup, TyperOption
from typer.exceptions import TyperException

from devicebench import stopping
from devicebench.engine.calibration_files import calibration_path
from devicebench.errors import DevicebenchError
from devicebench.files import check_outputs, database_files, module_sources
from devicebench.results.prices import Prices, parse_prices
from devicebench.results.schema import LARGEST_WHOLE_NUMBER
from devicebench.results.store import Store, default_db_path
from devicebench.results.store_errors import StoreError
from devicebench.version import __version__

if TYPE_CHECKING:
    import torch

EXIT_FAILED_RUN = 1  # some run failed or ran out of memory; its reason is in the table and the JSON
EXIT_USAGE = DevicebenchError.exit_status  # 2: the request itself was wrong: unknown workload, device, suite or value
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); everything finished before it is kept
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM (kill, a scheduler, a container), kept the same way
EXIT_HUNG_UP = 129  # 128 + SIGHUP: the terminal closed, kept the same way (see devicebench.stopping)
EXIT_OUTPUT_LOST = 120  # standard output closed (`>&-`) or failing: Python's own status when it cannot flush it
EXIT_OUTPUT_CUT = 141  # 128 + SIGPIPE: the reader of the pipe left (`| head -1`), as the shell shows `yes | head -1`
DEBUG_VARIABLE = "DEVICEBENCH_DEBUG"  # set to 1: an unexpected error propagates with its traceback


# Every command: the module of devicebench.cli that defines it, imported only when the command runs or its own --help
# is asked for, and the line `devicebench --help` lists it with: the first paragraph of its help, kept the same by
# tests/test_start_fast.py. Listing and `devicebench history` thus never import torch.
COMMANDS = {
    "devices": (
        "machine",
        "What this machine has: CPU, cores, ISA, memory, every GPU torch can see, and why there is none.",
    ),
    "list": ("machine", "The workloads: their seed experiment, dataset, size, default settings and published figures."),
    "data": ("data", "List, download, verify and remove the datasets the workloads train on."),
    "run": (
        "run",
        "Train workloads on each device and print throughput, epoch times, accuracy and the speedup vs CPU.",
    ),
    "sweep": (
        "sweep",
        "Train one workload at every point of a grid on each device, store every point, and print a "
        "throughput table per device with the wait-for-data share and the input-bound/compute-bound "
        "verdict of each point.",
    ),
    "predict": (
        "predict",
        "Print the class and its probability for each image, preprocessed exactly as in training "
        "(size, channels, scaling), with the 0.5 threshold for two-class models.",
    ),
    "reproduce": (
        "reproduce",
        "Train each seed's workloads at its published settings and print published vs "
        "measured here, side by side: hardware, throughput, speedup and accuracy; for a "
        "reference model, the public record's figures of it beside this machine's, "
        "in the unit each was published in. The runs are stored like any other.",
    ),
    "history": ("history", "The stored runs, oldest first: when, where, what, how fast and how accurate."),
    "compare": (
        "compare",
        "Compare stored runs across devices and machines: medians with spread, speedups with 95% intervals.",
    ),
    "export": ("transfer", "Write stored runs to a JSON file for `devicebench import` on another machine, or to CSV."),
    "import": (
        "transfer",
        "Add runs from other machines; runs already stored are skipped, so importing twice adds nothing.",
    ),
    "report": (
        "report",
        "Write an HTML report: per workload, epoch time, samples/s, speedup and accuracy charts, and "
        "the numbers with the machine and software behind each. One file, images inlined: it opens "
        "offline and can be mailed.",
    ),
    "calibrate": (
        "calibrate",
        "Measure each device's sustained ceilings (dense matmul TFLOP/s in each precision it "
        "computes natively, memory and host-to-device GB/s) and store them for this machine, "
        "beside the datasheet's figures.",
    ),
    "check": (
        "check",
        "Check this machine in under a minute: the PyTorch build against its GPUs and drivers, the "
        "CPU's threads, ISA and load, and on each device a short training run (does the work land "
        "there?), timing with and without synchronizing (does the clock wait for it?) and a short "
        "calibration against the datasheet (does it reach its rating?). Each check passes, warns or "
        "fails, with the figure measured and what to do.",
    ),
    "forget": ("forget", "Delete stored runs by id (as `history` shows them), with their epochs; asks first."),
    "estimate": (
        "estimate",
        "Estimate samples/s, epoch time, speedup and cost on GPUs that are not here, with an interval.",
    ),
}


class _LazyCommands(Mapping[str, click.Command]):
    """The group's commands by name, as click's `Group.commands`: a command of COMMANDS is made from its module the
    first time it is looked up; iterating names them all, in COMMANDS' order, without importing any."""

    def __init__(self, made: Mapping[str, click.Command]) -> None:
        self._made = dict(made)  # those whose module was imported before the group was made (as tests do)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._made:
            if name not in COMMANDS:
                raise KeyError(name)
            self._made[name] = _command_from_module(name)
        return self._made[name]

    def __setitem__(self, name: str, command: click.Command) -> None:  # click's Group.add_command
        self._made[name] = command

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._made

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._made]))

    def __len__(self) -> int:
        return len(dict.fromkeys([*COMMANDS, *self._made]))

    def listed(self, name: str) -> click.Command | None:
        """Command `name` as `devicebench --help` lists it: a stand-in carrying its line of COMMANDS, whether its
        module was imported or not, so that the listing is the same in every process."""
        if name in COMMANDS:
            return click.Command(name, help=COMMANDS[name][1])
        return self._made.get(name)


def _command_from_module(name: str) -> click.Command:
    """Import the module of command `name`, which registers it on `app`, and make the click command as typer makes
    it. Ctrl-C (or SIGTERM) while importing (torch takes seconds) ends as one line, as during start-up
    (devicebench/__main__.py): nothing has started yet."""
    module = f"{__name__}.{COMMANDS[name][0]}"
    try:
        importlib.import_module(module)
    except KeyboardInterrupt:
        number = stopping.received() or signal.SIGINT
        raise fail(
            f"{stopping.described(number)} while starting; nothing was done", stopping.exit_status(number)
        ) from None
    for info in app.registered_commands:
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
            )
    for group_info in app.registered_groups:
        group = typer.main.get_group_from_info(
            group_info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=app.suggest_commands,
            rich_markup_mode=app.rich_markup_mode,
        )
        if group.name == name:
            return group
    raise LookupError(f"{module} registers no command {name!r}; correct devicebench.cli.COMMANDS")


# exits and usage errors, typer's (it carries its own click) and click's: each already says what to do
_PASSED_THROUGH = (
    typer.Exit,
    typer.Abort,
    TyperException,
    click.exceptions.Exit,
    click.exceptions.Abort,
    click.ClickException,
)


class _ErrorBoundary(TyperGroup):
    """Every command runs inside this: what escapes a command becomes one line on stderr and an exit status.

    It sits in the click command itself, so the console script, `python -m devicebench` and the tests' CliRunner
    all go through it. Exits and click's usage errors pass through untouched. A request devicebench refuses (any
    DevicebenchError: a bad value, a file it will not use) ends as its message and its exit status, as `fail` ends
    it, so that no command wraps its calls to say so.

    It also installs the stop handling (devicebench.stopping) for every command: Ctrl-C, SIGTERM and SIGHUP reach
    each as KeyboardInterrupt, and one that a command did not handle itself ends here as one line and 130, 143 or
    129; so does any error raised after a stop signal (a loader worker the same signal killed, a closed terminal).

    Its commands are made from their modules on first use (COMMANDS): the listing of `--help` imports none."""

    def __init__(self, **attributes: Any) -> None:
        super().__init__(**attributes)
        self.commands: _LazyCommands = _LazyCommands(self.commands)
        self._listing = False  # while the help lists the commands: stand-ins, not their modules

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # their names, not their commands: typer's own makes every one

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.listed(cmd_name) if self._listing else self.commands.get(cmd_name)

    def main(self, *arguments: Any, **options: Any) -> Any:
        """Run the command; if its standard output could not be written (closed, cut by the pipe's reader, or
        failing) the command still ran to its end, and the exit status says what happened to its output."""
        for stream in (console.file, errors.file):
            stream.lost = None
        stdout = sys.stdout
        if stdout is None:  # started with descriptor 1 closed: Python leaves sys.stdout None
            console.file.lost = "closed"
        opened = _opened_file(stdout)
        try:
            return super().main(*arguments, **options)
        except SystemExit as ending:
            code = ending.code
            if code == 1 and _cut_by_a_library(stdout, opened):
                console.file.lost, code = "cut", None
            raise SystemExit(_status_after_output(code)) from None

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: click.Context) -> Any:
        with stopping.handling():
            try:
                return super().invoke(ctx)
            except _PASSED_THROUGH:
                raise
            except KeyboardInterrupt:
                raise stopped(_KEPT) from None
            except Exception as error:
                if stopping.received() is not None:
                    raise stopped(_KEPT) from None
                if isinstance(error, DevicebenchError):  # a refused request: its message says what to do instead
                    raise fail(str(error), error.exit_status) from None
                if os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0"):
                    raise
                if isinstance(error, OSError) and error.errno == errno.EPIPE:  # a plain print() into `| head`
                    console.file.lost = "cut"
                    _discard_from_now_on(sys.stdout)
                    return None
                message, code = _explained(error)
                raise fail(message, code) from None


_KEPT = "what finished before is kept; nothing was left half-done"  # a command that says nothing more precise


def _status_after_output(code: Any) -> Any:
    """The exit status of a command whose standard output was lost: its own when it failed (a failed run's 1
    says more), else 141 for a pipe its reader left, silently as other tools end, or 120 and one line on stderr
    for a closed or failing output, which the user may not know of."""
    lost = console.file.lost
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


def _opened_file(stream: IO[str] | None) -> tuple[int, int] | None:
    """(device, inode) of the file `stream` writes to; None when it has no descriptor."""
    try:
        status = os.fstat(stream.fileno())  # type: ignore[union-attr]
    except (OSError, ValueError, AttributeError):
        return None
    return status.st_dev, status.st_ino


def _cut_by_a_library(stdout: IO[str] | None, opened: tuple[int, int] | None) -> bool:
    """Whether the 1 a command ended with is click's or rich's answer to EPIPE, met while printing help or usage
    (their own consoles, not ours): click wraps sys.stdout to ignore the flush at exit, rich points descriptor 1
    at /dev/null; each then exits 1."""
    if sys.stdout is not stdout and getattr(sys.stdout, "wrapped", None) is stdout:
        return True
    devnull = os.stat(os.devnull)
    return opened not in (None, (devnull.st_dev, devnull.st_ino)) and _opened_file(stdout) == (
        devnull.st_dev,
        devnull.st_ino,
    )


def _discard_from_now_on(stream: IO[str] | None) -> None:
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


def _explained(error: Exception) -> tuple[str, int]:
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


_typer_display_type = TyperOption.display_type_rich


def _flag_shows_no_type(option: TyperOption, ctx: click.Context) -> str | None:
    """What the help shows beside an option: its value's type (`<path>`), but nothing for a flag, which takes no
    value (typer shows `<bool>` beside --quiet, --dry-run and --help alike)."""
    return None if option.is_flag and option.metavar is None else _typer_display_type(option, ctx)


TyperOption.display_type_rich = _flag_shows_no_type  # every command's help, the group's and --help's own


app = typer.Typer(
    cls=_ErrorBoundary,
    help="Measure how much faster deep-learning training runs on one device than another, and why.\n\n"
    "Trains the published CPU-vs-GPU experiments on every device this machine has, "
    "with one PyTorch engine, and prints throughput, epoch time, accuracy and the speedup with its spread.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
WIDTH_WHEN_PIPED = 200  # columns for logs and pipes, where rich would otherwise fold the 12-column tables

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
    status (_status_after_output). A run goes on and stores its results."""

    def __init__(self, stream: Callable[[], IO[str] | None]) -> None:
        self._stream = stream
        self.lost: str | None = None

    def write(self, text: str) -> int:
        stream = self._stream()
        if stream is None:
            self.lost = self.lost or "closed"
        if self.lost is not None:
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
        _discard_from_now_on(stream)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self._stream(), name)


console = Console(file=_Degrading(lambda: sys.stdout))
# messages and paths stay whole lines in logs; panels still fit
errors = Console(file=_Degrading(lambda: sys.stderr), soft_wrap=True)
for _stream in (console, errors):
    if not _stream.is_terminal and "COLUMNS" not in os.environ:
        _stream.width = WIDTH_WHEN_PIPED


def _version(value: bool) -> None:
    if value:
        console.print(f"devicebench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """devicebench: how much faster does this model train on that device, why, and what does it cost?"""


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print `message` as an error and return the Exit to raise with `code`."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # '[report]' is text, not markup
    return typer.Exit(code)


# Options that several commands share, so that each means the same everywhere.
DatabaseOption = Annotated[
    Optional[Path],
    typer.Option(
        "--db",
        help="Results database (default: $DEVICEBENCH_DB, else results.sqlite in the user data folder).",
        show_default=False,
    ),
]
WorkloadFilter = Annotated[
    Optional[str], typer.Option(help="Only this workload, or a pattern such as 'mnist-*'.", show_default=False)
]
MachineFilter = Annotated[
    Optional[str], typer.Option(help="Only this machine: its name, hostname or id prefix.", show_default=False)
]


def _run_count(value: int | None) -> int | None:
    """--last N: a count of runs, 1 or more (and one the database can compare with)."""
    if value is not None and not 1 <= value <= LARGEST_WHOLE_NUMBER:
        raise typer.BadParameter(f"{value} is no count of runs; give N ≥ 1 (at most {LARGEST_WHOLE_NUMBER:,})")
    return value


# a range of its own: typer's would print [1<=x<=9223372036854775807]
LastFilter = Annotated[
    Optional[int],
    typer.Option(
        metavar="N",
        callback=_run_count,
        show_default=False,
        help="Only the N most recently started runs that match (N ≥ 1).",
    ),
]
BaselineOption = Annotated[
    str,
    typer.Option(
        help="What speedups are measured against: a device on each row's own machine (cpu, cuda:0), "
        "or one fixed MACHINE/DEVICE such as laptop/cpu."
    ),
]
LocalDevicesOption = Annotated[
    str, typer.Option("--devices", help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda.")
]
PriceOption = Annotated[
    Optional[str],
    typer.Option(
        help="Hourly prices, e.g. cpu=0.10,cuda=2.50, or a TOML file with prices per machine: adds cost per million "
        "samples and cost against the baseline.",
        show_default=False,
    ),
]


def check_output_file(flag: str, path: Path) -> None:
    """Refuse, before any work, a file argument that cannot be written: a folder, or one in a missing folder."""
    with _unusable_names(flag, path):
        if path.is_dir():
            raise fail(f"cannot write {flag} {path}: it is a folder; name a file inside it")
        if not path.parent.is_dir():
            raise fail(f"cannot write {flag} {path}: folder {path.parent} does not exist; create it first")


def check_folder(flag: str, path: Path | None, *, must_exist: bool = False) -> None:
    """Refuse, before any work, a folder argument that names a file (or, with `must_exist`, nothing at all)."""
    if path is None:
        return
    with _unusable_names(flag, path):
        if path.exists() and not path.is_dir():
            raise fail(f"{flag} {path} is a file, not a folder; name a folder")
        if must_exist and not path.exists():
            raise fail(f"{flag} {path} does not exist: check the path, or create the folder first (mkdir -p {path})")


@contextlib.contextmanager
def _unusable_names(flag: str, path: Path) -> Iterator[None]:
    """A name the system refuses to look up (longer than it allows, say) is a refusal, not a traceback."""
    try:
        yield
    except OSError as error:
        raise fail(f"{flag} {path}: {error.strerror or error}; name another path") from None


def stopped(kept: str) -> typer.Exit:
    """Print the line that ends a command a stop signal stopped ("stopped by SIGTERM; `kept`") and return the Exit
    with its status: 130 for Ctrl-C (also when no signal was seen: a KeyboardInterrupt raised by code), 143, 129."""
    number = stopping.received() or signal.SIGINT
    return fail(f"{stopping.described(number)}; {kept}", stopping.exit_status(number))


def local_devices_or_fail(spec: str) -> list[torch.device]:
    """The devices `--devices` names, or a clear error (a DeviceError) listing those present."""
    from devicebench.devices import (
        resolve_devices,  # torch: only for the commands that use devices
    )

    return resolve_devices(spec)


def open_store(db: Path | None, *, writes: bool = True) -> Store:
    """The results database `--db` names (or the default one), or a clear error when it is not usable.

    A --db in a missing folder is refused as --json is (a mistyped folder is not made behind the user's back); the
    default database's folder is made. A command that `writes` takes the write lock once, waiting as a write would,
    so that a locked database is refused before any work; one that only reads opens a read-only database
    read-only."""
    if db is not None:
        with _unusable_names("--db", db):
            if not db.expanduser().parent.is_dir():
                raise fail(f"cannot open --db {db}: folder {db.expanduser().parent} does not exist; create it first")
    store = Store(default_db_path(db), reading_only=not writes)
    if writes:
        try:
            store.check_writable()
        except StoreError:
            store.close()
            raise
    return store


def check_outputs_or_fail(
    outputs: dict[str, Path | None],
    *,
    db: Path | None,
    reads: dict[str, Path | None] | None = None,
    data_dir: str | Path | None = None,
    modules: dict[str, str | None] | None = None,
) -> None:
    """Refuse, before any work, an output that would destroy an input or another output (files.check_outputs): the
    results database `db` names (or the default one, with SQLite's files beside it), the calibration files, the
    files of `data_dir`, `reads`, the files the command reads besides, and the source files of `modules`, the
    MODULE:FUNCTION specs it imports (--model, --data...). Every command that writes files asks."""
    sources: dict[str, Path | None] = {}
    for flag, spec in (modules or {}).items():
        found = module_sources(spec) if spec else []
        sources |= {
            f"the source of {flag} {spec}" + (f" ({source})" if len(found) > 1 else ""): source for source in found
        }
    check_outputs(
        outputs,
        {**database_files(default_db_path(db)), **(reads or {}), **sources},
        input_folders={"--data-dir": data_dir, "the calibration folder": calibration_path("machine").parent},
    )


def input_is_terminal() -> bool:
    """Whether a person can answer a question (a function of its own, which tests replace with a terminal)."""
    return sys.stdin.isatty()


def confirmed(question: str, *, yes: bool) -> bool:
    """Whether the user agrees to what the command just listed (`data remove`, `forget`): True with --yes; else
    asked on the terminal. Without a terminal to ask on (a script, a pipe) it is refused: nothing is deleted
    unasked."""
    if yes:
        return True
    if not input_is_terminal():
        raise fail("refusing to delete without confirmation when input is not a terminal; add --yes")
    return typer.confirm(question)


def prices_from(price: str | None) -> Prices | None:
    """`--price` read, or a clear error (a PriceError) saying how to write it."""
    return None if price is None else parse_prices(price)  # --price '' is refused, not ignored
