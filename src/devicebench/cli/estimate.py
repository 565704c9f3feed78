"""`devicebench estimate`: "should I rent a GPU?" answered from the CPU a user has, with an interval.

    devicebench estimate cifar10-mlp --on t4,a100-80gb,h100-sxm --price t4=0.35,h100-sxm=2.50 --data synthetic
    devicebench estimate --validate
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

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
from devicebench.cli.run import DataOption, exit_for, plan_or_fail, train_and_show
from devicebench.config import ConfigError, RunConfig
from devicebench.estimating import (
    Calibration,
    Estimate,
    EstimateError,
    calibration,
    estimates_for,
)
from devicebench.report.estimates import estimate_notes, estimate_table, validation_summary, validation_table
from devicebench.results.datasheets import DATASHEETS, TargetError, parse_targets
from devicebench.results.prices import PriceError, parse_named_prices
from devicebench.results.roofline import coverage, median_absolute_error, validate
from devicebench.results.schema import write_atomically

DEFAULT_TARGETS = "t4,l4,a100-80gb,h100-sxm"
BASELINE_BUDGET_S = 20.0  # seconds of CPU training per workload for the baseline: a warm-up and two steady epochs
ESTIMATE_KIND = "devicebench-estimate"  # the JSON's kind: an estimate is never read back as a measurement


@app.command()
def estimate(
    workloads: Annotated[Optional[list[str]], typer.Argument(
        help="Workloads to estimate (names or patterns); none: every registered torch workload.",
        show_default=False)] = None,
    on: Annotated[str, typer.Option(
        "--on", help="GPUs to estimate, by catalog key, or all: " + ", ".join(sheet.key for sheet in DATASHEETS)
    )] = DEFAULT_TARGETS,
    price: Annotated[Optional[str], typer.Option(
        help="Prices per hour by GPU key, e.g. t4=0.35,h100-sxm=2.50: adds the cost of an epoch and of a run.",
        show_default=False)] = None,
    data: DataOption = "auto",
    batch_size: Annotated[Optional[int], typer.Option(help="Batch size instead of the seed's.",
                                                      show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option(help="Your own model: MODULE:FUNCTION returning an nn.Module; "
                                                 "--data then names MODULE:FUNCTION returning your data.",
                                                 show_default=False)] = None,
    validate_points: Annotated[bool, typer.Option(
        "--validate", help="Score the roofline instead: every measured GPU point (published, committed, in the "
                           "database) predicted by a fit made without it, with the error and whether its interval "
                           "held it.")] = False,
    db: DatabaseOption = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Also write the estimates to this JSON file "
                                                      f"(kind {ESTIMATE_KIND}).", show_default=False)] = None,
    quiet: Annotated[bool, typer.Option(help="No progress while the CPU baseline trains.")] = False,
) -> None:
    """Estimate samples/s, epoch time, speedup and cost on GPUs that are not here, with an interval.

    Counts each kernel of a training step (FLOPs, bytes, launches), times this machine's input pipeline and CPU
    (about 20 s of training per workload, stored like any run), and reads each GPU's datasheet through a roofline
    whose efficiencies are fitted on measured GPU points. The interval is the range of the points' leave-one-out
    errors. An estimate is never stored as a measurement.

    [bold]devicebench estimate mnist-cnn2 --on t4,h100-sxm --price t4=0.35,h100-sxm=2.50[/]
    """
    try:
        targets = parse_targets(on)
        prices = parse_named_prices(price, [sheet.key for sheet in DATASHEETS]) if price is not None else {}
    except (TargetError, PriceError) as error:
        raise fail(str(error)) from None
    if json_file is not None:
        check_output_file("--json", json_file)
    check_outputs_or_fail({"--json": json_file}, db=db, modules={"--model": model, "--data": data})
    with open_store(db, writes=False) as store:
        stored = store.results()
    try:
        fitted = calibration(stored)
    except EstimateError as error:
        raise fail(str(error)) from None
    if validate_points:
        _show_validation(fitted, json_file)
        return
    unpriced = sorted(set(prices) - {sheet.key for sheet in targets})
    if unpriced:
        raise fail(f"--price names {', '.join(unpriced)}, which --on does not estimate; add it to --on")
    estimable = [sheet for sheet in targets if sheet.fp32_tflops is not None]
    for sheet in targets:
        if sheet.fp32_tflops is None:
            errors.print(f"{sheet.key} is left out: no citable source gives its compute peaks ({sheet.source})",
                         highlight=False)
    try:
        named = tuple(workloads or (() if model else ("*",)))
        config = RunConfig(workloads=named, devices="cpu", epochs=3, budget_s=None,
                           batch_size=batch_size, data=data, model=model)
    except ConfigError as error:
        raise fail(str(error)) from None
    job_plan = plan_or_fail(config)
    torch_jobs = tuple(job for job in job_plan.jobs if job.workload.trainer is None)
    for job in job_plan.jobs:
        if job.workload.trainer is not None:
            errors.print(f"{job.workload.name} is left out: it is not a torch model, so it has no kernels to count",
                         highlight=False)
    if not torch_jobs:
        raise fail("nothing to estimate: name a torch workload (see `devicebench list`) or give --model")
    job_plan = dataclasses.replace(job_plan, jobs=torch_jobs, budget_s=BASELINE_BUDGET_S * len(torch_jobs))
    outcome = train_and_show(job_plan, json_file=None, quiet=quiet, db=db, tensorboard=None, tables=lambda result: [])
    if outcome.result.interrupted or outcome.store_failure is not None:
        exit_for(outcome)  # Ctrl-C, or a database that stopped taking runs: what was kept, with its exit status
    estimates: list[Estimate] = []
    for job, run in zip(torch_jobs, outcome.result.runs):
        if run.status != "ok":
            errors.print(f"{job.workload.name} is left out: its CPU baseline did not finish ({run.error})",
                         highlight=False)
            continue
        try:
            estimates += estimates_for(job, run, estimable, fitted, prices)
        except EstimateError as error:
            errors.print(f"{job.workload.name} is left out: {error}", highlight=False)
    if not estimates:
        raise fail("no estimate could be made (the reasons are above)", 1)
    console.print(estimate_table(estimates))
    for note in estimate_notes(estimates, fitted):
        console.print(note, highlight=False)
    if json_file is not None:
        document = _document(fitted, estimates=[estimate.to_dict() for estimate in estimates])
        write_atomically(json_file, json.dumps(document, indent=2))
        errors.print(f"Estimates written to {json_file}")


def _show_validation(fitted: Calibration, json_file: Path | None) -> None:
    validations = validate(fitted.points)
    console.print(validation_table(validations))
    for line in validation_summary(validations, fitted):
        console.print(line, highlight=False)
    if json_file is not None:
        inside, judged = coverage(validations)
        document = _document(fitted, validation={
            "median_absolute_error": median_absolute_error(validations), "inside": inside, "judged": judged,
            "points": [{"label": item.point.label, "source": item.point.source, "kind": item.point.kind,
                        "measured_s": item.point.observed_s, "estimated_s": item.predicted_s, "error": item.error,
                        "inside": item.inside} for item in validations],
            "not_scored": [dataclasses.asdict(unscored) for unscored in fitted.unscored]})
        write_atomically(json_file, json.dumps(document, indent=2))
        errors.print(f"Validation written to {json_file}")


def _document(fitted: Calibration, **parts: object) -> dict:
    efficiency = fitted.efficiency
    return {
        "kind": ESTIMATE_KIND,
        "fit": {"compute_efficiency": efficiency.compute, "memory_efficiency": efficiency.memory,
                "launch_s": efficiency.launch_s, "points": [point.label for point in fitted.points],
                "interval": None if fitted.interval is None else dataclasses.asdict(fitted.interval)},
        **parts,
    }
