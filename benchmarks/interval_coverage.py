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

The process-level table adds to each model a term the epochs of one process share: each fresh process's throughput
is offset by lognormal noise of --process-cv (3% by default; 3-18% measured between fresh processes on a 2-core
VM). It simulates devicebench's sessions: one process a side with 2 to 16 steady epochs (`--repeats 1`), or 2 to
4 repeats a side, each a fresh process (its median is the sample). For one process a side it measures three
intervals: the rank interval as printed without a measured machine term, against the true ratio and against the
ratio of the two processes it holds for ("within one process"), and `speedup_across_processes` with the machine's
run-to-run CV measured for each side as `devicebench calibrate` measures it (CALIBRATION_PROCESSES fresh processes of
CALIBRATION_EPOCHS steady epochs each, under the same model), against the true ratio.

    python benchmarks/interval_coverage.py --experiments 4000
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from devicebench.engine.run_to_run import CALIBRATION_EPOCHS, CALIBRATION_PROCESSES
from devicebench.results.stats import RunToRun, Speedup, between_process_cv, speedup, speedup_across_processes

TRUE_RATIO = 8.0  # candidate samples/s over baseline samples/s
BASELINE_RATE = 100.0  # samples/s
SIZES = ((2, 2), (3, 3), (4, 4), (5, 5), (9, 9), (16, 16))  # steady samples (baseline, candidate)
PROCESS_CV = 0.03  # the default process-level term: lognormal, each fresh process's own offset
SESSIONS = ((1, 2), (1, 3), (1, 4), (1, 16), (2, 2), (3, 2), (4, 2))  # (processes, steady epochs each) a side
BOOTSTRAP_RESAMPLES = 2000  # as results/stats.py used

# log-throughput noise of `count` blocks for `experiments` runs of one side (0: baseline, 1: candidate)
NoiseModel = Callable[[np.random.Generator, int, int, int], np.ndarray]


def lognormal(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    return rng.normal(0.0, 0.03, (experiments, count))


def lognormal_two_percent(rng: np.random.Generator, experiments: int, count: int, side: int) -> np.ndarray:
    return rng.normal(0.0, 0.02, (experiments, count))  # within one process on a 2-core VM: 1-3%


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
    "lognormal 2%": lognormal_two_percent,
    "outlier blocks": outlier_blocks,
    "unequal noise": unequal_noise,
    "drifting machine": drifting_machine,
}


def simulate(
    noise: NoiseModel, baseline_count: int, candidate_count: int, experiments: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Throughputs of one process a side without a process-level term, one experiment a row: (experiments,
    baseline_count) and (experiments, candidate_count)."""
    rng = np.random.default_rng(seed)
    baseline = _side(rng, noise, experiments, 1, baseline_count, 0, 0.0)[0][:, 0]
    candidate = _side(rng, noise, experiments, 1, candidate_count, 1, 0.0)[0][:, 0]
    return baseline, candidate


@dataclass(frozen=True)
class Sessions:
    """Simulated sessions of both sides, one experiment a row, and what each one's processes drew."""

    baseline: np.ndarray  # samples/s: (experiments, processes, steady epochs)
    candidate: np.ndarray
    process_ratio: np.ndarray  # (experiments,): the ratio the processes drawn would show over endless epochs
    # per experiment, each side's machine term as a calibration under the same noise measured it
    run_to_run: list[tuple[RunToRun, RunToRun]]


def simulate_sessions(
    noise: NoiseModel, processes: int, epochs: int, experiments: int, seed: int, process_cv: float
) -> Sessions:
    """`processes` fresh processes a side of `epochs` steady epochs each, every process offset by its own
    lognormal draw of `process_cv`, and a calibration of the machine's run-to-run CV per experiment."""
    rng = np.random.default_rng(seed)
    baseline, baseline_offsets = _side(rng, noise, experiments, processes, epochs, 0, process_cv)
    candidate, candidate_offsets = _side(rng, noise, experiments, processes, epochs, 1, process_cv)
    calibrations = [
        _side(rng, noise, experiments, CALIBRATION_PROCESSES, CALIBRATION_EPOCHS, side, process_cv)[0]
        for side in (0, 1)
    ]
    return Sessions(
        baseline=baseline,
        candidate=candidate,
        process_ratio=TRUE_RATIO * np.exp(candidate_offsets.mean(axis=1) - baseline_offsets.mean(axis=1)),
        run_to_run=[
            (between_process_cv(baseline_rates), between_process_cv(candidate_rates))
            for baseline_rates, candidate_rates in zip(*calibrations, strict=True)
        ],
    )


def _side(
    rng: np.random.Generator,
    noise: NoiseModel,
    experiments: int,
    processes: int,
    epochs: int,
    side: int,
    process_cv: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One side's samples/s (experiments, processes, epochs) and each process's log offset (experiments,
    processes)."""
    offsets = rng.normal(0.0, np.sqrt(np.log1p(process_cv**2)), (experiments, processes))
    epoch_noise = noise(rng, experiments * processes, epochs, side).reshape(experiments, processes, epochs)
    rate = BASELINE_RATE * (TRUE_RATIO if side else 1.0)
    return rate * np.exp(offsets[:, :, None] + epoch_noise), offsets


def session_coverage(sessions: Sessions) -> dict[str, tuple[float, float]]:
    """Per interval, (the share of experiments it held its target in, the level it stated). With one process a
    side: the rank interval against the true ratio and against the processes' own ("within one process"), and the
    interval with the measured machine term against the true ratio; with repeats, the rank interval over the
    repeats' medians against the true ratio."""
    processes = sessions.baseline.shape[1]
    if processes > 1:
        baseline, candidate = np.median(sessions.baseline, axis=2), np.median(sessions.candidate, axis=2)
        return {"repeats": _held(baseline, candidate, np.full(len(baseline), TRUE_RATIO), speedup)}
    baseline, candidate = sessions.baseline[:, 0], sessions.candidate[:, 0]
    true = np.full(len(baseline), TRUE_RATIO)
    return {
        "one process, true ratio": _held(baseline, candidate, true, speedup),
        "within one process": _held(baseline, candidate, sessions.process_ratio, speedup),
        "machine term": _held(baseline, candidate, true, speedup_across_processes, iter(sessions.run_to_run)),
    }


def _held(
    baseline: np.ndarray,
    candidate: np.ndarray,
    targets: np.ndarray,
    interval: Callable[..., Speedup],
    run_to_run: Iterator[tuple[RunToRun, RunToRun]] | None = None,
) -> tuple[float, float]:
    held, levels = [], []
    for base, cand, target in zip(baseline, candidate, targets, strict=True):
        value = interval(list(base), list(cand), *(next(run_to_run) if run_to_run else ()))
        if value.low is not None and value.high is not None:
            held.append(value.low <= target <= value.high)
            levels.append(value.level or 0.0)
    return float(np.mean(held)), float(np.mean(levels))


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
    parser.add_argument("--process-cv", type=float, default=PROCESS_CV, help="the process-level term, a fraction")
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
    print(
        f"\nWith a process-level term of {arguments.process_cv:.0%}; the machine term measured from "
        f"{CALIBRATION_PROCESSES} processes of {CALIBRATION_EPOCHS} steady epochs:"
    )
    print(f"{'noise model':<18} {'processes x epochs':>18}  interval: stated level, share held")
    for name, noise in NOISE_MODELS.items():
        for processes, epochs in SESSIONS:
            sessions = simulate_sessions(
                noise, processes, epochs, arguments.experiments, arguments.seed, arguments.process_cv
            )
            cells = "; ".join(
                f"{interval} {level:.1%}, {held:.1%}" for interval, (held, level) in session_coverage(sessions).items()
            )
            print(f"{name:<18} {f'{processes} x {epochs}':>18}  {cells}")


if __name__ == "__main__":
    main()
