"""Medians, spreads and speedups with a bootstrap confidence interval.

A speedup is the ratio of two medians of steady-state throughput (samples/s). Its 95% interval comes from
resampling, with replacement, the steady epochs of every repeat on each side and taking the ratio of the
resampled medians, many times over.

    python -c "from devicebench.results.stats import speedup; print(speedup([100, 102, 98], [800, 790, 810]))"
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Spread:
    median: float
    low: float  # the minimum
    high: float  # the maximum
    count: int


@dataclass(frozen=True)
class Speedup:
    ratio: float  # median(candidate) / median(baseline); above 1 means the candidate is faster
    low: float | None  # 95% bootstrap interval; None when either side has a single sample
    high: float | None


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("spread of no values")
    return Spread(median=statistics.median(values), low=min(values), high=max(values), count=len(values))


def speedup(baseline_rates: Sequence[float], candidate_rates: Sequence[float], *, seed: int = 0) -> Speedup:
    """How many times faster the candidate ran, from two samples of throughput (higher is faster)."""
    if not baseline_rates or not candidate_rates:
        raise ValueError("a speedup needs at least one measurement on each side")
    ratio = statistics.median(candidate_rates) / statistics.median(baseline_rates)
    if len(baseline_rates) < 2 or len(candidate_rates) < 2:
        return Speedup(ratio=ratio, low=None, high=None)
    rng = np.random.default_rng(seed)
    baseline = np.asarray(baseline_rates, dtype=float)
    candidate = np.asarray(candidate_rates, dtype=float)
    baseline_medians = np.median(rng.choice(baseline, (BOOTSTRAP_RESAMPLES, len(baseline))), axis=1)
    candidate_medians = np.median(rng.choice(candidate, (BOOTSTRAP_RESAMPLES, len(candidate))), axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100  # percent in each tail
    low, high = np.percentile(candidate_medians / baseline_medians, [tail, 100 - tail])
    return Speedup(ratio=ratio, low=float(low), high=float(high))
