"""Rich tables for the terminal: the machine, the workloads, and a run's results with the speedup.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 30
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from devicebench.engine.tuning import Tuning
from devicebench.planning import Plan
from devicebench.reproduce import Reproduction
from devicebench.results.compare import NOISY_EPOCH_TIME_CV, Row, compare
from devicebench.results.schema import Result, RunRecord
from devicebench.results.stats import Spread
from devicebench.workloads import Workload, get_workload

BASELINE_DEVICE = "cpu"


def number_text(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def percent_text(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


# --- a plan ------------------------------------------------------------------------------------------------


def plan_table(plan: Plan) -> Table:
    """What `devicebench run --dry-run` shows: every job, resolved, before anything is loaded or trained."""
    runs = sum(job.repeats for job in plan.jobs)
    table = Table(title=f"The plan: {runs} run{'' if runs == 1 else 's'}; nothing is loaded or trained",
                  title_justify="left")
    for column in ("Workload", "Device", "Runs", "Batch", "Epochs", "Steps/epoch", "Eval batches", "Data", "Mode",
                   "Changed"):
        table.add_column(column, justify="right" if column in ("Runs", "Batch", "Epochs", "Steps/epoch",
                                                                "Eval batches") else "left")
    for job in plan.jobs:
        if job.batch_size_auto:
            batch = "auto"
        else:
            batch = f"{job.batch_size:,}" if job.batch_size else "every row"  # 0: boosted trees read every row
        table.add_row(
            escape(job.workload.name), str(job.device), str(job.repeats), batch, str(job.training.epochs),
            _cap_text(job.training.max_steps), _cap_text(job.training.max_eval_steps),
            escape(f"{job.data.dataset} ({job.data.source})"), job.mode,
            escape(", ".join(f"{name}={value}" for name, value in job.overrides.items())) or "—",
        )
    return table


def _cap_text(cap: int | None) -> str:
    """A per-epoch cap on steps or evaluation batches; "all" when there is none."""
    return "all" if cap is None else f"{cap:,}"


# --- the machine -------------------------------------------------------------------------------------------


def machine_view(fingerprint: dict[str, Any]) -> RenderableType:
    """What `devicebench devices` shows: the CPU, every accelerator, and why there is none when there is none."""
    cpu = fingerprint["cpu"]
    isa = ", ".join(name.upper().replace("_", "-") for name, present in cpu["isa"].items() if present) or "none of note"
    host = Table(title="This machine", show_header=False, title_justify="left")
    host.add_column(style="bold")
    host.add_column()
    host.add_row("CPU", f"{cpu['model']} ({cpu['architecture']})")
    host.add_row("Cores", f"{cpu['physical_cores'] or '?'} physical, {cpu['logical_cores']} logical")
    host.add_row("Torch threads", f"{cpu['torch_threads']} intra-op, {cpu['torch_interop_threads']} inter-op")
    host.add_row("ISA", f"{isa} (torch kernels use {cpu['torch_cpu_capability']})")
    host.add_row("Memory", f"{fingerprint['memory_total_mib'] / 1024:,.1f} GiB")
    host.add_row("PyTorch", f"{fingerprint['torch']} (CUDA build: {fingerprint['torch_cuda_build'] or 'no'})")
    host.add_row("Python", fingerprint["python"])
    host.add_row("OS", fingerprint["os"])
    parts: list[RenderableType] = [host]
    accelerators = fingerprint["accelerators"]
    if accelerators:
        table = Table(title="Accelerators", title_justify="left")
        for column in ("Device", "Name", "Memory", "Compute capability", "Driver", "CUDA", "cuDNN"):
            table.add_column(column)
        for entry in accelerators:
            memory = entry.get("memory_total_mib")
            table.add_row(
                entry["device"],
                entry.get("name") or "?",
                "?" if memory is None else f"{memory / 1024:,.1f} GiB",
                entry.get("compute_capability") or "—",
                entry.get("driver") or "—",
                entry.get("cuda_runtime") or "—",
                entry.get("cudnn") or "—",
            )
        parts.append(table)
    else:
        reason = fingerprint.get("no_accelerator_reason") or "no accelerator is visible to PyTorch"
        parts.append(Text(f"No GPU or other accelerator: {reason}", style="yellow"))
    return Group(*parts)


# --- the workloads -----------------------------------------------------------------------------------------


def workloads_table(workloads: Iterable[Workload]) -> Table:
    table = Table(title="Workloads", title_justify="left", show_lines=True)
    for column in ("Name", "Seed", "Dataset", "Parameters", "Defaults", "Published"):
        table.add_column(column, overflow="fold")
    for entry in workloads:
        defaults = ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
                             for key, value in entry.defaults.items())
        missing = entry.requires()
        parameters = entry.parameter_count()
        origin = "" if entry.origin == "devicebench" else f"\nfrom {entry.origin}"
        table.add_row(
            f"[bold]{escape(entry.name)}[/]\n{escape(entry.summary)}{escape(origin)}"
            + (f"\n[yellow]unavailable: {escape(missing)}[/]" if missing else ""),
            entry.seed or "—",
            entry.dataset,
            "— (trees)" if parameters is None else f"{parameters:,}",
            defaults,
            published_text(entry),
        )
    return table


def published_text(entry: Workload | None) -> str:
    published = entry.published if entry is not None else None
    if published is None:
        return "—"
    lines = []
    if published.speedup is not None:
        lines.append(f"GPU {published.speedup:g}x faster ({published.basis})")
    if published.accuracy is not None:
        lines.append(f"{published.accuracy_kind} accuracy {published.accuracy:.1%}")
    lines.append(published.hardware)
    return "\n".join(lines)


# --- results -----------------------------------------------------------------------------------------------


def comparison_tables(rows_by_workload: dict[str, list[Row]]) -> list[RenderableType]:
    """One table per workload: a row per (machine, device, settings), with the speedup against its baseline."""
    return [_workload_table(name, rows) for name, rows in rows_by_workload.items()]


TEXT_WIDTH = 200  # columns of `comparison_text`: the widest table without folding its cells


def comparison_text(results: list[Result]) -> str:
    """The comparison tables of `results` as plain text (`Result.table()`)."""
    console = Console(width=TEXT_WIDTH, record=True, file=io.StringIO(), color_system=None)
    for table in comparison_tables(compare(results)):
        console.print(table)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def batch_text(batch_size: int) -> str:
    """`batch 32`, or what a batch size of 0 means: boosted trees read every row in every round."""
    return f"batch {batch_size}" if batch_size else "every row each step"


def device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"


def known_workload(name: str) -> Workload | None:
    """The workload called `name`, or None for one this devicebench does not have (an imported result, a
    plugin not installed here, a user's model of another session)."""
    try:
        return get_workload(name)
    except KeyError:
        return None


def _workload_table(name: str, rows: list[Row]) -> RenderableType:
    entry = known_workload(name)
    one_machine = len({row.machine_id for row in rows}) == 1
    first_run = rows[0].runs[0]
    first = first_run.settings
    if first_run.epochs:  # what the epochs really had: a cap above an epoch's length changes nothing
        steps = f"{first_run.epochs[0].steps} steps"
    else:
        steps = f"{first.max_steps} steps" if first.max_steps else "full length"
    sources = {row.settings["data_source"] for row in rows}
    data = " and ".join(f"[bold yellow]{s} data[/]" if s == "synthetic" else f"{s} data" for s in sorted(sources))
    batches = ("batch auto (each device's fastest: a throughput setting, not the seed's)"
               if any(row.settings["batch_size_auto"] for row in rows) else batch_text(first.batch_size))
    seed = f" ({entry.seed})" if entry is not None and entry.seed else ""
    title = f"[bold]{escape(name)}[/]{seed}: {batches}, {first.epochs} epochs of {steps}, {data}"
    table = Table(title=title, title_justify="left")
    priced = any(row.price_per_hour is not None for row in rows)
    energy = any(row.energy_wh is not None for row in rows)
    columns = ["Device" if one_machine else "Machine/device", "Epoch s", "Samples/s", "ms/step", "TFLOP/s", "Busy",
               "Waiting", "Warm-up s", "End-to-end s", "Test acc", "Speedup"]
    published = entry is not None and entry.published is not None
    columns += ["Published samples/s"] if published else []
    columns += ["Cost/1M samples", "Cost vs baseline"] if priced else []
    columns += ["Energy Wh"] if energy else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("Device", "Machine/device") else "right")
    for row in rows:
        table.add_row(*_cells(row, one_machine, priced, energy, entry))
    lines = [
        "Epoch s: steady-state median [min–max] over the epochs after the warm-up one, every repeat; busy: the "
        "device's utilisation (with several processes, their GPUs' mean and the least busy one's) and the training "
        "processes' CPU use while training (100% CPU = one core); TFLOP/s: the matrix products and convolutions of "
        "forward and backward per sample (engine/flops.py) x samples/s, and as a share of the calibrated matmul peak "
        "of every device that trained, at the run's precision (MFU; `devicebench calibrate`); waiting: the share "
        "of training spent waiting for the next batch, and the verdict; speedup: ratio of median samples/s "
        "against the baseline [95% bootstrap interval].",
        *dict.fromkeys(f"{row.machine_name}/{row.device}: {row.device_name}" for row in rows),
    ]
    if entry is not None and entry.published is not None:
        lines.append(f"Published: {published_text(entry)}".replace("\n", "; "))
    return Group(table, *(Text(line, style="dim") for line in lines), *(Text(n, style="yellow") for n in row_notes(rows)))


def median_text(value: Spread | None, digits: int) -> str:
    return number_text(value.median if value else None, digits)


def _cells(row: Row, one_machine: bool, priced: bool, energy: bool, entry: Workload | None) -> list[str]:
    # names come from other machines' files: markup in them is text (what is added below is ours)
    label = escape((f"{row.device} ({row.differs_by})" if row.differs_by else row.device) if one_machine else row.label)
    if row.settings["batch_size_auto"] and "batch_size=" not in label:
        label += f" (batch {row.settings['batch_size']}, auto)"
    if row.settings["world_size"] > 1 and "world_size=" not in label:
        label += f" ({row.settings['world_size']} processes)"
    problems = sorted(set(row.statuses) - {"ok"})
    if problems:
        label += " [red](" + ", ".join(problems) + ")[/]"
    if row.flags:
        label += f" [bold red]({escape(flagged_text(row))})[/]"
    epoch = row.epoch_time_s
    cells = [
        label,
        "—" if epoch is None else f"{epoch.median:,.2f} [{epoch.low:,.2f}–{epoch.high:,.2f}]",
        median_text(row.samples_per_s, 0),
        median_text(row.step_time_ms, 2),
        tflops_text(row),
        busy_text(row),
        waiting_text(row),
        median_text(row.warmup_epoch_s, 2),
        median_text(row.end_to_end_s, 1),
        percent_text(row.test_accuracy.median if row.test_accuracy else None),
        speedup_text(row),
    ]
    if entry is not None and entry.published is not None:
        cells.append(number_text(entry.published.samples_per_s.get(device_kind(row.device)), 0))
    if priced:
        ratio = row.cost_vs_baseline
        cells += [number_text(row.cost_per_million_samples, 3), "—" if ratio is None else f"{ratio:.3g}x"]
    if energy:
        cells.append(median_text(row.energy_wh, 2))
    return cells


def busy_text(row: Row) -> str:
    """How busy the device was while training: `73% GPU, 98% CPU`, or `190% CPU` (100% = one core); with several
    processes, their GPUs' mean and the least busy one's, and the CPU use of them all: `71% GPU (low 40%), 390% CPU`."""
    parts = []
    if row.device_utilization_percent is not None:
        lowest = row.lowest_rank_utilization_percent
        low = "" if lowest is None else f" (low {lowest.median:.0f}%)"
        parts.append(f"{row.device_utilization_percent.median:.0f}% GPU{low}")
    if row.process_cpu_percent is not None:
        parts.append(f"{row.process_cpu_percent.median:.0f}% CPU")
    return ", ".join(parts) or "—"


def tflops_text(row: Row) -> str:
    """Achieved TFLOP/s, to three significant digits (CPUs reach hundredths, GPUs hundreds), and the MFU where the
    device is calibrated: `0.23 (31% MFU)`; `implausible` beside a figure above the device's peak."""
    value, mfu = row.tflops, row.mfu
    if value is None:
        return "—"
    text = f"{value.median:.3g}" + (f" ({mfu.median:.0%} MFU)" if mfu is not None else "")
    return text + (" implausible" if any(flag.code == "above-peak" for flag in row.flags) else "")


def flagged_text(row: Row) -> str:
    """`flagged: above-peak, device-idle`: what the notes under the table explain; "" when nothing is flagged."""
    return "flagged: " + ", ".join(flag.code for flag in row.flags) if row.flags else ""


def waiting_text(row: Row) -> str:
    """`72% input-bound`: the median share of training spent waiting for batches, and the runs' verdict."""
    share, verdict = row.input_wait_share, row.input_verdict
    if share is None:
        return "—"
    text = f"{share.median:.0%}"
    if verdict == "input-bound":
        return f"[bold red]{text} input-bound[/]"
    return f"{text} {verdict}" if verdict else text


def speedup_text(row: Row) -> str:
    if row.baseline is row:
        return "1.00x (baseline)"
    value = row.speedup
    if value is None:
        return "—"
    if value.low is None or value.high is None:
        return f"{value.ratio:.2f}x"
    return f"{value.ratio:.2f}x [{value.low:.2f}–{value.high:.2f}]"


def row_notes(rows: list[Row]) -> list[str]:
    notes = []
    if any(row.settings["data_source"] == "synthetic" for row in rows):
        notes.append("SYNTHETIC DATA: speeds are real; accuracies cannot be compared with the published ones.")
    if all(run.settings.epochs < 2 for row in rows for run in row.runs):
        notes.append("No steady-state figures: epoch 1 is warm-up, so run at least 2 epochs (--epochs 2).")
    for note in dict.fromkeys(run.monitor_note for row in rows for run in row.runs if run.monitor_note):
        notes.append(f"Device utilisation and energy unknown: {note}")
    for row in rows:
        if row.speedup is None and row.baseline is not row and row.speedup_note:
            notes.append(f"{row.label}: no speedup: {row.speedup_note}")
        for run in row.runs:
            if run.error:
                notes.append(f"{row.label} repeat {run.repeat + 1}: {run.status}: {run.error}")
        for diagnosis in dict.fromkeys(run.input_diagnosis for run in row.runs if run.input_verdict == "input-bound"):
            notes.append(f"{row.label}: input-bound: {diagnosis}")
        cv = row.epoch_time_cv
        if cv is not None and cv > NOISY_EPOCH_TIME_CV:
            notes.append(f"{row.label}: noisy: steady epoch time varies {cv:.1%} across {row.epoch_time_cv_basis} "
                         f"(more than {NOISY_EPOCH_TIME_CV:.0%}): close other programs or use more repeats before "
                         f"trusting this row")
        if row.scaling_efficiency is not None:
            world = row.settings["world_size"]
            notes.append(f"{row.label}: scaling efficiency {row.scaling_efficiency:.0%}: {world} processes gave "
                         f"{row.speedup.ratio:.2f}x the throughput of one ({world:.0f}x would be perfect)"
                         + (": above 100%, so check that both rows were measured alike before trusting it"
                            if row.scaling_efficiency > 1 else ""))
        elif row.scaling_note:
            notes.append(f"{row.label}: no scaling efficiency against one process: {row.scaling_note}")
        if row.speedup is not None and "capped at" in row.speedup_note:
            notes.append(f"{row.label}: speedup {row.speedup_note.partition('; ')[2]}")
        for flag in row.flags:
            notes.append(f"{row.label}: FLAGGED {flag.code}: {flag.text}")
        for choices in dict.fromkeys(tuning_text(run) for run in row.runs if run.settings.mode == "tuned"):
            notes.append(f"{row.label}: tuned: {choices}")
        choosing_s = sum(run.tuning_s or 0.0 for run in row.runs)
        if choosing_s > 0:  # time that is in no figure of the table: say how much there was
            notes.append(f"{row.label}: {choosing_s:.1f} s choosing before training (tuned trial, --batch-size auto "
                         "search), in none of the times above")
    return notes


def tuning_text(run: RunRecord) -> str:
    """What tuned mode chose for a run, and what its trial measured: 'bf16, channels last, fused optimizer
    (trial samples/s: fp32 1,953, bf16 2,810; kept bf16)'."""
    settings = run.settings
    chosen = [settings.precision] + [name.replace("_", " ") for name in TUNING_CHOICES if getattr(settings, name)]
    return ", ".join(chosen) + (f" ({run.tuning_note})" if run.tuning_note else "")


TUNING_CHOICES = tuple(field.name for field in dataclasses.fields(Tuning) if field.name != "precision")  # on/off


# --- sweeps ------------------------------------------------------------------------------------------------


def swept_value(row: Row, name: str) -> str:
    """The value of a swept setting (batch_size, workers, or a --set parameter) in `row`."""
    if name in ("batch_size", "workers", "mode"):
        return str(row.settings[name])
    overrides = row.settings["overrides"]
    if name in overrides:
        return str(overrides[name])
    entry = known_workload(row.workload)
    return "—" if entry is None else str(entry.defaults.get(name, "—"))  # the point kept the workload's default


def sweep_tables(rows_by_workload: dict[str, list[Row]], swept: list[str]) -> list[RenderableType]:
    """Per workload and device, one line per grid point: throughput, waiting, verdict, and the ratio to the
    baseline device at the same point."""
    tables: list[RenderableType] = []
    for name, rows in rows_by_workload.items():
        for device in dict.fromkeys(row.device for row in rows):
            own = [row for row in rows if row.device == device]
            table = Table(title=f"[bold]{escape(name)}[/] on {escape(device)} ({escape(own[0].device_name)}): a row "
                                "per grid point",
                          title_justify="left")
            for column in [*swept, "Samples/s", "ms/step", "Waiting", "Busy", "Test acc", "vs baseline"]:
                table.add_column(column.replace("_", " "), justify="right")
            for row in own:
                problems = sorted(set(row.statuses) - {"ok"})
                table.add_row(
                    *(swept_value(row, setting) for setting in swept),
                    median_text(row.samples_per_s, 0) + (f" [red]({', '.join(problems)})[/]" if problems else ""),
                    median_text(row.step_time_ms, 2),
                    waiting_text(row),
                    busy_text(row),
                    percent_text(row.test_accuracy.median if row.test_accuracy else None),
                    speedup_text(row),
                )
            tables.append(table)
        notes = row_notes(rows)
        tables += [Text(note, style="yellow") for note in notes]
    return tables


# --- history -----------------------------------------------------------------------------------------------

STATUS_STYLES = {"ok": "green", "running": "yellow", "interrupted": "yellow"}  # the failures are red


def history_table(results: list[Result], path: Path) -> Table:
    """`devicebench history`: one line per stored run."""
    runs = sum(len(result.runs) for result in results)
    # a rule under the header and single spaces between columns: twelve columns fit in about 110 characters
    table = Table(title=f"{runs} run{'' if runs == 1 else 's'} in {path}", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True,
                  caption="Samples/s and epoch s: medians of the steady epochs, warm-up left out. "
                          "Test acc: after the last epoch.", caption_justify="left")
    for header in ("Started (UTC)", "Machine", "Workload", "Device", "Status", "Epochs"):
        table.add_column(header, no_wrap=True)
    for header in ("Samples/s", "Epoch s", "Test acc"):
        table.add_column(header, justify="right", no_wrap=True)
    for header in ("Data", "Batch", "Run id"):
        table.add_column(header, no_wrap=True)
    for result in results:
        for run in result.runs:
            summary = run.summary()
            table.add_row(
                run.started_utc[:16].replace("T", " "),  # to the minute: the run id tells runs apart
                escape(result.machine["machine_name"]),  # names from imported files: their markup is text
                escape(run.workload),
                escape(run.device),
                Text(run.status, style=STATUS_STYLES.get(run.status, "red")),
                f"{summary.epochs_completed}/{run.settings.epochs}",
                number_text(summary.steady_samples_per_s, 0),
                number_text(summary.steady_epoch_time_s, 2),
                number_text(summary.final_test_accuracy, 4),
                run.settings.data_source,
                str(run.settings.batch_size),
                run.run_id[:8],
            )
    return table


# --- reproduce ---------------------------------------------------------------------------------------------


def reproduction_table(reproductions: list[Reproduction]) -> Table:
    """Published against measured here, a pair of lines per workload."""
    table = Table(title="Published vs measured here", title_justify="left", show_lines=True)
    for column in ("Workload", "", "Hardware", "CPU samples/s", "GPU samples/s", "Speedup", "Accuracy"):
        table.add_column(column, justify="left" if column in ("Workload", "", "Hardware") else "right",
                         overflow="fold")
    for entry in reproductions:
        published = entry.published
        table.add_row(
            f"[bold]{entry.workload.name}[/] ({entry.workload.seed})",
            "published",
            published.hardware,
            number_text(published.samples_per_s.get("cpu"), 0),
            number_text(published.samples_per_s.get("gpu"), 0),
            "—" if published.speedup is None else f"{published.speedup:g}x ({published.basis})",
            percent_text(published.accuracy) + (f" {published.accuracy_kind}" if published.accuracy else ""),
        )
        measured_speedup = "— (no GPU here)" if entry.measured_speedup is None else (
            f"{entry.measured_speedup:.2f}x (steady samples/s)"
            + (f"; end to end {entry.measured_end_to_end_ratio:.2f}x" if entry.measured_end_to_end_ratio else ""))
        data = f"[bold yellow]{entry.data_sources} data[/]" if "synthetic" in entry.data_sources else "real data"
        table.add_row(
            "",
            "measured here",
            f"{entry.measured_hardware}; {data}",
            number_text(entry.measured_cpu_samples_per_s, 0),
            number_text(entry.measured_gpu_samples_per_s, 0),
            measured_speedup,
            percent_text(entry.measured_accuracy) + (f" {published.accuracy_kind}" if entry.measured_accuracy else ""),
        )
    return table
