"""Each seed experiment, re-run here and set beside what its post published.

`devicebench reproduce S2` trains the seed's workloads at their published settings (`--quick`: reduced) on the
local devices and prints, per workload, the post's hardware, throughput, speedup and accuracy next to the same
figures measured here. Published numbers come from each workload's `published` data, nowhere else.

    devicebench reproduce S1 --quick --devices cpu
"""

from __future__ import annotations

from dataclasses import dataclass

from devicebench.results.compare import Row
from devicebench.workloads import (
    SEED_EXPERIMENTS,
    Published,
    Workload,
    get_workload,
    list_workloads,
)


class ReproduceError(ValueError):
    """A seed that cannot be reproduced; the message names the seeds that can."""


def _wanted(seeds: list[str]) -> list[str]:
    """Seed ids as written in SEEDS.md, in the order asked; "all" means every one."""
    return list(SEED_EXPERIMENTS) if any(seed.lower() == "all" for seed in seeds) else [s.upper() for s in seeds]


def seed_workloads(seeds: list[str]) -> list[Workload]:
    """The workloads of the given seed ids ("S1", "s2", or "all"), in registry order."""
    wanted = set(_wanted(seeds))
    unknown = wanted - set(SEED_EXPERIMENTS)
    if unknown:
        raise ReproduceError(f"unknown seed experiment {', '.join(sorted(unknown))}; known: "
                             f"{', '.join(SEED_EXPERIMENTS)} or all")
    selected = [entry for entry in list_workloads() if entry.seed in wanted]
    if not selected:
        available = sorted({entry.seed for entry in list_workloads()})
        raise ReproduceError(f"{', '.join(sorted(wanted))} has no workloads in this version of devicebench yet; "
                             f"seeds with workloads: {', '.join(available)}")
    return selected


def seeds_without_workloads(seeds: list[str]) -> list[str]:
    """Which of the asked-for seeds (or all) have no workloads yet, to say so instead of staying silent."""
    covered = {entry.seed for entry in list_workloads()}
    return [seed for seed in _wanted(seeds) if seed not in covered]


@dataclass(frozen=True)
class Reproduction:
    """One workload: the post's figures and ours, side by side."""

    workload: Workload
    published: Published
    measured_hardware: str  # the devices measured here
    measured_cpu_samples_per_s: float | None
    measured_gpu_samples_per_s: float | None  # the fastest accelerator measured here
    measured_speedup: float | None  # steady samples/s, fastest accelerator over the CPU
    measured_end_to_end_ratio: float | None  # CPU end-to-end time over the accelerator's, as S4 timed it
    measured_accuracy: float | None  # of the kind the post quoted (test or train), best device
    data_sources: str


def reproductions(rows_by_workload: dict[str, list[Row]]) -> list[Reproduction]:
    return [_reproduction(get_workload(name), rows) for name, rows in rows_by_workload.items()]


def _reproduction(workload: Workload, rows: list[Row]) -> Reproduction:
    cpu = next((row for row in rows if row.device == "cpu" and row.samples_per_s), None)
    accelerators = [row for row in rows if row.device != "cpu" and row.samples_per_s]
    fastest = max(accelerators, key=lambda row: row.samples_per_s.median, default=None)
    speedup = fastest.samples_per_s.median / cpu.samples_per_s.median if cpu and fastest else None
    end_to_end = None
    if cpu and fastest and cpu.end_to_end_s and fastest.end_to_end_s:
        end_to_end = cpu.end_to_end_s.median / fastest.end_to_end_s.median
    return Reproduction(
        workload=workload,
        published=workload.published,
        measured_hardware=" vs ".join(dict.fromkeys(f"{row.device_name} ({row.device})" for row in rows)),
        measured_cpu_samples_per_s=cpu.samples_per_s.median if cpu else None,
        measured_gpu_samples_per_s=fastest.samples_per_s.median if fastest else None,
        measured_speedup=speedup,
        measured_end_to_end_ratio=end_to_end,
        measured_accuracy=_accuracy(rows, workload.published.accuracy_kind),
        data_sources=", ".join(sorted({row.settings["data_source"] for row in rows})),
    )


def _accuracy(rows: list[Row], kind: str) -> float | None:
    """The best final accuracy of the kind the post quoted, over every device measured here."""
    finals = []
    for row in rows:
        for run in row.runs:
            if run.epochs:
                last = run.epochs[-1]
                finals.append(last.train_accuracy if kind == "train" else last.test_accuracy)
    finals = [value for value in finals if value is not None]
    return max(finals, default=None)
