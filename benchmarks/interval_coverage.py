"""How often does the speedup's interval hold the true ratio? A seeded simulation of devicebench's own samples.

Each simulated experiment draws the steady-epoch throughputs of a baseline and a candidate whose true speedup is
TRUE_RATIO, under a noise model, and asks results/stats.py `speedup` for its interval; the coverage is the share
of experiments whose interval holds TRUE_RATIO, printed beside the level `speedup` states. The sample sizes are
devicebench's: the quick suite gives 2 steady epochs a side (3 epochs, the first warm-up), and so do 2 repeats
(per-repeat medians), 3 and 4 repeats give 3 and 4, and the seeds' own epochs 5 (translation) to 16 (mnist).
For comparison, the percentile bootstrap devicebench printed as "95%" before (2,000 resamples of the ratio of
medians) is measured on the same experiments.

Noise models, all in log throughput per epoch (one block of steps):
- lognormal: 3% on both sides, independent;
- outlier blocks: as lognormal, and one block in 20 runs 30% slow (another program woke up);
- unequal noise: 1% on the baseline, 6% on the candidate (a jittery accelerator beside a steady CPU);
- drifting machine: each side's level wanders, a random walk of 2% a block from the true level, under 1% noise.

The rank interval is exact, whatever the noise's shape, when both sides' noise is alike and independent
(lognormal, outlier blocks); unequal noise and drift break that, and the table shows by how much.

    python benchmarks/interval_coverage.py --experiments 4000
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from devicebench.results.stats import speedup

TRUE_RATIO = 8.0  # candidate samples/s over baseline samples/s
BASELINE_RATE = 100.0  # samples/s
SIZES = ((2, 2), (3, 3), (4, 4), (5, 5), (9, 9), (16, 16))  # steady samples (baseline, candidate)
BOOTSTRAP_RESAMPLES = 2000  # as results/stats.py used

# log-throughput noise of `count` blocks for `experiments` runs of one side (0: baseline, 1: candidate)
NoiseModel = Callable[[np.random.Generator, int, int, int], np.ndarray]


def lognormal(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    return rng.normal(0.0, 0.03, (experiments, count))


def outlier_blocks(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    slow = rng.random((experiments, count)) < 0.05  # one block in 20
    return lognormal(rng, experiments, count, side) + np.where(slow, np.log(0.7), 0.0)


def unequal_noise(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    return rng.normal(0.0, 0.06 if side else 0.01, (experiments, count))


def drifting_machine(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    walk = np.cumsum(rng.normal(0.0, 0.02, (experiments, count)), axis=1)
    return walk + rng.normal(0.0, 0.01, (experiments, count))


NOISE_MODELS: dict[str, NoiseModel] = {
    "lognormal 3%": lognormal,
    "outlier blocks": outlier_blocks,
    "unequal noise": unequal_noise,
    "drifting machine": drifting_machine,
}


def simulate(
    noise: NoiseModel, baseline_count: int, candidate_count: int, experiments: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Throughputs, one experiment a row: (experiments, baseline_count) and (experiments, candidate_count)."""
    rng = np.random.default_rng(seed)
    baseline = BASELINE_RATE * np.exp(noise(rng, experiments, baseline_count, 0))
    candidate = BASELINE_RATE * TRUE_RATIO * np.exp(noise(rng, experiments, candidate_count, 1))
    return baseline, candidate


def rank_coverage(baseline: np.ndarray, candidate: np.ndarray) -> tuple[float, float]:
    """The share of experiments whose `speedup` interval holds TRUE_RATIO, and the level it stated."""
    intervals = [speedup(list(base), list(cand)) for base, cand in zip(baseline, candidate, strict=True)]
    held = [value.low <= TRUE_RATIO <= value.high for value in intervals if value.low is not None]
    return float(np.mean(held)), float(intervals[0].level or 0.0)


def bootstrap_coverage(baseline: np.ndarray, candidate: np.ndarray, seed: int) -> float:
    """The same share for the percentile bootstrap of the ratio of medians, asked for 95%."""
    rng = np.random.default_rng(seed)
    held = []
    for base, cand in zip(baseline, candidate, strict=True):
        base_medians = np.median(rng.choice(base, (BOOTSTRAP_RESAMPLES, len(base))), axis=1)
        cand_medians = np.median(rng.choice(cand, (BOOTSTRAP_RESAMPLES, len(cand))), axis=1)
        low, high = np.percentile(cand_medians / base_medians, [2.5, 97.5])
        held.append(low <= TRUE_RATIO <= high)
    return float(np.mean(held))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=4000, help="simulated experiments per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-bootstrap", action="store_true", help="skip the old bootstrap (the slow column)")
    arguments = parser.parse_args()
    standard_error = np.sqrt(0.95 * 0.05 / arguments.experiments)
    print(f"{arguments.experiments} experiments a cell; binomial standard error at 95%: {standard_error:.1%}")
    print(f"{'noise model':<18} {'n a side':>8} {'stated':>7} {'rank holds':>10} {'old bootstrap (95%)':>20}")
    for name, noise in NOISE_MODELS.items():
        for baseline_count, candidate_count in SIZES:
            baseline, candidate = simulate(
                noise, baseline_count, candidate_count, arguments.experiments, arguments.seed
            )
            held, level = rank_coverage(baseline, candidate)
            old = "—" if arguments.no_bootstrap else f"{bootstrap_coverage(baseline, candidate, arguments.seed):.1%}"
            sizes = f"{baseline_count}/{candidate_count}"
            print(f"{name:<18} {sizes:>8} {level:>7.1%} {held:>10.1%} {old:>20}")


if __name__ == "__main__":
    main()
