"""The session every training command shares: the options `run`, `sweep`, `reproduce` and `estimate` take alike,
the plan or the usage error, training with every listener attached (store, screen, --json, TensorBoard), the tables
after it, and the exit status that says how the runs ended.

    from devicebench.cli.session import exit_for, plan_or_fail, train_and_show
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import RenderableType
from rich.markup import escape
from rich.text import Text

from devicebench import stopping
from devicebench.cli import (
    EXIT_FAILED_RUN,
    check_folder,
    check_output_file,
    check_outputs_or_fail,
    console,
    errors,
    fail,
    open_store,
)
from devicebench.engine.timing import process_age_s
from devicebench.events import ReporterGroup, RunReporter
from devicebench.files import UnusableFile
from devicebench.recording import StoreReporter
from devicebench.report.tables import comparison_tables
from devicebench.results.compare import compare
from devicebench.results.schema import Result, RunRecord

if TYPE_CHECKING:  # only named in annotations; what imports torch is imported where it runs, so `--help` need not
    from devicebench.config import RunConfig
    from devicebench.planning import Plan
    from devicebench.runner import FreshRepeat

# Options the training commands share, so that each means the same in every one.
DevicesOption = Annotated[
    str,
    typer.Option(
        help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda; with `run`, all-gpus: every local "
        "GPU training together, one process each."
    ),
]
RepeatsOption = Annotated[int, typer.Option(help="Runs per (workload, device), for the spread.")]
SeedOption = Annotated[int, typer.Option(help="Random seed: weights, data order, synthetic data.")]
ThreadsOption = Annotated[
    Optional[int], typer.Option(help="CPU threads for torch (default: torch's choice).", show_default=False)
]
DataOption = Annotated[
    str,
    typer.Option(
        help="auto (real if cached or downloadable, else synthetic, loudly), "
        "real, or synthetic; with --model, MODULE:FUNCTION returning your data."
    ),
]
DataDirOption = Annotated[
    Optional[Path],
    typer.Option(
        help="Your own images, laid out DIR/train/<class>/* and DIR/test/<class>/* (or training_set/, test_set/), "
        "for every image workload; or else the folder that caches downloaded datasets (default: "
        "$DEVICEBENCH_DATA, else the user cache).",
        show_default=False,
    ),
]
JsonOption = Annotated[
    Optional[Path], typer.Option("--json", help="Write every measurement to this JSON file.", show_default=False)
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or epoch lines.")]
ModeOption = Annotated[
    str,
    typer.Option(
        help="seed: the published settings (fp32, eager, the seed's batch size); tuned: each device at its best for the "
        "same model, data and samples (fused optimizer, channels_last, bf16 and torch.compile where a trial "
        "measures them faster, TF32 and device-resident data on GPUs), every choice recorded."
    ),
]
BudgetOption = Annotated[
    Optional[str],
    typer.Option(
        help="Time the whole run may take, e.g. 90s, 5m, 1h30m: each run's epochs are sized to its share from its "
        "first steps timed (warm-up and two steady epochs at least, 3 steps each at least), and a batch whose "
        "fewest steps cannot fit is halved. The quick suite has a 2m budget unless --max-steps is given.",
        show_default=False,
    ),
]
SetOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--set",
        help="Change a workload parameter, e.g. --set learning_rate=0.001 (repeatable; `devicebench list "
        "NAME` shows each workload's parameters). Runs with --set are never pooled with runs without.",
        show_default=False,
    ),
]
TensorBoardOption = Annotated[
    Optional[Path],
    typer.Option(
        help="Also log per-epoch loss, accuracy, throughput and the model graph here for TensorBoard "
        + escape("(needs pip install 'devicebench[tensorboard]')."),
        show_default=False,
    ),
]  # [..] is no markup


def check_paths(
    data_dir: str | None,
    json_file: Path | None,
    tensorboard: Path | None = None,
    *,
    db: Path | None = None,
    save: Path | None = None,
) -> None:
    """The paths a run reads from and writes to, checked before any training: finding out after an hour of it that
    the JSON cannot be written, or that a mistyped --data-dir was taken for a new download folder, is too late."""
    if json_file is not None:
        check_output_file("--json", json_file)
    check_folder("--tensorboard", tensorboard)
    check_folder("--data-dir", Path(data_dir) if data_dir else None, must_exist=True)
    check_outputs_or_fail(
        {"--json": json_file, "--save": save}, db=db, data_dir=data_dir, folders={"--tensorboard": tensorboard}
    )


def plan_or_fail(configs: RunConfig | list[RunConfig], *, step_estimates: bool = True) -> Plan:
    """The plan of `configs`, or the usage error that says why there is none (a bad request, a missing device: a
    ConfigError or a DeviceError, which the command line's boundary shows)."""
    from devicebench import planning

    return planning.plan(configs, step_estimates=step_estimates)


DURATION_UNITS = {"h": 3600, "m": 60, "s": 1}


def duration_seconds(flag: str, text: str | None) -> float | None:
    """`90s`, `5m`, `1h30m` or a plain number of seconds, in seconds; a ConfigError saying how to write it."""
    from devicebench.config import ConfigError

    if text is None:
        return None
    written = text.strip().lower()
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", written)
    if not written or parts is None:
        raise ConfigError(f"{flag} {text!r}: write a time such as 90s, 5m or 1h30m")
    return sum(float(amount) * unit for amount, unit in zip(parts.groups(), DURATION_UNITS.values()) if amount)


@dataclass
class Outcome:
    """A finished (or interrupted) `run`: the result, and where its numbers went."""

    result: Result
    json_file: Path | None
    store_path: Path
    store_failure: str | None  # why the database stopped taking runs, if it did


def train_and_show(
    job_plan: Plan,
    *,
    json_file: Path | None,
    quiet: bool,
    db: Path | None,
    tensorboard: Path | None,
    save_to: Path | None = None,
    tables: Callable[[Result], Iterable[RenderableType]] = lambda result: comparison_tables(compare([result])),
    apart: FreshRepeat | None = None,
) -> Outcome:
    """Train with every listener attached, print the tables, write the JSON: what `run`, `reproduce` and
    `sweep` share. Every failure to start (a bad path, a foreign database, a missing device) comes before
    any training. `apart`: how every run trains in a fresh process of its own (None: each repeat after the first,
    by launch.repeat_in_fresh_process)."""
    from devicebench import runner
    from devicebench.launch import repeat_in_fresh_process
    from devicebench.report.progress import RichReporter
    from devicebench.report.tensorboard import TensorBoardReporter

    check_paths(job_plan.jobs[0].data.data_dir if job_plan.jobs else None, json_file, tensorboard, db=db, save=save_to)
    listeners = []
    if tensorboard is not None:
        listeners.append(TensorBoardReporter(tensorboard))  # TensorBoardUnavailable says how to install it
    store = open_store(db)  # a database that is not ours is refused here, before any training
    recorder = StoreReporter(store)
    screen = RichReporter(errors, quiet=quiet)
    session_json = [SessionJson(json_file)] if json_file is not None else []
    kept = f"{store.path} holds every finished epoch" + (
        f", {json_file} every run finished before the current one" if json_file is not None else ""
    )
    warn_if_busy()
    with stopping.kept_on_hard_exit(kept + "; the current epoch is lost"):
        try:
            # the store hears each event first: an epoch is kept before it is shown, so Ctrl-C loses nothing printed
            # (the CLI group turns SIGTERM and SIGHUP into Ctrl-C around every command: devicebench.stopping)
            result = runner.run(
                job_plan,
                ReporterGroup(recorder, *session_json, screen, *listeners),
                save_to=save_to,
                spent_before_s=process_age_s(),
                fresh_repeat=apart or functools.partial(repeat_in_fresh_process, job_plan),  # a fresh process
                fresh_from=0 if apart else 1,
            )  # a budget counts the command's start-up too
        finally:
            screen.close()
            store.close()
        json_failure = write_json_first(result, json_file)  # a display that fails (a stdout that cannot encode a
        for table in tables(result):  # character, a closed pipe) cannot lose the JSON
            console.print(table)
        report_json(json_file, json_failure)
    recorder.confirm()
    if recorder.failure is None:
        errors.print(f"Runs stored in {store.path}")
    return Outcome(result, json_file, store.path, None if recorder.failure is None else str(recorder.failure))


def warn_if_busy() -> None:
    """Before training, one line when other processes keep the cores busy, by `devicebench check`'s rule and with
    its numbers: every CPU figure of the run will be low and vary."""
    from devicebench.check.cpu import busy_warning

    warning = busy_warning()
    if warning is not None:
        errors.print(Text(warning, style="yellow"), soft_wrap=False)  # Text: no markup; wrapped between words


class SessionJson(RunReporter):
    """`--json FILE` holds this session at every moment, not only at its end: written as the session starts and as
    each run starts and finishes (not at each epoch, which would add to the timed end-to-end figure), so a process
    ended at once (a second Ctrl-C, SIGKILL) never leaves the file of an earlier command behind.

    Each of those writes holds the session as it would be if it stopped there: the session `interrupted`, and a
    run still going `interrupted` with the error UNFINISHED and the epochs it had at that moment. `devicebench import`
    then takes it as any interrupted session; it would refuse a `running` run, which no finished file holds. The
    write after training (write_json_first) replaces it with the real end. A write that fails here is left for that
    one to report."""

    UNFINISHED = "the process was stopped before this run finished"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.result: Result | None = None

    def session_started(self, result: Result) -> None:
        self.result = result
        self._write()

    def run_started(self, record: RunRecord) -> None:
        self._write()

    def run_finished(self, record: RunRecord) -> None:
        self._write()

    def hold(self, result: Result) -> None:
        """Write `result`, the session as far as it got, in place of the one held so far (`--nproc`: rank 0's
        merged runs, read afresh after every epoch)."""
        self.result = result
        self._write()

    def _write(self) -> None:
        if self.result is None:
            return
        runs = [
            dataclasses.replace(run, status="interrupted", error=self.UNFINISHED, epochs=list(run.epochs))
            if run.status == "running"
            else run
            for run in self.result.runs
        ]
        with contextlib.suppress(OSError, UnusableFile):
            dataclasses.replace(self.result, runs=runs, interrupted=True).write_json(self.path)


def write_json_first(result: Result, json_file: Path | None) -> OSError | None:
    """Write `result` to `json_file` before anything is shown; the error, if the write failed, for report_json."""
    if json_file is None:
        return None
    try:
        result.write_json(json_file)
    except OSError as error:  # a full disk, say: the tables still hold every number
        return error
    return None


def report_json(json_file: Path | None, failure: OSError | None) -> None:
    """After the tables: where the JSON went, or why it could not be written."""
    if json_file is None:
        return
    if failure is not None:
        raise fail(f"could not write {json_file} ({failure}); the tables above hold the results", EXIT_FAILED_RUN)
    errors.print(f"Results written to {json_file}")


def interrupted_runs_text(outcome: Outcome) -> str:
    """What a stop left in the store (`. Stored as interrupted: run 3f9c2a1b (mnist-cnn2 on cpu) ...`) and how to
    remove it; "" where no run was stored as interrupted (the database stopped taking runs, or none had started)."""
    cut_short = [record for record in outcome.result.runs if record.status == "interrupted"]
    if not cut_short or outcome.store_failure is not None:
        return ""
    listed = ", ".join(f"{record.run_id[:8]} ({record.workload} on {record.device})" for record in cut_short)
    ids = " ".join(record.run_id[:8] for record in cut_short)
    return (
        f". Stored as interrupted: run{'s' if len(cut_short) > 1 else ''} {listed}, which compare and report keep "
        f"apart from finished runs; `devicebench forget {ids}` removes {'them' if len(cut_short) > 1 else 'it'}"
    )


def exit_for(outcome: Outcome) -> None:
    """Exit with the status that says how the runs ended (see `devicebench run --help`)."""
    result = outcome.result
    if outcome.store_failure is not None:
        raise fail(
            f"could not store the runs in {outcome.store_path} ({outcome.store_failure}); the tables above "
            "hold every number",
            EXIT_FAILED_RUN,
        )
    if result.interrupted:
        finished = sum(len(record.epochs) for record in result.runs)
        kept = f"{finished} finished epoch{'' if finished == 1 else 's'}"
        places = ["above", f"in {outcome.store_path}"] + ([f"in {outcome.json_file}"] if outcome.json_file else [])
        number = stopping.received() or signal.SIGINT  # none seen: a KeyboardInterrupt raised by code
        raise fail(
            f"{stopping.described(number)}; {kept} kept " + ", ".join(places) + interrupted_runs_text(outcome),
            stopping.exit_status(number),
        )
    if any(record.status in ("failed", "oom") for record in result.runs):
        raise typer.Exit(EXIT_FAILED_RUN)
