"""`devicebench estimate`: "should I rent a GPU?" answered from the CPU a user has, with an interval.

devicebench estimate resnet50 --on v100-sxm2,a100-80gb,h100-sxm --batch-size 128
devicebench estimate cifar10-mlp --on t4,h100-sxm --mode tuned --price t4=0.35,h100-sxm=2.50 --data synthetic
devicebench estimate --validate --json validation.json
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import psutil
import typer

from devicebench.check import cpu
from devicebench.choices import KERNEL_PRECISIONS, MODES, narrowed
from devicebench.cli import (
    DatabaseOption,
    app,
    check_output_file,
    check_outputs_or_fail,
    console,
    errors,
    fail,
    open_store,
)
from devicebench.cli.session import DataOption, exit_for, plan_or_fail, train_and_show
from devicebench.config import RunConfig
from devicebench.engine.timing import process_age_s
from devicebench.environment import machine_fingerprint
from devicebench.estimate.host import HOST_TERMS
from devicebench.estimate.points import EstimateError, RooflineFit, fit_roofline
from devicebench.estimate.roofline import PARAMETERS
from devicebench.estimate.targets import Estimate, estimates_for
from devicebench.estimate.validation import (
    DEFAULT_LEVEL,
    SCHEMES,
    Validation,
    coverage,
    median_absolute_error,
    validate,
)
from devicebench.report.estimates import (
    estimate_notes,
    estimate_table,
    group_table,
    validation_summary,
    validation_table,
)
from devicebench.results.datasheets import (
    DATASHEETS,
    RENTED_HOSTS,
    Datasheet,
    parse_targets,
)
from devicebench.results.prices import parse_named_prices
from devicebench.results.schema import RunRecord, write_atomically
from devicebench.results.store import ESTIMATE_BASELINE

if TYPE_CHECKING:  # only named in annotations
    from devicebench.planning import Job, Plan
    from devicebench.runner import FreshRepeat

DEFAULT_TARGETS = "t4,l4,a100-80gb,h100-sxm"
BASELINE_BUDGET_S = 20.0  # seconds of CPU training per workload for the baseline: a warm-up and two steady epochs
# The baseline is of the batch estimated where it can be: its epochs are cut to the fewest steps first, and its batch
# halved only where even those would take more than this many times its share (a machine over twice as slow as usual)
BASELINE_BATCH_SLACK = 2.0
# Of the logical cores: other processes' CPU time beyond this part slows a baseline on every core by about as much,
# more than the 15% a speedup is to move with load
OTHERS_BUSY_FRACTION = 0.15
MEASURED_TITLE = "devicebench's own GPU runs (committed under results/ and yours), scored apart from the record"
ESTIMATE_KIND = "devicebench-estimate"  # the JSON's kind: an estimate is never read back as a measurement


@app.command()
def estimate(
    workloads: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Workloads to estimate (names or patterns); none: every registered torch workload.", show_default=False
        ),
    ] = None,
    on: Annotated[
        str,
        typer.Option(
            "--on", help="GPUs to estimate, by catalog key, or all: " + ", ".join(sheet.key for sheet in DATASHEETS)
        ),
    ] = DEFAULT_TARGETS,
    price: Annotated[
        Optional[str],
        typer.Option(
            help="Prices per hour by GPU key, e.g. t4=0.35,h100-sxm=2.50: adds the cost of an epoch and of a run.",
            show_default=False,
        ),
    ] = None,
    data: DataOption = "auto",
    batch_size: Annotated[
        Optional[int], typer.Option(help="Batch size instead of the seed's.", show_default=False)
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Your own model: MODULE:FUNCTION returning an nn.Module; "
            "--data then names MODULE:FUNCTION returning your data.",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="seed: fp32 on the CUDA cores, as seed mode trains; tuned: TF32, or bf16 autocast where the GPU has it "
            "and it is faster, as tuned mode's trial would keep (torch.compile's gain is not modelled)."
        ),
    ] = "seed",
    precision: Annotated[
        Optional[str],
        typer.Option(
            help="Estimate at this precision instead of the mode's: " + ", ".join(KERNEL_PRECISIONS) + ".",
            show_default=False,
        ),
    ] = None,
    level: Annotated[
        float,
        typer.Option(
            help="The interval's level: the chance that a new measurement like the held-out points falls inside."
        ),
    ] = DEFAULT_LEVEL,
    host: Annotated[
        str,
        typer.Option(
            help="rented: the input pipeline runs on the cores a cloud rents each GPU with (see --host-cores); here: "
            "on this machine's cores, as if the GPU were put into it."
        ),
    ] = "rented",
    host_cores: Annotated[
        Optional[int],
        typer.Option(
            help="Cores of the GPU's host, for every GPU estimated (default: the catalog's instance per GPU).",
            show_default=False,
        ),
    ] = None,
    validate_points: Annotated[
        bool,
        typer.Option(
            "--validate",
            help="Score the roofline instead: every measured GPU point (the public record, the seeds' "
            "figures, committed runs, your database) predicted by fits made without it, its GPU and "
            "its model, with the errors and whether the intervals held them.",
        ),
    ] = False,
    with_imported: Annotated[
        bool,
        typer.Option(
            "--with-imported",
            help="Fit on GPU runs imported from other machines too (devicebench import); by default only this "
            "machine's own runs in the database are points.",
        ),
    ] = False,
    db: DatabaseOption = None,
    json_file: Annotated[
        Optional[Path],
        typer.Option(
            "--json", help=f"Also write the estimates to this JSON file (kind {ESTIMATE_KIND}).", show_default=False
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No progress while the CPU baseline trains.")] = False,
) -> None:
    """Estimate samples/s, epoch time, speedup and cost on GPUs that are not here, with an interval.

    Counts each kernel of a training step (FLOPs, bytes, launches), times this machine's input pipeline and CPU
    (about 20 s of training per workload, at a batch this machine can hold, stored like any run), and reads each
    GPU's datasheet through a roofline whose efficiencies are fitted on over 200 published and measured GPU figures.
    The interval is split-conformal at --level, from the errors of those figures predicted without their model, GPU
    or point. An estimate is never stored as a measurement.

    [bold]devicebench estimate resnet50 --on v100-sxm2,a100-80gb,h100-sxm --batch-size 128[/]
    """
    targets = parse_targets(on)
    prices = parse_named_prices(price, [sheet.key for sheet in DATASHEETS]) if price is not None else {}
    _check_choices(mode, precision, level, host, host_cores)
    if json_file is not None:
        check_output_file("--json", json_file)
    check_outputs_or_fail({"--json": json_file}, db=db, modules={"--model": model, "--data": data})
    with open_store(db, writes=False) as store:
        stored = store.results()
    here = machine_fingerprint()["machine_id"]
    imported = [result for result in stored if result.machine.get("machine_id") != here]
    if imported and not with_imported:  # anyone's export: it steers no estimate unless asked
        errors.print(
            f"{sum(len(result.runs) for result in imported)} runs in the database came from other machines "
            "(devicebench import): the fit leaves them out; --with-imported fits on them too",
            highlight=False,
        )
        stored = [result for result in stored if result.machine.get("machine_id") == here]
    fitted = fit_roofline(stored)
    if validate_points:
        _show_validation(fitted, level, json_file)
        return
    unpriced = sorted(set(prices) - {sheet.key for sheet in targets})
    if unpriced:
        raise fail(f"--price names {', '.join(unpriced)}, which --on does not estimate; add it to --on")
    estimable = [sheet for sheet in targets if sheet.fp32_tflops is not None]
    for sheet in targets:
        if sheet.fp32_tflops is None:
            errors.print(
                f"{sheet.key} is left out: no citable source gives its compute peaks ({sheet.source})", highlight=False
            )
    named = tuple(workloads or (() if model else ("*",)))
    config = RunConfig(
        workloads=named, devices="cpu", epochs=3, budget_s=None, batch_size=batch_size, data=data, model=model
    )
    job_plan = plan_or_fail(config)
    torch_jobs = tuple(job for job in job_plan.jobs if job.workload.trainer is None)
    for job in job_plan.jobs:
        if job.workload.trainer is not None:
            errors.print(
                f"{job.workload.name} is left out: it is not a torch model, so it has no kernels to count",
                highlight=False,
            )
    if not torch_jobs:
        raise fail("nothing to estimate: name a torch workload (see `devicebench list`) or give --model")
    job_plan = dataclasses.replace(
        job_plan,
        jobs=torch_jobs,
        # a budget counts the command's start-up (train_and_show), here mostly the fit, which load slows by tens of
        # seconds: the baseline's own seconds come on top, or its batch would shrink with the machine's load
        budget_s=BASELINE_BUDGET_S * len(torch_jobs) + process_age_s(),
        batch_slack=BASELINE_BATCH_SLACK,
        request={**job_plan.request, "purpose": ESTIMATE_BASELINE},  # compare and history leave it out
    )
    before = cpu.cpu_seconds()
    fell_back: dict[str, str] = {}  # by run id: why a baseline trained in this process
    outcome = train_and_show(
        job_plan,
        json_file=None,
        quiet=quiet,
        db=db,
        tensorboard=None,
        tables=lambda result: [],
        apart=baseline_apart(job_plan, fell_back),
    )
    load_note = others_load_note(before, cpu.cpu_seconds(), on_the_wall_clock=bool(fell_back))
    if outcome.result.interrupted or outcome.store_failure is not None:
        exit_for(outcome)  # Ctrl-C, or a database that stopped taking runs: what was kept, with its exit status
    estimates: list[Estimate] = []
    for job, run in zip(torch_jobs, outcome.result.runs):
        if run.status != "ok":
            errors.print(
                f"{job.workload.name} is left out: its CPU baseline did not finish ({run.error})", highlight=False
            )
            continue
        wall_reason = fell_back.get(run.run_id)
        if wall_reason is not None:
            errors.print(
                f"{job.workload.name}'s CPU baseline trained in this process, as no process of its own could "
                f"({wall_reason}): its rate is on the wall clock, which other processes' load moves",
                highlight=False,
            )
        try:
            estimates += estimates_for(
                job,
                run,
                estimable,
                fitted,
                prices,
                mode=narrowed(mode, MODES),  # checked above, as the precision is
                precision=None if precision is None else narrowed(precision, KERNEL_PRECISIONS),
                host_cores=_host_cores(estimable, host, host_cores),
                level=level,
                wall_reason=None if wall_reason is None else "it trained in this process, its OpenMP threads spinning",
            )
        except EstimateError as error:
            errors.print(f"{job.workload.name} is left out: {error}", highlight=False)
    errors.print(
        "The CPU baselines are stored, marked as the estimate's: `compare` and `history` leave them out.",
        highlight=False,
    )
    if not estimates:
        raise fail("no estimate could be made (the reasons are above)", 1)
    console.print(estimate_table(estimates))
    for note in estimate_notes(estimates, fitted):
        console.print(note, highlight=False)
    if load_note is not None:
        console.print(load_note, highlight=False)
    if json_file is not None:
        document = _document(fitted, estimates=[estimate.to_dict() for estimate in estimates])
        write_atomically(json_file, json.dumps(document, indent=2))
        errors.print(f"Estimates written to {json_file}")


def others_load_note(before: cpu.CpuSeconds, after: cpu.CpuSeconds, on_the_wall_clock: bool = False) -> str | None:
    """The line that says other processes kept cores busy while the CPU baseline trained, between `before` and
    `after`, and what its rate on the training thread's CPU time does and does not undo (`on_the_wall_clock`: a
    baseline's rate is on the wall clock, which nothing undoes); None where they left its cores free."""
    busy_cores = cpu.others_busy_cores(before, after)
    cores = psutil.cpu_count(logical=True) or 1
    if busy_cores <= OTHERS_BUSY_FRACTION * cores:
        return None
    said = (
        f"Measured under load: other processes kept {busy_cores:.1f} of this machine's {cores} logical cores busy "
        "while the CPU baseline trained (the GPU figures are not affected). "
    )
    if on_the_wall_clock:
        return said + (
            "A baseline on the wall clock is low, and its speedups high: stop other work (top shows it) and run the "
            "estimate again for speedups this machine repeats."
        )
    return said + (
        "Its rate is on its training thread's CPU time, which the waits load causes leave out; not what the other "
        "work takes from the caches and memory bandwidth this one shares, nor the wall-clock rate shown beside it, "
        "which is low. Stop other work (top shows it) for a wall-clock rate this machine repeats."
    )


# the CPU baseline's idle OpenMP threads sleep, in its own process only (libgomp reads this as a process starts):
# where they spin (the default), the training thread's waits for them are CPU time, which other processes' load
# lengthens as it does the wall clock
BASELINE_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


def baseline_apart(job_plan: Plan, fell_back: dict[str, str]) -> FreshRepeat:
    """How each CPU baseline trains: in a fresh process of `job_plan`'s threads, with BASELINE_ENVIRONMENT. Where
    no such process could (it could not start, or ended without handing in a record), the run's id goes into
    `fell_back` with the reason, and it trains in this process (None back), its rate then on the wall clock."""
    from devicebench.launch import repeat_in_fresh_process  # torch: imported only by a command that trains

    def train(job: Job, placeholder: RunRecord, budget_s: float | None) -> RunRecord | None:
        # its seconds of training come on top of its process's start-up, as they do of this command's: counted,
        # the start-up cut ResNet-50's baseline from batch 16 to 8
        record = repeat_in_fresh_process(
            job_plan, job, placeholder, budget_s, BASELINE_ENVIRONMENT, start_up_counts=False
        )
        if record.run_id != placeholder.run_id or record.status != "failed":  # its own record, or stopped
            return record
        fell_back[placeholder.run_id] = record.error or "its process handed in no record"
        return None

    return train


# More cores than any one host has (two 192-core EPYCs have 384, eight 60-core Xeons 480): a count past it is a typo
MOST_HOST_CORES = 4096


def _check_choices(mode: str, precision: str | None, level: float, host: str, host_cores: int | None) -> None:
    if mode not in MODES:
        raise fail(f"--mode {mode!r} is neither seed nor tuned")
    if precision is not None and precision not in KERNEL_PRECISIONS:
        raise fail(f"--precision {precision!r} is not one of {', '.join(KERNEL_PRECISIONS)}")
    if not 0.5 <= level < 1:
        raise fail(f"--level {level:g} is not a chance from 0.5 up to (not including) 1, e.g. 0.8 or 0.9")
    if host not in ("rented", "here"):
        raise fail(f"--host {host!r} is neither rented nor here")
    if host_cores is not None and (not 1 <= host_cores <= MOST_HOST_CORES or host == "here"):
        raise fail(
            f"--host-cores takes a whole number of cores from 1 up to {MOST_HOST_CORES}, and goes with --host rented"
            if not 1 <= host_cores <= MOST_HOST_CORES
            else "--host-cores and --host here contradict each other: give one"
        )


def _host_cores(targets: list[Datasheet], host: str, cores: int | None) -> dict[str, int | None]:
    """Each target's host cores: --host-cores, or the catalog's rented instance, or None (this machine)."""
    if host == "here":
        return {}
    return {
        sheet.key: cores
        if cores is not None
        else (RENTED_HOSTS[sheet.key].cores if sheet.key in RENTED_HOSTS else None)
        for sheet in targets
    }


def _show_validation(fitted: RooflineFit, level: float, json_file: Path | None) -> None:
    everything = {scheme: validate(fitted.fitter, scheme, level, fitted.held_out_s(scheme)) for scheme in SCHEMES}
    # devicebench's own GPU runs are scored apart from the published record: another program, host and loop
    schemes = {scheme: [item for item in found if not item.point.host_launches] for scheme, found in everything.items()}
    runs = {scheme: [item for item in found if item.point.host_launches] for scheme, found in everything.items()}
    console.print(validation_table(schemes, level))
    if runs["leave one out"]:
        console.print(validation_table(runs, level, MEASURED_TITLE))
        console.print(
            group_table(
                runs["leave one model out"],
                lambda item: f"{item.point.workload} on the {item.point.sheet.product}",
                "devicebench's runs, each model left out: predicted from the other models' figures and runs",
                "Model",
            )
        )
    console.print(
        group_table(
            schemes["leave one model out"],
            lambda item: item.point.workload,
            "Each model left out: predicted from the other models' figures",
            "Model",
        )
    )
    console.print(
        group_table(
            schemes["leave one GPU out"],
            lambda item: item.point.sheet.key,
            "Each GPU left out: predicted from the other GPUs' figures",
            "GPU",
        )
    )
    for line in validation_summary(schemes, fitted, level):
        console.print(line, highlight=False)
    if json_file is not None:
        document = _document(
            fitted,
            validation={
                "level": level,
                "schemes": {scheme: _scores(validations) for scheme, validations in schemes.items()},
                "measured_schemes": {scheme: _scores(validations) for scheme, validations in runs.items()},
                "points": [_point_json(index, everything) for index in range(len(fitted.points))],
                "not_scored": [dataclasses.asdict(unscored) for unscored in fitted.unscored],
            },
        )
        write_atomically(json_file, json.dumps(document, indent=2))
        errors.print(f"Validation written to {json_file}")


def _scores(validations: list[Validation]) -> dict[str, object]:
    inside, judged = coverage(validations)
    return {
        "median_absolute_error": median_absolute_error(validations),
        "inside": inside,
        "judged": judged,
        "coverage": inside / judged if judged else None,
        "points": len(validations),
    }


def _point_json(index: int, schemes: dict[str, list[Validation]]) -> dict[str, object]:
    point = next(iter(schemes.values()))[index].point
    return {
        "measured_by_devicebench": point.host_launches,
        "model_kind": point.model_kind,
        "label": point.label,
        "source": point.source,
        "workload": point.workload,
        "gpu": point.sheet.key,
        "precision": point.precision,
        "batch_size": point.batch_size,
        "kind": point.kind,
        "measured_s": point.observed_s,
        **{
            scheme: {
                "estimated_s": validations[index].predicted_s,
                "error": validations[index].error,
                "inside": validations[index].inside,
            }
            for scheme, validations in schemes.items()
        },
    }


def _document(fitted: RooflineFit, **parts: object) -> dict:
    efficiency = fitted.efficiency
    return {
        "kind": ESTIMATE_KIND,
        "fit": {
            "inverse_shares": dict(zip(PARAMETERS, efficiency.inverse.tolist())),
            "kernel_s": efficiency.kernel_s,
            "host_s": dict(zip(HOST_TERMS, efficiency.host.tolist())),
            "points_pinning": fitted.pinned,
            "points": len(fitted.points),
        },
        **parts,
    }
