"""`devicebench devices` and `devicebench list`: what this machine has and what it can run.

devicebench devices --json
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape

from devicebench.cli import app, console, errors, fail
from devicebench.environment import machine_fingerprint
from devicebench.report.tables import machine_view, workloads_table
from devicebench.results.record import published_figures
from devicebench.workloads import Workload, list_workloads, plugin_problems


@app.command()
def devices(
    as_json: Annotated[bool, typer.Option("--json", help="Print the machine fingerprint as JSON.")] = False,
) -> None:
    """What this machine has: CPU, cores, ISA, memory, every GPU torch can see, and why there is none."""
    fingerprint = machine_fingerprint()
    if as_json:
        print(json.dumps(fingerprint, indent=2))
    else:
        console.print(machine_view(fingerprint))


@app.command("list")
def list_command(
    pattern: Annotated[str, typer.Argument(help="Shell-style name pattern, e.g. 'mnist-*'.")] = "*",
    as_json: Annotated[bool, typer.Option("--json", help="Print the workloads as JSON.")] = False,
) -> None:
    """The workloads: their seed experiment, dataset, size, default settings and published figures."""
    found = list_workloads(pattern)
    if not found:
        known = ", ".join(entry.name for entry in list_workloads())
        raise fail(f"no workload matches {pattern!r}; known workloads: {known}")
    if as_json:
        print(json.dumps([_workload_json(entry) for entry in found], indent=2))
    else:
        console.print(workloads_table(found))
    for plugin, error in plugin_problems().items():
        errors.print(
            f"[yellow]plugin {escape(plugin)} could not be loaded, so its workloads are left out: {escape(error)}[/]",
            highlight=False,
        )


def _workload_json(entry: Workload) -> dict:
    published = entry.published
    return {
        "name": entry.name,
        "origin": entry.origin,  # devicebench, or the plugin that added it
        "seed": entry.seed,
        "dataset": entry.dataset,
        "summary": entry.summary,
        "parameter_count": entry.parameter_count(),
        "unavailable": entry.requires(),  # what this installation lacks to run it, or null
        "in_suites": entry.in_suites,  # false: a reference model, run only when named
        "record_figures": len(published_figures(entry.name)),  # the public record's rows of it (docs/record.md)
        "defaults": dict(entry.defaults),
        "quick": {
            "epochs": entry.quick.epochs,
            "max_steps": entry.quick.max_steps,
            "max_eval_steps": entry.quick.max_eval_steps,
        },
        "published": None
        if published is None
        else {
            "speedup": published.speedup,
            "basis": published.basis,
            "hardware": published.hardware,
            "accuracy": published.accuracy,
            "accuracy_kind": published.accuracy_kind,
            "epoch_time_s": dict(published.epoch_time_s),
            "end_to_end_s": dict(published.end_to_end_s),
            "samples_per_s": dict(published.samples_per_s),
            "batch_size": published.batch_size,  # null: measured at the defaults' batch size
        },
    }
