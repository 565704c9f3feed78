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
import statistics
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
    name_differences,
    resolved_definitions,
    run_settings,
    software_difference,
    unrecorded_note,
)
from devicebench.results.prices import Prices
from devicebench.results.schema import EpochRecord, Result, RunRecord
from devicebench.results.speed_settings import SAME_WORK_SETTINGS, setting_text
from devicebench.results.stats import Speedup, Spread, coefficient_of_variation, level_text, speedup, spread

DEFAULT_BASELINE = "cpu"
# Above this, steady epoch time varies too much across repeats to trust the row. It flags the sample's CV, not the
# machine's: from 2 values a row of true CV 2% is flagged 1.2% of the time, 5% 32%, 10% 62% (tests/test_stats.py).
NOISY_EPOCH_TIME_CV = 0.05
SECONDS_PER_HOUR = 3600.0
JOULES_PER_WATT_HOUR = 3600.0
TERA = 1e12  # FLOP/s per TFLOP/s
ID_DIGITS_SHOWN = 6  # of a machine id, after a name that two compared machines share


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
    shared_name: bool = False  # another machine among the compared results has this one's name

    @property
    def machine_id(self) -> str:
        return self.machine["machine_id"]

    @property
    def plain_name(self) -> str:  # $DEVICEBENCH_MACHINE where it ran, else its hostname
        return self.machine.get("machine_name") or self.machine["hostname"]

    @property
    def machine_name(self) -> str:
        """The machine's name, with the start of its id where another compared machine has the same name
        (`vm@3f2a1b`): two cloud VMs both called `vm` must not read as one machine."""
        return f"{self.plain_name}@{self.machine_id[:ID_DIGITS_SHOWN]}" if self.shared_name else self.plain_name

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
            and baseline.machine_id == self.machine_id
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
        a fraction), across each repeat's median steady epoch time, or across the steady epochs themselves when
        there is a single repeat (`epoch_time_cv_basis` says which). None with fewer than two values."""
        return coefficient_of_variation(self._repeatability_sample()[0])

    @property
    def epoch_time_cv_basis(self) -> str:
        """What `epoch_time_cv` varies across: `5 repeats`, or `4 steady epochs of one repeat`."""
        return self._repeatability_sample()[1]

    def _repeatability_sample(self) -> tuple[list[float], str]:
        medians = per_repeat_medians(self, "train_time_s")
        if len(medians) >= 2:
            return medians, f"{len(medians)} repeats"
        # per step: the same variation as the epochs' times when they are equally long, and a fair one when a time
        # budget shortened some of them (devicebench/budget.py)
        times = [epoch.step_time_ms for epoch in self.steady_epochs]
        return times, f"{len(times)} steady epochs of one repeat"

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
    results: Iterable[Result], *, baseline: str = DEFAULT_BASELINE, prices: Prices | None = None
) -> dict[str, list[Row]]:
    """Rows per workload, in the order first seen, each with its speedup against `baseline`.

    `baseline` is a device ("cpu", "cuda:0") on each row's own machine, or "MACHINE/DEVICE" for one fixed row.
    """
    results = list(results)
    rows: dict[tuple, Row] = {}
    definitions = iter(resolved_definitions(results))
    for result in results:
        for run in result.runs:
            settings = {**run_settings(result, run), "definition": next(definitions)}
            key = (run.workload, result.machine["machine_id"], run.device, json.dumps(settings, sort_keys=True))
            if key not in rows:
                rows[key] = Row(run.workload, result.machine, run.device, run.device_name, settings)
            rows[key].runs.append(run)
    ids_named: dict[str, set[str]] = {}
    for row in rows.values():
        ids_named.setdefault(row.plain_name, set()).add(row.machine_id)
    by_workload: dict[str, list[Row]] = {}
    for row in rows.values():
        row.shared_name = len(ids_named[row.plain_name]) > 1
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


def _same_work(first: Row, second: Row, apart_from: frozenset[str] = frozenset()) -> bool:
    own_choice = {"precision", *apart_from} if first.settings["mode"] == "tuned" else set(apart_from)
    if first.settings["batch_size_auto"]:
        own_choice.add("batch_size")
    definitions = {first.settings["definition"], second.settings["definition"]} - {None}  # unknown: either
    return len(definitions) < 2 and all(
        first.settings[name] == second.settings[name] for name in SAME_WORK_SETTINGS if name not in own_choice
    )


def _find_baseline(row: Row, rows: list[Row], spec: str) -> Row | None:
    machine, _, device = spec.rpartition("/")
    candidates = [
        other
        for other in rows
        if other.device == device
        # a fixed machine by its name as tables show it (`vm@3f2a1b`: `vm` alone would pick one of two unsaid) or id
        and (other.machine_id == row.machine_id if not machine else machine in (other.machine_name, other.machine_id))
        and _same_work(row, other)
        and other.samples_per_s is not None
    ]
    return _closest(row, candidates) if candidates else None


def _closest(row: Row, candidates: list[Row]) -> Row:
    """Of rows doing `row`'s work, the one to set it against: under the same software where there is one."""
    candidates = [other for other in candidates if not software_difference(row.settings, other.settings)] or candidates
    for preferred in ("world_size", "max_steps", "threads"):  # one process (what scaling is measured against), then
        wanted = 1 if preferred == "world_size" else row.settings[preferred]  # the same length and threads
        candidates = [other for other in candidates if other.settings[preferred] == wanted] or candidates
    return candidates[0]


def _own_seed_row(row: Row, rows: list[Row]) -> Row | None:
    """For a tuned row, the seed-mode row of the same machine and device doing the same work (tuned mode may pick its
    precision), or None: a tuned row sets its gain over seed mode against it, never a second 1.00x."""
    if row.settings["mode"] != "tuned":
        return None
    seeds = [
        other
        for other in rows
        if other.settings["mode"] == "seed"
        and other.machine_id == row.machine_id
        and other.device == row.device
        and other.samples_per_s is not None
        and _same_work(row, other, apart_from=frozenset({"mode"}))
    ]
    return _closest(row, seeds) if seeds else None


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
            seed_rates, tuned_rates, _ = _interval_samples(seed, tuned)
            gains.append(TunedGain(tuned, seed, speedup(seed_rates, tuned_rates)))
    return gains


def _attach_speedup(row: Row, rows: list[Row], spec: str) -> None:
    row.baseline = _find_baseline(row, rows, spec)
    if row.baseline is row:
        row.baseline = _own_seed_row(row, rows) or row
    if row.baseline is None:
        machine = spec.rpartition("/")[0]
        where = f"on {machine or row.machine_name}"
        if any(other.shared_name and other.plain_name == machine for other in rows):
            where += f" (several machines are called {machine}: name one as the table does, {machine}@ID)"
        work = ", ".join(f"{name}={row.settings[name]}" for name in SAME_WORK_SETTINGS[:4])
        row.speedup_note = f"no {spec.rpartition('/')[2]} run {where} with the same work ({work})"
        return
    if row.samples_per_s is None:
        row.speedup_note = "no steady-state epochs (epoch 1 is warm-up)"
        return
    baseline_rates, own_rates, source = _interval_samples(row.baseline, row)
    row.speedup = speedup(baseline_rates, own_rates)
    level = row.speedup.level
    row.speedup_note = f"{level_text(level)} interval from {source}" if level is not None else "one sample: no interval"
    own_steps, baseline_steps = row.settings["max_steps"], row.baseline.settings["max_steps"]
    if own_steps != baseline_steps:
        row.speedup_note += (
            f"; against {row.baseline.label}, whose epochs were capped at {baseline_steps or 'no'} "
            f"steps (this row's at {own_steps or 'no'})"
        )


def per_repeat_medians(row: Row, measure: str) -> list[float]:
    """The median of `measure` (an EpochRecord field) over each repeat's steady epochs, one value per repeat."""
    return [
        statistics.median(getattr(epoch, measure) for epoch in run.steady_epochs)
        for run in row.runs
        if run.steady_epochs
    ]


def _interval_samples(baseline: Row, row: Row) -> tuple[list[float], list[float], str]:
    """Per-repeat steady medians when both sides have two repeats or more, else every steady epoch."""
    baseline_repeats = per_repeat_medians(baseline, "samples_per_s")
    own_repeats = per_repeat_medians(row, "samples_per_s")
    if len(baseline_repeats) >= 2 and len(own_repeats) >= 2:
        return baseline_repeats, own_repeats, "repeats"
    return [e.samples_per_s for e in baseline.steady_epochs], [e.samples_per_s for e in row.steady_epochs], "epochs"
