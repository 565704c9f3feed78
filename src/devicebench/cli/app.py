"""The `devicebench` click group: its commands made from their modules on first use, and the error boundary every
command runs inside, which turns what escapes a command into one line on stderr and an exit status.

    devicebench --help
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import signal
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.exceptions import TyperException

try:  # a newer typer (0.29) carries its own click (typer._click), which its classes derive from, and installs none
    from typer import _click as click
except ImportError:  # an older typer runs on the click package, its dependency
    import click  # type: ignore[no-redef]

from devicebench import stopping
from devicebench.cli.exits import (
    DEBUG_VARIABLE,
    KEPT,
    cut_by_a_library,
    explained,
    fail,
    opened_file,
    status_after_output,
    stopped,
)
from devicebench.cli.output import STDERR, STDOUT, console, discard_from_now_on
from devicebench.errors import DevicebenchError
from devicebench.version import __version__

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
        "Compare stored runs across devices and machines: medians with spread, speedups with rank intervals of stated level.",
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
        "computes natively, memory and host-to-device GB/s) and its run-to-run variation, and store "
        "them for this machine, beside the datasheet's figures.",
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


class _LazyCommands(MutableMapping[str, click.Command]):
    """The group's commands by name, as click's `Group.commands`: a command of COMMANDS is made from its module the
    first time it is looked up; iterating names them all, in COMMANDS' order, without importing any."""

    def __init__(self, made: Mapping[str, click.Command]) -> None:
        self._made = dict(made)  # those whose module was imported before the group was made (as tests do)
        for command in self._made.values():
            command.help = paragraphs(command.help)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._made:
            if name not in COMMANDS:
                raise KeyError(name)
            self._made[name] = _command_from_module(name)
        return self._made[name]

    def __setitem__(self, name: str, command: click.Command) -> None:  # click's Group.add_command
        self._made[name] = command

    def __delitem__(self, name: str) -> None:  # a MutableMapping's, as click's own; devicebench removes none
        del self._made[name]

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
            return TyperCommand(name, help=COMMANDS[name][1])
        return self._made.get(name)


def paragraphs(help_text: str | None) -> str | None:
    """A command's docstring as paragraphs: its lines, wrapped at 120 columns in the source, joined within each
    paragraph (typer's rich help keeps every line break, so an 80-column screen broke `143` from `stopped by
    SIGTERM` mid-sentence); paragraphs stay apart."""
    return None if help_text is None else re.sub(r"(?<=\S)\n(?=\S)", " ", help_text)


def _command_from_module(name: str) -> click.Command:
    """Import the module of command `name`, which registers it on `app`, and make the click command as typer makes
    it. Ctrl-C (or SIGTERM) while importing (torch takes seconds) ends as one line, as during start-up
    (devicebench/__main__.py): nothing has started yet."""
    module = f"{__package__}.{COMMANDS[name][0]}"
    try:
        importlib.import_module(module)
    except KeyboardInterrupt:
        number = stopping.received() or signal.SIGINT
        raise fail(
            f"{stopping.described(number)} while starting; nothing was done", stopping.exit_status(number)
        ) from None
    for info in app.registered_commands:
        named = info.name or (info.callback and typer.main.get_command_name(info.callback.__name__))
        if named == name:
            command = typer.main.get_command_from_info(
                info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
            )
            command.help = paragraphs(command.help)  # as __init__ does for those made before
            return command
    for group_info in app.registered_groups:
        group = typer.main.get_group_from_info(
            group_info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=app.suggest_commands,
            rich_markup_mode=app.rich_markup_mode,
        )
        if group.name == name:
            return group
    raise LookupError(f"{module} registers no command {name!r}; correct devicebench.cli.app.COMMANDS")


# exits and usage errors, typer's and its click's: each already says what to do. An older typer's Exit and Abort are
# click's own; a newer typer's click exceptions are TyperExceptions
_PASSED_THROUGH = (typer.Exit, typer.Abort, TyperException, click.ClickException)


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
        self.lazy_commands = _LazyCommands(self.commands)
        self.commands = self.lazy_commands
        self._listing = False  # while the help lists the commands: stand-ins, not their modules

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # their names, not their commands: typer's own makes every one

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.lazy_commands.listed(cmd_name) if self._listing else self.commands.get(cmd_name)

    def main(self, *arguments: Any, **options: Any) -> Any:
        """Run the command; if its standard output could not be written (closed, cut by the pipe's reader, or
        failing) the command still ran to its end, and the exit status says what happened to its output."""
        for stream in (STDOUT, STDERR):
            stream.lost = None
        stdout = sys.stdout
        if stdout is None:  # started with descriptor 1 closed: Python leaves sys.stdout None
            STDOUT.lost = "closed"
        opened = opened_file(stdout)
        try:
            return super().main(*arguments, **options)
        except SystemExit as ending:
            code = ending.code
            if code == 1 and cut_by_a_library(stdout, opened):
                STDOUT.lost, code = "cut", None
            raise SystemExit(status_after_output(code)) from None

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
                raise stopped(KEPT) from None
            except Exception as error:
                if stopping.received() is not None:
                    raise stopped(KEPT) from None
                if isinstance(error, DevicebenchError):  # a refused request: its message says what to do instead
                    raise fail(str(error), error.exit_status) from None
                if os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0"):
                    raise
                if isinstance(error, OSError) and error.errno == errno.EPIPE:  # a plain print() into `| head`
                    STDOUT.lost = "cut"
                    discard_from_now_on(sys.stdout)
                    return None
                message, code = explained(error)
                raise fail(message, code) from None


# typer 0.29 shows a value's type beside every option, `<bool>` beside a flag too; before 0.29 it has no such
# method and shows none, so there is nothing to replace (the GPU machine's image has an older typer)
_typer_display_type = getattr(TyperOption, "display_type_rich", None)


def _flag_shows_no_type(option: TyperOption, ctx: click.Context) -> str | None:
    """What the help shows beside an option: its value's type (`<path>`), but nothing for a flag, which takes no
    value (typer shows `<bool>` beside --quiet, --dry-run and --help alike)."""
    assert _typer_display_type is not None  # installed below only where typer has it
    return None if option.is_flag and option.metavar is None else _plain_type(_typer_display_type(option, ctx))


def _plain_type(shown: str | None) -> str | None:
    """`<str>...` for what typer shows as `<list[str]>` (a repeatable option, several arguments): a reader of the
    help needs no Python type."""
    return None if shown is None else re.sub(r"<list\\?\[(\w+)\]>", lambda found: f"<{found[1].lower()}>...", shown)


def _argument_type(argument: TyperArgument, ctx: click.Context) -> str | None:
    assert _typer_argument_type is not None  # installed below only where typer has it
    return _plain_type(_typer_argument_type(argument, ctx))


if _typer_display_type is not None:  # every command's help, the group's and --help's own: typer offers no hook
    TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign, assignment]
_typer_argument_type = getattr(TyperArgument, "display_type_rich", None)  # as for options: typer 0.29 on
if _typer_argument_type is not None:
    TyperArgument.display_type_rich = _argument_type  # type: ignore[method-assign, assignment]


app = typer.Typer(
    cls=_ErrorBoundary,
    help="Measure how much faster deep-learning training runs on one device than another, and why.\n\n"
    "Trains the published CPU-vs-GPU experiments on every device this machine has, "
    "with one PyTorch engine, and prints throughput, epoch time, accuracy and the speedup with its spread.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


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
