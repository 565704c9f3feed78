"""Rich tables for the terminal: the machine, the workloads, and a run's results with the speedup.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 30
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from devicebench.results.schema import Result, RunRecord
from devicebench.results.stats import Speedup, speedup, spread
from devicebench.workloads import Workload, get_workload

BASELINE_DEVICE = "cpu"


def _number(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


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
        table.add_row(
            f"[bold]{entry.name}[/]\n{entry.summary}",
            entry.seed,
            entry.dataset,
            f"{entry.parameter_count():,}",
            defaults,
            published_text(entry),
        )
    return table


def published_text(entry: Workload) -> str:
    published = entry.published
    lines = []
    if published.speedup is not None:
        lines.append(f"GPU {published.speedup:g}x faster ({published.basis})")
    if published.accuracy is not None:
        lines.append(f"{published.accuracy_kind} accuracy {published.accuracy:.1%}")
    lines.append(published.hardware)
    return "\n".join(lines)


# --- results -----------------------------------------------------------------------------------------------


def results_tables(result: Result) -> list[RenderableType]:
    """One table per workload, rows per device, in the order they ran."""
    workloads = list(dict.fromkeys(run.workload for run in result.runs))
    return [_workload_table(result, name) for name in workloads]


def _device_kind(device: str) -> str:
    return "cpu" if device == "cpu" else "gpu"


def _steady_rates(runs: list[RunRecord]) -> list[float]:
    return [epoch.samples_per_s for run in runs for epoch in run.steady_epochs]


def _workload_table(result: Result, name: str) -> RenderableType:
    runs = [run for run in result.runs if run.workload == name]
    by_device: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_device.setdefault(run.device, []).append(run)
    entry = get_workload(name)
    settings = runs[0].settings
    steps = f"{settings.max_steps} steps" if settings.max_steps else "full length"
    data = f"[bold yellow]{settings.data_source} data[/]" if settings.data_source == "synthetic" else "real data"
    table = Table(
        title=f"[bold]{name}[/] ({entry.seed}): batch {settings.batch_size}, {settings.epochs} epochs of {steps}, "
        f"{data}, {settings.threads} CPU threads",
        title_justify="left",
    )
    for column in ("Device", "Epoch s", "Samples/s", "ms/step", "Warm-up s", "End-to-end s", "Test acc",
                   "Speedup vs CPU", "Published samples/s"):
        table.add_column(column, justify="left" if column == "Device" else "right")
    baseline_rates = _steady_rates(by_device.get(BASELINE_DEVICE, []))
    for device, device_runs in by_device.items():
        table.add_row(*_row(device, device_runs, baseline_rates, entry))
    lines = [
        "Epoch s: steady-state median [min–max] over the epochs after the warm-up one, every repeat; "
        "speedup: ratio of median samples/s [95% bootstrap interval].",
        *(f"{device}: {device_runs[0].device_name}" for device, device_runs in by_device.items()),
        f"Published: {published_text(entry)}".replace("\n", "; "),
    ]
    notes = _notes(runs)
    return Group(table, *(Text(line, style="dim") for line in lines), *(Text(note, style="yellow") for note in notes))


def _row(device: str, runs: list[RunRecord], baseline_rates: list[float], entry: Workload) -> list[str]:
    steady = [epoch for run in runs for epoch in run.steady_epochs]
    warmups = [epoch.train_time_s for run in runs for epoch in run.epochs if epoch.phase == "warmup"]
    ends = [run.end_to_end_s for run in runs if run.end_to_end_s is not None and run.status == "ok"]
    accuracies = [run.summary().final_test_accuracy for run in runs]
    accuracies = [value for value in accuracies if value is not None]
    statuses = sorted({run.status for run in runs} - {"ok"})
    label = device + (" [red](" + ", ".join(statuses) + ")[/]" if statuses else "")
    common = {
        "warmup": _number(spread(warmups).median if warmups else None, 2),
        "end": _number(spread(ends).median if ends else None, 1),
        "accuracy": _percent(spread(accuracies).median if accuracies else None),
        "published": _number(entry.published.samples_per_s.get(_device_kind(device)), 0),
    }
    if not steady:
        return [label, "—", "—", "—", common["warmup"], common["end"], common["accuracy"], "—", common["published"]]
    epoch_times = spread([epoch.train_time_s for epoch in steady])
    rates = [epoch.samples_per_s for epoch in steady]
    return [
        label,
        f"{epoch_times.median:,.2f} [{epoch_times.low:,.2f}–{epoch_times.high:,.2f}]",
        _number(spread(rates).median, 0),
        _number(spread([epoch.step_time_ms for epoch in steady]).median, 2),
        common["warmup"],
        common["end"],
        common["accuracy"],
        "1.00x (baseline)" if device == BASELINE_DEVICE else _speedup_text(
            speedup(baseline_rates, rates) if baseline_rates else None),
        common["published"],
    ]


def _speedup_text(value: Speedup | None) -> str:
    if value is None:
        return "— (no CPU run)"
    if value.low is None or value.high is None:
        return f"{value.ratio:.2f}x"
    return f"{value.ratio:.2f}x [{value.low:.2f}–{value.high:.2f}]"


def _notes(runs: list[RunRecord]) -> list[str]:
    notes = []
    if any(run.settings.data_source == "synthetic" for run in runs):
        notes.append("SYNTHETIC DATA: speeds are real; accuracies cannot be compared with the published ones.")
    if runs and all(run.settings.epochs < 2 for run in runs):
        notes.append("No steady-state figures: epoch 1 is warm-up, so run at least 2 epochs (--epochs 2).")
    for run in runs:
        if run.error:
            notes.append(f"{run.device} repeat {run.repeat + 1}: {run.status}: {run.error}")
    return notes
