"""Which runs may be pooled, and how much faster each row is than its baseline.

Runs are grouped per workload into rows of (machine, device, speed settings, software, definition). Runs whose
speed settings, software or workload definition differ are never pooled (results/pooling.py): each gets its own
row, and the row names what sets it apart from its neighbours. A
speedup is measured against a baseline row with the same workload settings (by default the CPU of the same
machine); a row with no such baseline says why instead of showing a number.

    python -c "from devicebench.results.compare import compare; help(compare)"
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from devicebench.results.plausibility import (
    Flag,
    calibrated_peak,
    run_flags,
    slower_than_baseline,
)
from devicebench.results.pooling import (
    closest,
    machine_identity,
    machine_label,
    name_differences,
    names_machine,
    no_baseline_note,
    own_choices,
    resolved_definitions,
    run_settings,
    same_machine,
    same_work,
    software_difference,
    tell_machines_apart,
    unrecorded_note,
)
from devicebench.results.prices import Prices
from devicebench.results.repetition import process_interval, process_medians, recorded_run_to_run
from devicebench.results.schema import EpochRecord, Result, RunRecord
from devicebench.results.speed_settings import SAME_WORK_SETTINGS, setting_text
from devicebench.results.stats import RunToRun, Speedup, Spread, coefficient_of_variation, level_text, spread

DEFAULT_BASELINE = "cpu"
# Above this, steady epoch time varies too much across repeats to trust the row. It flags the sample's CV, not the
# machine's: from 2 values a row of true CV 2% is flagged 1.2% of the time, 5% 32%, 10% 62% (tests/test_stats.py).
# With one process, the sample's CV is its epochs' and the machine's run-to-run CV combined (Row.epoch_time_cv).
NOISY_EPOCH_TIME_CV = 0.05
SECONDS_PER_HOUR = 3600.0
JOULES_PER_WATT_HOUR = 3600.0
TERA = 1e12  # FLOP/s per TFLOP/s


@dataclass
class Row:
    """Runs of one workload on one (machine, device) with identical speed settings: safe to pool."""

    workload: str
    machine: dict[str, Any]  # the fingerprint of the machine the runs came from
    device: str
    device_name: str
    settings: dict[str, Any]  # the speed settings, software and definition (POOLED_APART) every run here shares
    runs: list[RunRecord] = field(default_factory=list)
    differs_in: tuple[str, ...] = ()  # the settings that set this row apart from others on its machine and device
    baseline: Row | None = None
    speedup: Speedup | None = None
    speedup_note: str = ""  # why there is no speedup, or where its interval comes from
    price_per_hour: float | None = None
    id_digits: int = 0  # of its machine id shown after its name: enough to tell the machines of one name apart
    processes: dict[str, str] = field(default_factory=dict)  # run id → its process_id, or its session's id (before 6)

    @property
    def machine_id(self) -> str:
        return self.machine["machine_id"]

    @property
    def plain_name(self) -> str:  # $DEVICEBENCH_MACHINE where it ran, else its hostname
        return self.machine.get("machine_name") or self.machine["hostname"]

    @property
    def machine_name(self) -> str:
        """The machine's name, with the start of its id where it must show (`vm@3f2a1b`: pooling.id_digits_shown)."""
        return machine_label(self.machine, self.id_digits)

    @property
    def differs_by(self) -> str:
        """`tuned, 25 steps`: the values of `differs_in` in words, leaving out switches that are off (the rows with
        the switch on are the ones that say so)."""
        return ", ".join(text for name in self.differs_in if (text := setting_text(name, self.settings[name])))

    @property
    def label(self) -> str:
        """`laptop/cuda:0`, plus the settings that set the row apart: `laptop/cpu (batch 64)`."""
        return f"{self.machine_name}/{self.device}" + (f" ({self.differs_by})" if self.differs_by else "")

    @property
    def against_seed_mode(self) -> bool:
        """Whether this tuned row's speedup is its gain over seed mode on its own device (`_own_seed_row`)."""
        baseline = self.baseline
        return (
            baseline is not None
            and baseline is not self
            and baseline.device == self.device
            and same_machine(baseline, self)
            and baseline.settings["mode"] == "seed"
            and self.settings["mode"] == "tuned"
        )

    @property
    def pooling_notes(self) -> list[str]:
        """What this row pools or is set against that a reader must know: runs whose definition was not recorded,
        a baseline that ran under other software."""
        notes = [unrecorded_note(self.settings["definition"], self.runs)]
        if self.baseline is not None and self.baseline is not self:
            difference = software_difference(self.settings, self.baseline.settings)
            notes.append(f"its speedup is against {self.baseline.label}, under {difference}" if difference else "")
        return [note for note in notes if note]

    @property
    def steady_epochs(self) -> list[EpochRecord]:
        return [epoch for run in self.runs for epoch in run.steady_epochs]

    @property
    def epoch_time_s(self) -> Spread | None:
        return _spread_or_none([epoch.train_time_s for epoch in self.steady_epochs])

    @property
    def samples_per_s(self) -> Spread | None:
        return _spread_or_none([epoch.samples_per_s for epoch in self.steady_epochs])

    @property
    def step_time_ms(self) -> Spread | None:
        return _spread_or_none([epoch.step_time_ms for epoch in self.steady_epochs])

    @property
    def epoch_time_cv(self) -> float | None:
        """How repeatable the steady epoch time is: its coefficient of variation (sample standard deviation / mean,
        a fraction), across each process's median steady epoch time, or, with a single process, across its steady
        epochs, combined (root sum of squares) with the machine's run-to-run CV where it was measured: the figure
        the interval includes (`epoch_time_cv_basis` says which). None with fewer than two values."""
        epochs_cv, run_to_run = coefficient_of_variation(self._repeatability_sample()[0]), self.run_to_run
        if epochs_cv is None or run_to_run is None or len(self.process_medians("train_time_s")) >= 2:
            return epochs_cv
        return (epochs_cv**2 + run_to_run.cv**2) ** 0.5

    @property
    def epoch_time_cv_basis(self) -> str:
        """What `epoch_time_cv` varies across: `5 repeats`, or `4 steady epochs of one repeat` and the machine's
        run-to-run CV, or a word that it was not measured."""
        return self._repeatability_sample()[1]

    def _repeatability_sample(self) -> tuple[list[float], str]:
        medians = self.process_medians("train_time_s")
        if len(medians) >= 2:
            return medians, f"{len(medians)} repeats"
        # per step: the same variation as the epochs' times when they are equally long, and a fair one when a time
        # budget shortened some of them (devicebench/budget.py)
        times = [epoch.step_time_ms for epoch in self.steady_epochs]
        run_to_run = self.run_to_run
        if run_to_run is None:
            return times, f"{len(times)} steady epochs of one repeat, between processes not measured"
        return times, f"{len(times)} steady epochs of one repeat and this machine's run-to-run {run_to_run.cv:.1%}"

    def process_medians(self, measure: str) -> list[float]:
        return process_medians(self.runs, self.processes, measure)

    @property
    def run_to_run(self) -> RunToRun | None:  # the machine's run-to-run variation on this device, where measured
        return recorded_run_to_run(self.runs)

    @property
    def process_cpu_percent(self) -> Spread | None:
        return _spread_or_none([e.process_cpu_percent for e in self.steady_epochs if e.process_cpu_percent is not None])

    @property
    def device_utilization_percent(self) -> Spread | None:
        """The device's utilisation; with several processes, their devices' mean."""
        return _spread_or_none(
            [e.device_utilization_percent for e in self.steady_epochs if e.device_utilization_percent is not None]
        )

    @property
    def lowest_rank_utilization_percent(self) -> Spread | None:
        """With several processes, the least busy device's utilisation in each steady epoch where every one's is
        known: a mean of 70% may be one idle GPU among busy ones."""
        return _spread_or_none(
            [
                min(value for value in e.rank_device_utilization_percent if value is not None)
                for e in self.steady_epochs
                if e.rank_device_utilization_percent and None not in e.rank_device_utilization_percent
            ]
        )

    @property
    def tflops(self) -> Spread | None:
        """Achieved TFLOP/s in the steady epochs: FLOPs per sample x samples/s."""
        return _spread_or_none(
            [
                run.flops_per_sample * epoch.samples_per_s / TERA
                for run in self.runs
                for epoch in run.steady_epochs
                if run.flops_per_sample is not None
            ]
        )

    @property
    def scaling_efficiency(self) -> float | None:
        """For N processes against one on the same device: N-process throughput / (N x 1-process throughput); None
        where there is none, or where `scaling_note` says why it would not be a fair one."""
        if not self._scales_against_one_process or self.scaling_note:
            return None
        assert self.speedup is not None  # _scales_against_one_process holds only for a row with a speedup
        return self.speedup.ratio / self.settings["world_size"]

    @property
    def scaling_note(self) -> str:
        """Why this row's N processes are not set against its one-process baseline as a scaling efficiency: epochs
        of different lengths, or an interrupted run on either side (taken in other conditions, cut short)."""
        if not self._scales_against_one_process:
            return ""
        assert self.baseline is not None  # _scales_against_one_process holds only for a row with a baseline
        reasons = []
        own_steps, baseline_steps = self.settings["max_steps"], self.baseline.settings["max_steps"]
        if own_steps != baseline_steps:
            reasons.append(
                f"its epochs were capped at {own_steps or 'no'} steps, the one-process row's at "
                f"{baseline_steps or 'no'}"
            )
        for side, row in (("this row", self), ("the one-process row", self.baseline)):
            interrupted = row.statuses.get("interrupted", 0)
            if interrupted:
                reasons.append(f"{side} pools {interrupted} interrupted run{'s' if interrupted > 1 else ''}")
        return "; ".join(reasons)

    @property
    def _scales_against_one_process(self) -> bool:
        baseline = self.baseline
        return (
            self.settings["world_size"] > 1
            and self.speedup is not None
            and baseline is not None
            and baseline.settings["world_size"] == 1
            and baseline.device == self.device
        )

    @property
    def flags(self) -> list[Flag]:
        """What in this row's figures breaks physics or needs explaining (results/plausibility.py): each run's flags,
        taken again from its epochs (so results stored before the flags existed get them too), one per kind, and
        an accelerator slower than its CPU baseline, explained."""
        found: dict[str, Flag] = {}
        for run in self.runs:
            for flag in run_flags(run):
                found.setdefault(flag.code, flag)
        baseline = self.baseline
        if (
            baseline is not None
            and baseline is not self
            and baseline.device == "cpu"
            and self.device != "cpu"
            and self.speedup is not None
            and self.speedup.ratio < 1
        ):
            flag = slower_than_baseline(self.runs, self.speedup.ratio, baseline.label)
            found[flag.code] = flag
        return list(found.values())

    @property
    def mfu(self) -> Spread | None:
        """Model FLOPs utilisation: achieved TFLOP/s as a share of the calibrated matmul peak, at the precision each
        run used (`devicebench calibrate`), of every device that trained: samples/s of several processes is their
        global rate, so it is taken against one peak per process."""
        return _spread_or_none(
            [
                run.flops_per_sample * epoch.samples_per_s / TERA / (peak * run.settings.world_size)
                for run in self.runs
                for epoch in run.steady_epochs
                if run.flops_per_sample is not None and (peak := calibrated_peak(run))
            ]
        )  # a peak no device
        # reaches would read 0% (results/plausibility: implausible-peak)

    @property
    def input_wait_share(self) -> Spread | None:
        """Of each steady epoch's training time, the share spent waiting for the next batch."""
        return _spread_or_none(
            [
                e.input_wait_s / e.train_time_s
                for e in self.steady_epochs
                if e.input_wait_s is not None and e.train_time_s > 0
            ]
        )

    @property
    def input_verdict(self) -> str | None:
        """The runs' verdict (input-bound or compute-bound), or "mixed" when repeats disagree."""
        verdicts = {run.input_verdict for run in self.runs if run.input_verdict}
        return verdicts.pop() if len(verdicts) == 1 else ("mixed" if verdicts else None)

    @property
    def warmup_epoch_s(self) -> Spread | None:
        return _spread_or_none([e.train_time_s for run in self.runs for e in run.epochs if e.phase == "warmup"])

    @property
    def end_to_end_s(self) -> Spread | None:
        return _spread_or_none([run.end_to_end_s for run in self.runs if run.status == "ok" and run.end_to_end_s])

    @property
    def test_accuracy(self) -> Spread | None:
        """Final test accuracy of the runs that finished: a run cut short never reached its final epoch."""
        finals = [run.summary().final_test_accuracy for run in self.runs if run.status == "ok"]
        return _spread_or_none([value for value in finals if value is not None])

    @property
    def epoch_steps(self) -> list[int]:
        """The steps (boosting rounds, for trees) the epochs of these runs really had, each length once, smallest
        first: a cap above an epoch's length changes nothing, and an epoch cut short by a stop is shorter."""
        return sorted({epoch.steps for run in self.runs for epoch in run.epochs})

    @property
    def targeted_runs(self) -> list[RunRecord]:
        """The runs that finished with a --target-accuracy set: the ones a time to target is asked of."""
        return [run for run in self.runs if run.target_accuracy is not None and run.status == "ok"]

    @property
    def time_to_target_s(self) -> Spread | None:
        """Training seconds until the test accuracy first reached --target-accuracy, over the runs that reached it."""
        return _spread_or_none(
            [run.time_to_target_train_s for run in self.targeted_runs if run.time_to_target_train_s is not None]
        )

    @property
    def energy_wh(self) -> Spread | None:
        return _spread_or_none([run.energy_j / JOULES_PER_WATT_HOUR for run in self.runs if run.energy_j is not None])

    @property
    def statuses(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.status] = counts.get(run.status, 0) + 1
        return counts

    @property
    def cost_per_million_samples(self) -> float | None:
        """Money to train on a million samples at the steady rate, in the price's currency."""
        rate = self.samples_per_s
        if self.price_per_hour is None or rate is None:
            return None
        return self.price_per_hour / SECONDS_PER_HOUR / rate.median * 1e6

    @property
    def cost_per_run(self) -> float | None:
        """Money for one whole run, model creation to the last epoch."""
        end_to_end = self.end_to_end_s
        if self.price_per_hour is None or end_to_end is None:
            return None
        return self.price_per_hour / SECONDS_PER_HOUR * end_to_end.median

    @property
    def cost_vs_baseline(self) -> float | None:
        """This row's cost per sample over the baseline's: 0.03 means a thirtieth of the baseline's cost per job."""
        if self.baseline is None or self.baseline.cost_per_million_samples in (None, 0):
            return None
        own = self.cost_per_million_samples
        return None if own is None else own / self.baseline.cost_per_million_samples


def compare(
    results: Iterable[Result],
    *,
    baseline: str = DEFAULT_BASELINE,
    prices: Prices | None = None,
    pool_interrupted: bool = False,
) -> dict[str, list[Row]]:
    """Rows per workload, in the order first seen, each with its speedup against `baseline`: a device ("cpu",
    "cuda:0") on each row's own machine, or "MACHINE/DEVICE" for one fixed row. Interrupted runs pool with finished
    ones only with `pool_interrupted` (pooling.run_settings)."""
    results = list(results)
    rows: dict[tuple, Row] = {}
    definitions = iter(resolved_definitions(results))
    for result in results:
        for run in result.runs:
            settings = {**run_settings(result, run, pool_interrupted), "definition": next(definitions)}
            key = (run.workload, *machine_identity(result.machine), run.device, json.dumps(settings, sort_keys=True))
            if key not in rows:
                rows[key] = Row(run.workload, result.machine, run.device, run.device_name, settings)
            rows[key].runs.append(run)
            rows[key].processes[run.run_id] = run.process_id or result.result_id
    tell_machines_apart(list(rows.values()))
    by_workload: dict[str, list[Row]] = {}
    for row in rows.values():
        by_workload.setdefault(row.workload, []).append(row)
    for workload_rows in by_workload.values():
        name_differences(workload_rows)
        for row in workload_rows:
            if prices is not None:
                row.price_per_hour = prices.per_hour(row.machine, row.device)
            _attach_speedup(row, workload_rows, baseline)
    return by_workload


def _spread_or_none(values: list[float]) -> Spread | None:
    return spread(values) if values else None


def _find_baseline(row: Row, rows: list[Row], spec: str) -> Row | None:
    machine, _, device = spec.rpartition("/")
    candidates = [
        other
        for other in rows
        if other.device == device
        # a fixed machine by its name as tables show it (`vm@3f2a1b`: `vm` alone would pick one of two unsaid) or id
        and (same_machine(other, row) if not machine else names_machine(machine, other))
        and same_work(row, other)
        and other.samples_per_s is not None
    ]
    one_machine = len({machine_identity(other.machine) for other in candidates}) == 1  # else picking one is a guess
    return closest(row, candidates) if one_machine else None


def _own_seed_row(row: Row, rows: list[Row]) -> Row | None:
    """For a tuned row, the seed-mode row of the same machine and device doing the same work (tuned mode may pick its
    precision), or None: a tuned row sets its gain over seed mode against it, never a second 1.00x."""
    if row.settings["mode"] != "tuned":
        return None
    seeds = [
        other
        for other in rows
        if other.settings["mode"] == "seed"
        and same_machine(other, row)
        and other.device == row.device
        and other.samples_per_s is not None
        and same_work(row, other, apart_from=frozenset({"mode"}))
    ]
    return closest(row, seeds) if seeds else None


@dataclass(frozen=True)
class TunedGain:
    """What tuned mode gained on one machine and device: a tuned row against the seed-mode row doing its work."""

    tuned: Row
    seed: Row
    gain: Speedup  # tuned samples/s over seed samples/s, with an interval as a speedup has


def tuned_gains(rows: list[Row]) -> list[TunedGain]:
    """Per tuned row of one workload with steady epochs, in `rows`' order, its gain over the seed-mode row of the
    same machine and device doing the same work (its precision and its other choices apart), where there is one.
    Samples/s, not epoch time: the two rows' epochs may have had different numbers of steps."""
    gains = []
    for tuned in rows:
        if tuned.settings["mode"] != "tuned" or tuned.samples_per_s is None:
            continue
        seed = _own_seed_row(tuned, rows)
        if seed is not None:
            gains.append(TunedGain(tuned, seed, process_interval(seed, tuned)[0]))
    return gains


def _attach_speedup(row: Row, rows: list[Row], spec: str) -> None:
    row.baseline = _find_baseline(row, rows, spec)
    if row.baseline is row:
        row.baseline = _own_seed_row(row, rows) or row
    if row.baseline is None:
        work = ", ".join(f"{name}={row.settings[name]}" for name in SAME_WORK_SETTINGS[:4])
        row.speedup_note = no_baseline_note(spec, row, rows, work)
        return
    if row.samples_per_s is None:
        row.speedup_note = "no steady-state epochs (epoch 1 is warm-up)"
        return
    row.speedup, source = process_interval(row.baseline, row)
    level = row.speedup.level
    row.speedup_note = f"{level_text(level)} interval from {source}" if level is not None else "one sample: no interval"
    if choices := own_choices(row.settings, row.baseline.settings):
        row.speedup_note += f"; each device at its best ({choices}), not the same work"
    own_steps, baseline_steps = row.settings["max_steps"], row.baseline.settings["max_steps"]
    if own_steps != baseline_steps:
        row.speedup_note += (
            f"; against {row.baseline.label}, whose epochs were capped at {baseline_steps or 'no'} "
            f"steps (this row's at {own_steps or 'no'})"
        )
