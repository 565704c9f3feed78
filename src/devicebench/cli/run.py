"""`devicebench run`: train workloads on devices and print the comparison.

devicebench run --help
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional, cast

import typer
from rich.console import RenderableType
from rich.text import Text

from devicebench import stopping
from devicebench.cli import (
    EXIT_FAILED_RUN,
    DatabaseOption,
    app,
    check_output_file,
    check_outputs_or_fail,
    console,
    errors,
    fail,
    open_store,
)
from devicebench.cli.compare import WideOption
from devicebench.cli.session import (
    BudgetOption,
    DataDirOption,
    DataOption,
    DevicesOption,
    JsonOption,
    ModeOption,
    Outcome,
    QuietOption,
    RepeatsOption,
    SeedOption,
    SessionJson,
    SetOption,
    TensorBoardOption,
    ThreadsOption,
    check_paths,
    duration_seconds,
    exit_for,
    plan_or_fail,
    report_json,
    train_and_show,
    warn_if_busy,
    write_json_first,
)
from devicebench.recording import StoreReporter
from devicebench.report.plan import plan_notes, plan_table
from devicebench.report.tables import comparison_tables, one_device, one_device_tables
from devicebench.results.compare import compare
from devicebench.results.schema import Result, write_atomically
from devicebench.results.store import Store

if TYPE_CHECKING:  # only named in annotations; what imports torch is imported where it runs, so `run --help` need not
    from devicebench.config import RunConfig, SuiteName
    from devicebench.planning import Plan

# Options only `run` takes; the others it shares with the other training commands (devicebench.cli.session).
WorkersOption = Annotated[
    Optional[int],
    typer.Option(
        help="Loader processes that read, decode and augment images (0: the training process does it between "
        "steps). Default: 0 for in-memory data without augmentation, else one per core up to 4.",
        show_default=False,
    ),
]
PrecisionOption = Annotated[
    str,
    typer.Option(
        help="Tuned mode: auto (try bf16 where the device computes it natively, keep it if faster), fp32 or bf16."
    ),
]
CompileOption = Annotated[
    str,
    typer.Option(
        "--compile", help="Tuned mode: torch.compile on (always), off, or auto (tried on GPUs, kept if faster)."
    ),
]


@app.command()
def run(
    workloads: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Workloads to run (names or patterns such as 'mnist-*'); none = the suite's.", show_default=False
        ),
    ] = None,
    suite: Annotated[
        Optional[str],
        typer.Option(
            help="quick: every workload, reduced (the default with no names); "
            "seeds: the published settings (the default with names).",
            show_default=False,
        ),
    ] = None,
    devices: DevicesOption = "auto",
    epochs: Annotated[
        Optional[int], typer.Option(help="Epochs per run; the first is warm-up.", show_default=False)
    ] = None,
    batch_size: Annotated[
        Optional[str],
        typer.Option(
            help="Samples per step (default: the seed's), or auto: for a throughput question, double it while that "
            "gains 5% or more (out of memory is caught and backed off from); marked in every table.",
            show_default=False,
        ),
    ] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(help="Cap on training steps per epoch.", show_default=False)
    ] = None,
    max_eval_steps: Annotated[
        Optional[int],
        typer.Option(help="Cap on evaluation batches per epoch (default: --max-steps, if given).", show_default=False),
    ] = None,
    budget: BudgetOption = None,
    repeats: RepeatsOption = 1,
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    data: DataOption = "auto",
    data_dir: DataDirOption = None,
    workers: WorkersOption = None,
    overrides: SetOption = None,
    target_accuracy: Annotated[
        Optional[float],
        typer.Option(help="Record the time to reach this test accuracy (a fraction, e.g. 0.98).", show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Your own model: MODULE:FUNCTION that returns a torch.nn.Module (imported from this folder or the "
            "installed packages), trained on --data MODULE:FUNCTION, which returns a devicebench.TensorData, a "
            "torch Dataset, a (train, test) pair of them, or (x_train, y_train, x_test, y_test).",
            show_default=False,
        ),
    ] = None,
    loss: Annotated[
        str,
        typer.Option(
            help="With --model: cross_entropy, binary_cross_entropy, mse, l1, or MODULE:NAME of a loss (a torch loss "
            "class or a function (outputs, targets) -> loss)."
        ),
    ] = "cross_entropy",
    optimizer: Annotated[
        str,
        typer.Option(
            help="With --model: adam, adamw or sgd (learning rate 1e-3; --set learning_rate=0.01 changes it), or "
            "MODULE:NAME of a function (or optimizer class) taking the model's parameters."
        ),
    ] = "adam",
    mode: ModeOption = "seed",
    precision: PrecisionOption = "auto",
    compile_choice: CompileOption = "auto",
    nproc: Annotated[
        int,
        typer.Option(
            help="Train in N processes at once through torchrun (one device each: --devices cpu, cuda or all-gpus), "
            "data-parallel with DistributedDataParallel."
        ),
    ] = 1,
    per_device_batch: Annotated[
        bool,
        typer.Option(
            "--per-device-batch", help="With --nproc: --batch-size is each process's batch, not the global one."
        ),
    ] = False,
    nnodes: Annotated[
        int,
        typer.Option(
            help="With --nproc: machines training together (run the same command on each, with its --node-rank)."
        ),
    ] = 1,
    node_rank: Annotated[int, typer.Option(help="This machine's number, 0 to --nnodes - 1.")] = 0,
    rdzv_endpoint: Annotated[
        Optional[str],
        typer.Option(
            help="HOST:PORT of machine 0 that every machine can reach (several machines; default on one machine: a "
            "free local port).",
            show_default=False,
        ),
    ] = None,
    json_file: JsonOption = None,
    quiet: QuietOption = False,
    db: DatabaseOption = None,
    tensorboard: TensorBoardOption = None,
    save: Annotated[
        Optional[Path],
        typer.Option(
            help="Save the trained model, with the preprocessing it was trained with, for `devicebench predict` "
            "(one workload only; the model of the last run that finished).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan (every workload on every device, with its batch size, epochs, steps, "
            "data and settings) and stop: nothing is downloaded, loaded or trained. With --json, "
            "write the plan there.",
        ),
    ] = False,
    wide: WideOption = False,
) -> None:
    """Train workloads on each device and print throughput, epoch times, accuracy and the speedup vs CPU.

    [bold]devicebench run[/]: every workload, reduced (the quick suite), on every device.

    [bold]devicebench run mnist-cnn2 --devices cpu,cuda[/]: one workload at its published settings.

    [bold]devicebench run 'cifar*' --suite quick --repeats 3 --json out.json[/]: three repeats, saved.

    [bold]devicebench run catdog-original --data-dir pets/ --workers 2 --save pets.pt[/]: your images; keep the model.

    [bold]devicebench run mnist-cnn2 --mode tuned[/]: each device at its best; the table says what was chosen.

    [bold]devicebench run --model mypkg.models:build --data mypkg.data:load --epochs 3[/]: your own model.

    [bold]devicebench run --dry-run[/]: what would run, job by job, without running it.

    Exit status: 0 done, 1 a run failed or ran out of memory, 2 a bad request, 130 interrupted (Ctrl-C), 143
    stopped by SIGTERM, 129 by SIGHUP (the finished epochs are kept, as on Ctrl-C; a second signal stops at once).
    """
    from devicebench import machine  # here, not above: `run --help` answers without importing torch
    from devicebench.config import RunConfig

    if devices == "all-gpus":  # every local GPU, one process each
        if not machine.snapshot().cuda_devices:
            raise fail("--devices all-gpus: this machine has no GPU that torch can use (see `devicebench devices`)")
        nproc = machine.snapshot().cuda_devices if nproc == 1 else nproc
        devices = "cuda"
    given = (
        ("--node-rank", node_rank != 0),
        ("--rdzv-endpoint", rdzv_endpoint is not None),
        ("--per-device-batch", per_device_batch),
    )
    several = [flag for flag, present in given if present]
    if several and nproc * nnodes == 1:  # they would be ignored: say so rather than run something else than asked
        raise fail(
            f"{' and '.join(several)} {'is' if len(several) == 1 else 'are'} for training in several "
            "processes; add --nproc N (and --nnodes for several machines), or leave "
            f"{'it' if len(several) == 1 else 'them'} out"
        )
    auto = batch_size is not None and batch_size.strip().lower() == "auto"
    config = RunConfig(
        workloads=tuple(workloads or ()),
        suite=cast("SuiteName | None", suite),  # any text: RunConfig refuses one that names no suite, with the choices
        devices=devices,
        epochs=epochs,
        batch_size=None if auto else whole_number("--batch-size", batch_size),
        batch_size_auto=auto,
        max_steps=max_steps,
        max_eval_steps=max_eval_steps,
        budget_s=duration_seconds("--budget", budget),
        repeats=repeats,
        seed=seed,
        threads=threads,
        data=data,
        data_dir=str(data_dir) if data_dir else None,
        workers=workers,
        target_accuracy=target_accuracy,
        overrides=tuple(overrides or ()),
        mode=mode,
        precision=precision,
        compile=compile_choice,
        nproc=nproc,
        nnodes=nnodes,
        per_device_batch=per_device_batch,
        model=model,
        loss=loss,
        optimizer=optimizer,
    )
    if nproc * nnodes > 1:  # every process trains on one device of one kind: its own
        config = dataclasses.replace(config, devices=_one_device_kind(config.devices, config.nproc))
    job_plan = plan_or_fail(config, step_estimates=not dry_run)  # a dry run shows the plan: no FLOPs to count
    for name, reason in job_plan.skipped:
        errors.print(f"{name} is left out: it {reason}", highlight=False)
    check_outputs_or_fail(
        {"--json": json_file, "--save": save},
        db=db,
        data_dir=data_dir,  # before any work
        modules={"--model": model, "--data": data, "--loss": loss, "--optimizer": optimizer},
    )
    if dry_run:
        show_plan(job_plan, json_file)
        return
    if save is not None:
        selected = job_plan.workloads
        if len(selected) != 1:
            raise fail(f"--save keeps one model, but {len(selected)} workloads are selected; name one workload")
        if selected[0].trainer is not None:
            raise fail(f"--save keeps torch models; {selected[0].name} is not one")
        if model is not None:
            raise fail("--save keeps a workload's model for `devicebench predict`; your own model you save yourself")
        if selected[0].image_shape is None:  # `predict` classifies image files: a model of token ids has no use for one
            raise fail(f"--save keeps image models for `devicebench predict`; {selected[0].name} takes no images")
        check_output_file("--save", save)
    if nproc * nnodes > 1:
        if save is not None or tensorboard is not None:
            raise fail("--save and --tensorboard do not work with --nproc yet; run in one process to use them")
        exit_for(
            train_distributed(
                job_plan, config, node_rank, rdzv_endpoint, json_file=json_file, db=db, quiet=quiet, wide=wide
            )
        )
        return
    saved_before = _modified_ns(save)
    outcome = train_and_show(
        job_plan,
        json_file=json_file,
        quiet=quiet,
        db=db,
        tensorboard=tensorboard,
        save_to=save,
        tables=lambda result: run_tables(result, wide),
    )
    if save is not None and _modified_ns(save) not in (None, saved_before):
        errors.print(f"Model saved to {save}: `devicebench predict {save} IMAGE...` classifies images with it")
    elif save is not None and any(run.status == "ok" for run in outcome.result.runs):
        raise fail(
            f"the model was not saved to {save} (the error above says why); the run itself is kept", EXIT_FAILED_RUN
        )
    exit_for(outcome)


def run_tables(result: Result, wide: bool) -> Iterator[RenderableType]:
    """The answer first (per workload, how much faster a GPU would be here, and on what that rests), then the
    comparison tables, then a line per GPU run with what `devicebench estimate` would have said of it beforehand.
    Yielded one by one, so that the tables are shown before the roofline is fitted for those lines (seconds)."""
    from devicebench.report.answer import answer_parts  # the workload registry: torch

    rows = compare([result])
    # on one device (a machine with only a CPU), one table of every workload, not a one-row table each
    several = one_device(rows) and len(rows) > 1
    figures = one_device_tables(rows, wide=wide) if several else comparison_tables(rows, wide=wide)
    yield from answer_parts(rows) + figures
    if any(run.device.startswith("cuda") for run in result.runs):  # a CPU-only session imports no roofline
        from devicebench.estimate.against_measured import run_estimates
        from devicebench.report.estimate_plots import run_line

        for found in run_estimates(result):
            yield Text(run_line(found))  # no markup: a workload's name is text


def _modified_ns(path: Path | None) -> int | None:
    """When `path` was last written, in nanoseconds; None when it is no file."""
    return path.stat().st_mtime_ns if path is not None and path.is_file() else None


def train_distributed(
    job_plan: Plan,
    config: RunConfig,
    node_rank: int,
    rdzv_endpoint: str | None,
    *,
    json_file: Path | None,
    db: Path | None,
    quiet: bool,
    wide: bool = False,
) -> Outcome:
    """`run --nproc N`: start the ranks through torchrun, then store and show rank 0's result like any other."""
    from devicebench.launch import DistributedError, Launch, run_distributed

    try:
        launch = Launch(nproc=config.nproc, nnodes=config.nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint)
    except ValueError as error:
        raise fail(str(error)) from None
    check_paths(config.data_dir, json_file, db=db)
    store = open_store(db)  # a database that is not ours is refused here, before any process starts
    warn_if_busy()
    errors.print(
        f"Training on {launch.world_size} {config.devices} processes ({config.nproc} on this machine) "
        "through torchrun; rank 0 shows each epoch as it ends",
        highlight=False,
    )
    failure = None
    keeper = RankResultKeeper(store, json_file)
    with store:
        try:
            with (
                stopping.handling() as signals,
                stopping.kept_on_hard_exit(f"{store.path} holds every merged epoch, and the ranks stop by themselves"),
            ):
                # the signal is forwarded to the ranks, which hand in what they finished
                result = run_distributed(job_plan, launch, quiet=quiet, on_partial=keeper.keep, signals=signals)
        except DistributedError as error:
            failure, result = error, error.partial
        if result is None:
            if failure is not None:
                raise fail(str(failure), EXIT_FAILED_RUN) from None
            errors.print("This machine's ranks finished; the machine that ran rank 0 shows and stores the result")
            raise typer.Exit(0)
        keeper.finish(result)  # a failed run's finished epochs too
    json_failure = write_json_first(result, json_file)
    for table in run_tables(result, wide):
        console.print(table)
    report_json(json_file, json_failure)
    keeper.recorder.confirm()
    store_failure = None if keeper.recorder.failure is None else str(keeper.recorder.failure)
    if store_failure is None:
        errors.print(f"Runs stored in {store.path}")
    if failure is not None:
        raise fail(f"{failure}; the epochs that finished before are kept above and in {store.path}", EXIT_FAILED_RUN)
    return Outcome(result, json_file, store.path, store_failure)


class RankResultKeeper:
    """Stores a `--nproc` session as rank 0 merges it: the session, each run as it appears, each merged epoch as it
    ends (one commit each, as in one process), and each run's end once the ranks are done. A write that fails ends
    the storing, never the training (StoreReporter). With `json_file`, the `--json` file holds the session as far as
    it got after each of those (SessionJson), as in one process."""

    def __init__(self, store: Store, json_file: Path | None = None) -> None:
        self.recorder = StoreReporter(store)
        self.session_json = None if json_file is None else SessionJson(json_file)
        self.stored_epochs: dict[str, int] = {}  # run id: how many of its epochs are stored

    def keep(self, result: Result) -> None:
        """Store what `result`, the merged runs so far, holds that is not stored yet."""
        if self.recorder.result_id is None:
            self.recorder.session_started(result)
        for record in result.runs:
            if record.run_id not in self.stored_epochs:
                self.recorder.run_started(dataclasses.replace(record, status="running", error=None, epochs=[]))
                self.stored_epochs[record.run_id] = 0
            for epoch in record.epochs[self.stored_epochs[record.run_id] :]:
                self.recorder.epoch_finished(record, epoch)
            self.stored_epochs[record.run_id] = len(record.epochs)
        if self.session_json is not None:
            self.session_json.hold(result)

    def finish(self, result: Result) -> None:
        """Store the ranks' final `result`: every run's status, error and run-level figures."""
        self.keep(result)
        for record in result.runs:
            self.recorder.run_finished(record)


def _one_device_kind(devices: str, nproc: int) -> str:
    """cpu or cuda: every rank gets one device of one kind (cuda: rank i on cuda:i)."""
    from devicebench import machine

    gpus = machine.snapshot().cuda_devices
    kind = {"cpu": "cpu", "cuda": "cuda", "auto": "cuda" if gpus else "cpu"}
    if devices not in kind:
        raise fail(f"--nproc needs one kind of device for every process: --devices cpu or cuda, not {devices!r}")
    cores = os.cpu_count() or 1
    if kind[devices] == "cpu" and nproc > cores:  # each process is started: a typo must not start thousands
        raise fail(
            f"--nproc {nproc} on the CPU needs a core per process, but this machine has {cores}; use --nproc "
            f"{cores} or less"
        )
    if kind[devices] == "cuda" and nproc > gpus:
        raise fail(
            f"--nproc {nproc} needs {nproc} GPUs, but this machine has {gpus}; use "
            f"--nproc {gpus or 1}" + ("" if gpus else " with --devices cpu")
        )
    return kind[devices]


def show_plan(job_plan: Plan, json_file: Path | None) -> None:
    """`--dry-run`: the plan as a table, and as JSON where --json says (a path that cannot be written is refused
    before anything is shown)."""
    if json_file is not None:
        check_output_file("--json", json_file)
        write_atomically(json_file, json.dumps(job_plan.to_dict(), indent=2, default=str) + "\n")  # before display
    console.print(plan_table(job_plan))
    for note in plan_notes(job_plan):
        console.print(note)
    if json_file is not None:
        errors.print(f"Plan written to {json_file}")


def whole_number(flag: str, text: str | None) -> int | None:
    """`text` as an int, or a ConfigError saying what the flag takes."""
    from devicebench.config import ConfigError

    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: write a whole number, e.g. {flag} 64, or {flag} auto") from None
