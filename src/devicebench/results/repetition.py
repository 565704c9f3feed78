"""The process as the unit of repetition: each process's median, the machine's run-to-run variation a row's runs
recorded, and the speedup interval drawn from them (docs/measurement.md, rule 4).

The epochs of one process share its luck, so they are not independent samples of the ratio fresh processes would
show. With two processes or more a side (`--repeats 2` runs each repeat in a fresh process), each process's median
is a sample and the rank interval's level is exact. With one process a side, the interval over the steady epochs
includes both machines' run-to-run variation where `devicebench calibrate` measured it
(stats.speedup_across_processes); where it did not, the interval holds only within the processes measured, and
its note and the table say so.

    python -c "from devicebench.results.repetition import ONE_PROCESS_NOTE; print(ONE_PROCESS_NOTE)"
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Protocol

from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.results.stats import RunToRun, Speedup, speedup, speedup_across_processes

# what an interval from one process a side leaves out, and what would put it in; no "; " in it, which parts a
# speedup note (report/text.py row_notes)
ONE_PROCESS_NOTE = (
    "within one process a side: the variation between fresh processes is not in it (`devicebench calibrate` "
    "measures this machine's, which every later run's interval then includes, and `--repeats 2` or more runs each "
    "repeat in a fresh process)"
)


class Repeated(Protocol):
    """What `process_interval` reads of a row (results/compare.py's Row)."""

    runs: list[RunRecord]

    @property
    def label(self) -> str: ...

    @property
    def steady_epochs(self) -> list[EpochRecord]: ...

    @property
    def run_to_run(self) -> RunToRun | None: ...

    def process_medians(self, measure: str) -> list[float]: ...


def process_medians(runs: list[RunRecord], processes: dict[str, str], measure: str) -> list[float]:
    """The median of `measure` (an EpochRecord field) over each process's steady epochs, one value a process;
    `processes` maps a run's id to its process (a run it does not name is a process of its own)."""
    epochs: dict[str, list[float]] = {}
    for run in runs:
        for epoch in run.steady_epochs:
            epochs.setdefault(processes.get(run.run_id, run.run_id), []).append(getattr(epoch, measure))
    return [statistics.median(values) for values in epochs.values()]


def recorded_run_to_run(runs: list[RunRecord]) -> RunToRun | None:
    """The run-to-run variation the latest of `runs` that recorded one did, or None."""
    recorded = [run for run in runs if run.run_to_run_cv is not None and run.run_to_run_freedom]
    if not recorded:
        return None
    latest = recorded[-1]
    return RunToRun(cv=latest.run_to_run_cv or 0.0, freedom=latest.run_to_run_freedom or 1.0)


def process_interval(baseline: Repeated, row: Repeated) -> tuple[Speedup, str]:
    """The speedup of `row` over `baseline` and where its interval comes from (the module's docstring says how)."""
    baseline_processes = baseline.process_medians("samples_per_s")
    own_processes = row.process_medians("samples_per_s")
    if len(baseline_processes) >= 2 and len(own_processes) >= 2:
        return speedup(baseline_processes, own_processes), "repeats"
    baseline_rates = [epoch.samples_per_s for epoch in baseline.steady_epochs]
    own_rates = [epoch.samples_per_s for epoch in row.steady_epochs]
    if baseline.run_to_run is None or row.run_to_run is None:
        found = speedup(baseline_rates, own_rates)
        return dataclasses.replace(found, within_one_process=True), f"epochs, {ONE_PROCESS_NOTE}"
    found = speedup_across_processes(
        baseline_rates,
        own_rates,
        baseline.run_to_run,
        row.run_to_run,
        baseline_processes=len(baseline_processes),
        candidate_processes=len(own_processes),
    )
    measured = ", ".join(
        dict.fromkeys(f"{side.run_to_run.cv:.1%} on {side.label}" for side in (baseline, row) if side.run_to_run)
    )
    return found, f"epochs and this machine's run-to-run variation between processes ({measured})"
