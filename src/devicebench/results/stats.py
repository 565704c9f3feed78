"""Medians, spreads, the coefficient of variation, and speedups with a rank interval of stated, exact level.

A speedup is the ratio of two medians of steady-state throughput (samples/s). Its interval is a rank interval on
log throughput (the Mann-Whitney, or Hodges-Lehmann, interval for a shift): of the n·m ratios candidate_i /
baseline_j between every sample of one side and every sample of the other, it keeps the k-th smallest and the k-th
largest. Nothing is resampled. The samples are the steady epochs of each side, or each repeat's median when both
sides have two repeats or more, each a fresh process (results/repetition.py `process_interval`).

Why not a bootstrap: devicebench's default is one repeat of two steady epochs a side, and a percentile bootstrap of
two samples is the span of the extreme ratios whatever level it is asked for. Its real coverage there is 2/3, not
95% (benchmarks/interval_coverage.py measures it). The rank interval's coverage is exact whatever the shape of the
noise, as long as it scales both sides' throughput alike (the same noise in log throughput on each side): the k-th
ends cover the true ratio with probability 1 - 2·P(U < k), U the Mann-Whitney count of pairs under no difference.
`speedup` picks the largest k that keeps that level at CONFIDENCE or above; where even k = 1 (the span of the
extreme ratios) cannot reach it, it gives that span and its exact level, and `Speedup.level` says which. Two
samples a side hold 67%, 2 and 3 hold 80%, 3 a side 90%, 4 a side 97%. Measured coverage (4,000 simulated
experiments, benchmarks/interval_coverage.py): 66.6% at 2 a side, 89.8% at 3, 97.4% at 4, 95.2% at 16 under
lognormal noise; outlier blocks alike; a few points less where one side is six times noisier; far less on a
drifting machine, which only repeats sample (docs/measurement.md, rule 4).

Epochs of one process are not independent draws: each process has its own memory layout, allocator history,
thread placement and clock state, and its epochs share that luck (3-18% between fresh processes on a 2-core VM,
1-3% between the epochs of one). A rank interval over the steady epochs of one process a side therefore holds
its level only for the ratio those two processes would show (`Speedup.within_one_process`). Where the machine's
run-to-run variation was measured (`devicebench calibrate`: the coefficient of variation between several fresh
processes), `speedup_across_processes` takes it into account: in log throughput, the process term
ln(1 + cv_b^2) / P + ln(1 + cv_c^2) / Q (P and Q processes a side, each side's machine's CV) is added to the
epochs' own, s^2 (1/n + 1/m) with s^2 their pooled variance, and the interval is the ratio times
exp(± t sqrt(sum)), t Student's at CONFIDENCE with the Welch-Satterthwaite degrees of freedom of the estimated
terms (each machine's as `between_process_cv` gives them, fewer than its processes; the epochs' n + m - 2).
Measured coverage with 3% process-level and 2% epoch-level noise, two steady epochs a side and each machine term
measured from 5 processes: 96.7% for the 95% stated (benchmarks/interval_coverage.py, docs/measurement.md).

    python -c "from devicebench.results.stats import speedup; print(speedup([100, 102, 98], [800, 790, 810]))"
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

CONFIDENCE = 0.95  # the level an interval is given at wherever its sample can hold it
EXACT_COUNT_LIMIT = 60  # samples on both sides together up to which the rank count's distribution is worked out
LARGEST_POWER = math.log(sys.float_info.max)  # of e, the largest a float holds


@dataclass(frozen=True)
class Spread:
    median: float
    low: float  # the minimum
    high: float  # the maximum
    count: int


@dataclass(frozen=True)
class Speedup:
    ratio: float  # median(candidate) / median(baseline); above 1 means the candidate is faster
    low: float | None  # rank interval; None when either side has a single sample
    high: float | None
    level: float | None = None  # the interval's exact coverage (CONFIDENCE or above where the sample allows)
    # True: the interval holds `level` only for the ratio of the processes measured, not of fresh ones (the
    # epochs of one process a side, with the machine's run-to-run variation not measured)
    within_one_process: bool = False


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("spread of no values")
    return Spread(median=statistics.median(values), low=min(values), high=max(values), count=len(values))


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean (a fraction); None with fewer than two values."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def level_text(level: float) -> str:
    """`95%` for an interval that holds CONFIDENCE or more, else its own level: `67%`."""
    return f"{CONFIDENCE:.0%}" if level >= CONFIDENCE else f"{level:.0%}"


def speedup(baseline_rates: Sequence[float], candidate_rates: Sequence[float]) -> Speedup:
    """How many times faster the candidate ran, from two samples of throughput (higher is faster)."""
    if not baseline_rates or not candidate_rates:
        raise ValueError("a speedup needs at least one measurement on each side")
    ratio = statistics.median(candidate_rates) / statistics.median(baseline_rates)
    if len(baseline_rates) < 2 or len(candidate_rates) < 2:
        return Speedup(ratio=ratio, low=None, high=None)
    rank, level = interval_rank(len(baseline_rates), len(candidate_rates))
    ratios = np.sort(np.divide.outer(np.asarray(candidate_rates, float), np.asarray(baseline_rates, float)), axis=None)
    return Speedup(ratio=ratio, low=float(ratios[rank - 1]), high=float(ratios[-rank]), level=level)


@dataclass(frozen=True)
class RunToRun:
    """A machine's measured run-to-run variation: the coefficient of variation (a fraction) between fresh processes
    of one short workload's steady throughput, its epochs' own variation taken out (`between_process_cv`;
    engine/run_to_run.py measures it)."""

    cv: float
    freedom: float  # its degrees of freedom: fewer than the processes it comes from (`between_process_cv`)


def between_process_cv(process_epoch_rates: Sequence[Sequence[float]]) -> RunToRun:
    """The CV of a process's level, from the steady throughputs of each of several processes (two or more epochs
    each, as many in each): in log throughput, the variance of the processes' means less the share of it their
    epochs' own variance explains (within / epochs; the one-way random-effects estimate), at least 0, with its
    Welch-Satterthwaite degrees of freedom. Left in, the epochs' share would be counted twice by an interval that
    also takes the epochs' variance."""
    logs = np.log(np.asarray(process_epoch_rates, float))
    processes, epochs = logs.shape
    means = float(logs.mean(axis=1).var(ddof=1))
    within = float(logs.var(axis=1, ddof=1).mean()) / epochs
    between = max(means - within, 0.0)
    spread_of_between = means**2 / (processes - 1) + within**2 / (processes * (epochs - 1))
    freedom = between**2 / spread_of_between if between else processes - 1.0
    return RunToRun(cv=math.sqrt(math.expm1(between)), freedom=max(freedom, 1.0))


def speedup_across_processes(
    baseline_rates: Sequence[float],
    candidate_rates: Sequence[float],
    baseline_run_to_run: RunToRun,
    candidate_run_to_run: RunToRun,
    *,
    baseline_processes: int = 1,
    candidate_processes: int = 1,
) -> Speedup:
    """As `speedup`, from the steady epochs of a few processes a side, with each side's machine's run-to-run
    variation added to the epochs' own (the module's docstring says how): a CONFIDENCE interval for the ratio fresh
    processes would show. No interval with fewer than two samples on a side, as for `speedup`."""
    ratio = statistics.median(candidate_rates) / statistics.median(baseline_rates)
    if len(baseline_rates) < 2 or len(candidate_rates) < 2:
        return Speedup(ratio=ratio, low=None, high=None)
    epoch_freedom = len(baseline_rates) + len(candidate_rates) - 2
    squares = sum(float(np.sum((logs - logs.mean()) ** 2)) for logs in map(np.log, (baseline_rates, candidate_rates)))
    epoch_variance = squares / epoch_freedom * (1 / len(baseline_rates) + 1 / len(candidate_rates))
    # of a lognormal whose CV is the measured one, each side's over its processes
    process_variances = [
        2 * math.log(math.hypot(1.0, side.cv)) / processes  # ln(1 + cv^2), never overflowing
        for side, processes in ((baseline_run_to_run, baseline_processes), (candidate_run_to_run, candidate_processes))
    ]
    total = epoch_variance + sum(process_variances)
    spread_of_total = epoch_variance**2 / epoch_freedom + sum(
        variance**2 / max(side.freedom, 1.0)  # at least one: as between_process_cv gives it, whatever a record says
        for variance, side in zip(process_variances, (baseline_run_to_run, candidate_run_to_run), strict=True)
    )
    freedom = total**2 / spread_of_total if spread_of_total else math.inf  # Welch-Satterthwaite
    from scipy.special import stdtrit  # here: every command that reads results would otherwise import scipy

    half_width = float(stdtrit(freedom, (1 + CONFIDENCE) / 2)) * math.sqrt(total)
    centre = math.log(ratio)
    return Speedup(
        ratio=ratio, low=_finite_exp(centre - half_width), high=_finite_exp(centre + half_width), level=CONFIDENCE
    )


def _finite_exp(power: float) -> float:
    """e to `power`, the largest float where that is larger: figures at the bounds of what a record holds must not
    make an interval end infinite."""
    return math.exp(min(power, LARGEST_POWER))


@cache
def interval_rank(baseline_count: int, candidate_count: int) -> tuple[int, float]:
    """The rank k of the interval's ends among the ordered pairwise ratios, and its exact coverage."""
    rank = 1
    while rank < baseline_count * candidate_count / 2 and rank_level(baseline_count, candidate_count, rank + 1) >= (
        CONFIDENCE
    ):
        rank += 1
    return rank, rank_level(baseline_count, candidate_count, rank)


def rank_level(baseline_count: int, candidate_count: int, rank: int) -> float:
    """Coverage of the interval from the rank-th smallest to the rank-th largest pairwise ratio: 1 - 2·P(U < rank)."""
    if baseline_count + candidate_count <= EXACT_COUNT_LIMIT:
        counts = _rank_count_distribution(baseline_count, candidate_count)
        return 1 - 2 * float(counts[:rank].sum() / counts.sum())
    pairs = baseline_count * candidate_count  # beyond the exact limit, U is normal to well under a point
    deviation = math.sqrt(pairs * (baseline_count + candidate_count + 1) / 12)
    below = 0.5 * math.erfc(-((rank - 0.5 - pairs / 2) / deviation) / math.sqrt(2))
    return 1 - 2 * below


@cache
def _rank_count_distribution(first_count: int, second_count: int) -> np.ndarray:
    """How many orderings of the two samples give each value of U (pairs where a first beats a second).

    The largest of all values is either one of the first sample (it beats all `second_count` of the others) or
    one of the second (it beats none), which gives the recursion."""
    if first_count == 0 or second_count == 0:
        return np.ones(1)
    beats_all = np.concatenate([np.zeros(second_count), _rank_count_distribution(first_count - 1, second_count)])
    beats_none = _rank_count_distribution(first_count, second_count - 1)
    counts = np.zeros(first_count * second_count + 1)
    counts[: len(beats_all)] += beats_all
    counts[: len(beats_none)] += beats_none
    return counts


# what every table, chart and note calls the interval; the level printed is the one `speedup` computed
INTERVAL_NAME = f"{CONFIDENCE:.0%} rank interval"
INTERVAL_NOTE = (
    f"{INTERVAL_NAME}, or the lower level printed after it where too few samples hold {CONFIDENCE:.0%}; it holds for "
    "fresh processes with 2 repeats or more a side (each a process) or with this machine's run-to-run variation "
    "measured (devicebench calibrate), else only within the processes measured, marked 'in one process'"
)
