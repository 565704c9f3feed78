"""Tuned mode: each device runs the same model, data and samples as well as it can, and every choice is recorded.

Seed mode trains as the seeds did (fp32, eager, default settings). Tuned mode changes only *how* a step runs,
never what it computes: the same model, initial weights, batches and optimizer, so accuracy must stay the same
within noise (tests/test_tuning.py proves it on the real MNIST digits).

Always on where they apply:
- on a GPU, a fused optimizer step (one kernel over all parameters instead of a loop over tensors) and
  `channels_last` activations for convolutional nets (the layout cuDNN's tensor-core convolutions prefer): on an
  H200 neither made a step slower beyond the trial's spread (benchmarks/tuning_switches.py; a CPU trials both,
  below, because there each made catdog-original slower);
- on CUDA, TF32 matmuls for fp32 and cuDNN autotuning; the dataset held on the device as uint8 when it fits;
- on Linux CPUs, a memory allocator that keeps freed memory: glibc returns every block above 128 KiB-32 MiB to
  the kernel when it is freed and page-faults it back in on the next step, which costs up to half of a step
  for a 12M-parameter MLP on 2 cores (jemalloc and tcmalloc, the usual advice, avoid it the same way).

Measured and kept only when faster, on a short trial of the real batches before training (`choose_tuning`):
on a CPU the fused optimizer step and `channels_last`, each off and on; bf16 autocast, offered only where the
device computes bf16 natively (AVX-512 BF16 or AMX on a CPU, a GPU that supports it); `torch.compile`
(offered on CUDA; on a CPU only when asked for, because on the CPUs we measured inductor was slower for every
seed model and takes 10-30 s to compile); and, on CUDA, the whole training step captured once as a CUDA graph and
replayed (engine/step_graph.py), eager or compiled: on an H200 the seed models' eager steps were the host's
launches, not the GPU's work. With the compiled forward inside it, the graph is what
`torch.compile(mode="reduce-overhead")` would give and more: the optimizer step and the Python between the forward
and backward passes are in it too. A model the graph cannot capture fails its option, which the trial names.

This module makes the choices; engine/tuning_applied.py applies the one chosen to a run.

    devicebench run mnist-cnn2 --mode tuned --devices cpu --max-steps 100
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import platform
import statistics
import textwrap
from collections.abc import Callable, Generator, Iterable, Iterator

import psutil
import torch
from torch import nn

from devicebench.choices import TrainingPrecision
from devicebench.data.pipeline import Batch, Batches, usable_cores
from devicebench.devices import is_out_of_memory, native_bf16
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.step_graph import GRAPH_WARMUP_STEPS
from devicebench.engine.timing import Stopwatch
from devicebench.engine.tuning_choices import (  # the choices as data: torch-free, for the tables
    Tuning,
)

# per candidate, all untimed but the last, which sizes the first block: allocation, kernel selection, compilation,
# and a graphed step's eager steps, its capture and first replay
TRIAL_WARMUP_STEPS = GRAPH_WARMUP_STEPS + 2
TRIAL_ROUNDS = 5  # timed blocks per candidate, at least: the spread of their rates is the trial's noise
TRIAL_SECONDS = 1.0  # each candidate is timed for at least this long in all ...
TRIAL_MIN_STEPS = 20  # ... and over at least this many steps
SLOWEST_AUTO_STEP_S = 1.0  # --batch-size auto stops before a size whose step takes longer: 20 of them take 20 s
FAILURE_MESSAGE_CHARS = 100  # of a failed candidate's error message, what its note quotes


def tuned_threads() -> int:
    """One torch thread per physical core this process may use: a second hardware thread on the same core only
    competes for its vector units."""
    usable = usable_cores()
    physical = psutil.cpu_count(logical=False) or usable
    logical = psutil.cpu_count(logical=True) or usable
    return max(1, min(usable, round(usable * physical / logical)))


def base_tuning(device: torch.device, model: nn.Module, *, resident_possible: bool) -> Tuning:
    """The choices that apply to `model` on `device` without measuring."""
    cuda = device.type == "cuda"
    return Tuning(
        channels_last=any(isinstance(module, nn.Conv2d) for module in model.modules()),
        fused_optimizer=True,  # dropped by `tuned_setup` for an optimizer that has no fused step on this device
        tf32_matmul=cuda,
        tf32_cudnn=cuda,
        cudnn_benchmark=cuda,
        device_resident=cuda and resident_possible,
        allocator_keeps_memory=device.type == "cpu" and platform.libc_ver()[0] == "glibc",
    )


def candidates(
    base: Tuning,
    device: torch.device,
    precision: str,
    compile_choice: str,
    *,
    trial_switches: bool | None = None,
    step_graph: bool = False,
) -> list[Tuning]:
    """The tunings worth a trial: the plainest first, so that it wins ties.

    On a CPU the channels_last layout (for a model with convolutions) and the fused optimizer step are tried too,
    off and on: measured on a 2-core AVX2 EPYC they made catdog-original slower (408-433 samples/s plain, 345-369
    with channels_last, 313-391 with the fused Adam; issue 33), so a CPU keeps them only where its own trial shows
    a gain beyond the spread. On a GPU `base`'s are kept as they are, untried: the layout of tensor cores and one
    kernel for the whole optimizer step, neither slower beyond the trial's spread on an H200 (`untried_switches`).
    `trial_switches` True tries them on any device (benchmarks/tuning_switches.py measures a GPU so).
    `step_graph` offers every option again as one CUDA graph, on CUDA only (tuned mode's run asks for it where
    `step_graph_refusal` finds nothing against it).
    """
    if precision == "auto":
        precisions: list[TrainingPrecision] = ["fp32", "bf16"] if native_bf16(device) else ["fp32"]
    else:
        precisions = [_precision(precision)]
    compiles = {"on": [True], "off": [False], "auto": [False, True] if device.type == "cuda" else [False]}
    tried = device.type == "cpu" if trial_switches is None else trial_switches
    layouts = [False, True] if tried and base.channels_last else [base.channels_last]
    fused_steps = [False, True] if tried and base.fused_optimizer else [base.fused_optimizer]
    graphs = [False, True] if step_graph and device.type == "cuda" else [False]
    return [
        dataclasses.replace(base, precision=p, compiled=c, step_graph=g, channels_last=layout, fused_optimizer=fused)
        for p, c, g, layout, fused in itertools.product(
            precisions, compiles[compile_choice], graphs, layouts, fused_steps
        )
    ]


def untried_switches(applied: Tuning, options: list[Tuning], device: torch.device) -> str:
    """The run's note on the layout and the fused step where it applied them without a trial (on a GPU), and
    the measurement that allows it; "" where it trialled them (a CPU) or applied neither."""
    untried = [
        words
        for attribute, words in (("channels_last", "channels_last"), ("fused_optimizer", "the fused optimizer step"))
        if getattr(applied, attribute) and all(getattr(option, attribute) for option in options)
    ]
    if not untried or device.type == "cpu":  # a CPU's options are only ever all on where asked so (tests)
        return ""
    return (
        f"{' and '.join(untried)} applied without a trial: on an H200 neither made a step slower beyond the "
        "trial's spread (benchmarks/tuning_switches.py, docs/measuring.md)"
    )


def _precision(name: str) -> TrainingPrecision:
    """`name` as a tuning's precision; ValueError for one tuned mode does not run (the request allows none)."""
    if name == "fp32":
        return "fp32"
    if name == "bf16":
        return "bf16"
    raise ValueError(f"tuned mode runs fp32 or bf16, not {name!r}")


def choose_tuning(
    options: list[Tuning],
    build: Callable[[Tuning], TrainingSetup],
    batches: Batches,
    watch: Stopwatch,
) -> tuple[Tuning, str]:
    """The fastest of `options` on the real batches, and a sentence saying what each one measured.

    Each option trains a fresh model (the run itself then starts again from its seeded weights), timed as
    `_Trial` says. The options take turns: in each round every option runs one timed block, and every other
    round runs in reverse order, so that clocks ramping up or a background job weigh on all of them alike.

    The first option, the plainest, is kept unless another one beats it by more than the spread: is faster in
    its slowest round than the plainest in its fastest (`_beats`). Of those that do, the one with the highest
    median is kept. The sentence gives each option's median samples/s and their range over the rounds. An
    option that fails in any way (an op with no bf16 kernel, a compile error, out of memory) is left out and
    named in it with its reason; only when every option fails does the run fail.
    """
    if len(options) == 1:
        return options[0], ""
    trials = {option: _Trial(functools.partial(build, option)) for option in options}
    failures: dict[Tuning, str] = {}
    with contextlib.closing(_full_batches(batches)) as stream:
        _warm_up(trials, stream, watch, failures)
        _time_in_turns(trials, stream, watch, failures)
    failed = [f"{_label(option, options)} {failures[option]}" for option in options if option in failures]
    if not trials:
        raise RuntimeError(f"every tuned option failed in the trial: {'; '.join(failed)}")
    rates = {option: trial.block_rates for option, trial in trials.items()}
    plainest = next(iter(rates))
    gaining = [option for option in rates if _beats(rates[option], rates[plainest])]
    kept = max(gaining, key=lambda option: statistics.median(rates[option]), default=plainest)
    fastest = max(rates, key=lambda option: statistics.median(rates[option]))
    within_spread = kept == plainest and fastest != plainest
    measured = ", ".join(
        f"{_label(option, options)} {_spread_text(option_rates)}" for option, option_rates in rates.items()
    )
    return kept, "; ".join(
        [
            f"trial samples/s: {measured}, median (range) of {len(rates[plainest])} rounds",
            *failed,
            f"kept {_label(kept, options)}"
            + (f": {_label(fastest, options)}'s gain is within the spread" if within_spread else ""),
        ]
    )


def choose_batch_size(
    first: int,
    largest: int,
    build: Callable[[], TrainingSetup],
    batches_of: Callable[[int], Batches],
    watch: Stopwatch,
) -> tuple[int, str]:
    """`--batch-size auto`: the fastest batch size, growing from `first` by doubling, and a sentence saying what
    each size measured and why the growing stopped.

    Each size is timed as an option of `choose_tuning` is (`_Trial`), on its own: sizes grow, so there is no one
    to take turns with. A doubling is kept only when it beats the size kept so far by more than the spread: is
    faster in its slowest block than that size in its fastest (`_beats`); the first that does not ends the
    growing. So does a size whose step takes longer than SLOWEST_AUTO_STEP_S, decided on its warm-up steps before
    any timed one (its trial would take minutes, and a batch that slow has long stopped paying), `largest` (the
    training set), and a size that fails, out of memory or in any other way, which is backed off from. At
    `first` a failure is the run's own.
    """
    rates: dict[int, list[float]] = {}
    kept = size = first
    while True:
        batches = batches_of(size)
        try:
            size_rates, stopped = _time_batch_size(size, build, batches, watch, fatal=size == first)
        finally:
            batches.close()
            _release_cached_memory(watch.device)  # this size's blocks, so that the next size starts clean
        if stopped is not None:
            break
        rates[size] = size_rates
        if size != first and not _beats(size_rates, rates[kept]):
            stopped = f"{size} was no faster than {kept} beyond the spread"
            break
        kept = size
        if size * 2 > largest:
            stopped = f"{size} is the most that fits the training set"
            break
        size *= 2
    measured = ", ".join(f"{tried} {_spread_text(tried_rates)}" for tried, tried_rates in rates.items())
    measured = f"{measured}, median (range) of each size's blocks" if rates else "none timed"
    return kept, f"batch sizes tried, samples/s: {measured} (stopped: {stopped}); kept {kept}"


def _time_batch_size(
    size: int, build: Callable[[], TrainingSetup], batches: Batches, watch: Stopwatch, *, fatal: bool
) -> tuple[list[float], str | None]:
    """The samples/s of each timed block of batch size `size`, or why the growing stops at it instead."""
    trials = {size: _Trial(build)}
    failures: dict[int, str] = {}
    with contextlib.closing(_full_batches(batches)) as stream:
        _warm_up(trials, stream, watch, failures, fatal=fatal)
        if size in trials and trials[size].step_s > SLOWEST_AUTO_STEP_S:
            return [], f"a step of {size} took {trials[size].step_s:.1f} s"
        _time_in_turns(trials, stream, watch, failures, fatal=fatal)
    if size in failures:
        return [], f"{size} {failures[size]}"
    return trials[size].block_rates, None


def _beats(rates: list[float], than: list[float]) -> bool:
    """Whether a candidate whose timed blocks ran at `rates` is faster than one at `than` by more than the spread
    of both: faster in its slowest block than the other in its fastest. Two equally fast candidates of
    TRIAL_ROUNDS blocks each pass it by chance once in 252 trials (every one of 5 blocks above all 5 others)."""
    return min(rates) > max(than)


def _spread_text(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def _release_cached_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()  # a failed or finished trial's blocks, so the next size starts clean


TRIED_SWITCHES = {"channels_last": "channels_last", "fused_optimizer": "fused"}  # a CPU's trial tries them


def _label(option: Tuning, options: Iterable[Tuning] = ()) -> str:
    """`fp32`, `bf16+channels_last+fused+compiled+graph`: an option's precision, each switch it has on that some of
    `options` have off (one every option has on alike, a GPU's layout, says nothing of the trial), compile and the
    step as a CUDA graph."""
    alike = {name for name in TRIED_SWITCHES if all(getattr(other, name) for other in options)} if options else set()
    switched = [word for name, word in TRIED_SWITCHES.items() if getattr(option, name) and name not in alike]
    return "+".join(
        [
            option.precision,
            *switched,
            *(["compiled"] if option.compiled else []),
            *(["graph"] if option.step_graph else []),
        ]
    )


class _Trial:
    """One candidate of a trial: a fresh model, and the samples/s of its timed blocks.

    It runs as training does: TRIAL_WARMUP_STEPS untimed steps first (allocation, kernel selection,
    compilation), then blocks of timed steps with the device synchronized at each block's two ends only, as the
    training loop synchronizes only at an epoch's: the host queues steps while the device works, and the block
    measures that overlapped throughput. A block's length is set before it starts, from the step time measured
    last (at first the last warm-up step's, timed alone): its share of what is left of TRIAL_SECONDS over the
    rounds left, and at least a TRIAL_ROUNDS-th of TRIAL_MIN_STEPS. Blocks go on until there are TRIAL_ROUNDS
    of them over TRIAL_SECONDS and TRIAL_MIN_STEPS.
    """

    def __init__(self, build: Callable[[], TrainingSetup]) -> None:
        self.build = build
        self.setup: TrainingSetup | None = None
        self.block_rates: list[float] = []
        self.timed_s, self.timed_steps = 0.0, 0
        self.step_s = math.nan  # one step's seconds, as last measured: sizes the next block

    @property
    def done(self) -> bool:
        return (
            len(self.block_rates) >= TRIAL_ROUNDS
            and self.timed_s >= TRIAL_SECONDS
            and self.timed_steps >= TRIAL_MIN_STEPS
        )

    def set_up(self) -> None:
        self.setup = self.build()
        self.setup.model.train()

    def warm_up(self, stream: Iterator[Batch], watch: Stopwatch) -> None:
        self._run(TRIAL_WARMUP_STEPS - 1, stream)
        _, self.step_s = self._timed(1, stream, watch)

    def time_block(self, stream: Iterator[Batch], watch: Stopwatch) -> None:
        rounds_left = max(1, TRIAL_ROUNDS - len(self.block_rates))
        seconds_wanted = max(0.0, TRIAL_SECONDS - self.timed_s) / rounds_left
        steps = max(math.ceil(TRIAL_MIN_STEPS / TRIAL_ROUNDS), math.ceil(seconds_wanted / self.step_s))
        samples, seconds = self._timed(steps, stream, watch)
        self.block_rates.append(samples / seconds)
        self.timed_s += seconds
        self.timed_steps += steps
        self.step_s = seconds / steps

    def _timed(self, steps: int, stream: Iterator[Batch], watch: Stopwatch) -> tuple[int, float]:
        """(samples, seconds) of `steps` training steps, the device synchronized before the first and after the last."""
        start = watch.now()
        samples = self._run(steps, stream)
        return samples, watch.now() - start

    def _run(self, steps: int, stream: Iterator[Batch]) -> int:
        """Train `steps` steps, queued on the device without waiting for it; the number of samples trained."""
        samples = 0
        for _ in range(steps):
            inputs, labels = next(stream)
            assert self.setup is not None  # set_up() ran first: a trial whose building failed was dropped
            self.setup.train_step(inputs, labels)
            samples += len(labels)
        return samples


def _warm_up(trials: dict, stream: Iterator[Batch], watch: Stopwatch, failures: dict, *, fatal: bool = False) -> None:
    # Every candidate is built before any runs: building a compiled one resets Dynamo, which would drop the graphs
    # of one compiled before it and compile them again inside a timed block.
    _for_each(trials, trials, _Trial.set_up, failures, watch.device, fatal=fatal)
    _for_each(trials, trials, lambda trial: trial.warm_up(stream, watch), failures, watch.device, fatal=fatal)


def _time_in_turns(
    trials: dict, stream: Iterator[Batch], watch: Stopwatch, failures: dict, *, fatal: bool = False
) -> None:
    """Rounds of one timed block per trial, every other round in reverse order, until every trial is done."""
    for round_number in itertools.count():
        if all(trial.done for trial in trials.values()):
            return
        order = list(trials) if round_number % 2 == 0 else list(reversed(trials))
        _for_each(trials, order, lambda trial: trial.time_block(stream, watch), failures, watch.device, fatal=fatal)


def _for_each(
    trials: dict,
    order: Iterable,
    action: Callable[[_Trial], None],
    failures: dict,
    device: torch.device,
    *,
    fatal: bool,
) -> None:
    """`action` on each trial of `trials`, in `order`. One that fails in any way (an op with no bf16 kernel, a
    compile error, out of memory) is dropped from `trials` and its reason kept in `failures`; with `fatal`, the
    failure is raised instead."""
    for key in list(order):
        try:
            action(trials[key])
        except Exception as error:  # any kind: one candidate's failure must not end the run
            if fatal:
                raise
            failures[key] = _failure(error)
            out_of_memory = is_out_of_memory(error)
        else:
            continue
        del trials[key]  # its model, gradients and optimizer state
        if out_of_memory:  # only now: the except block's traceback held the failed step's tensors
            _release_cached_memory(device)


def _failure(error: Exception) -> str:
    """Why a candidate is left out: 'ran out of memory', or 'failed (TypeError: the first line of its message)'."""
    if is_out_of_memory(error):
        return "ran out of memory"
    lines = str(error).strip().splitlines()
    message = textwrap.shorten(lines[0], FAILURE_MESSAGE_CHARS, placeholder="...") if lines else ""
    return f"failed ({type(error).__name__}{': ' + message if message else ''})"


def _full_batches(batches: Batches) -> Generator[Batch, None, None]:
    """The training batches, pass after pass for as long as a trial draws (a small training set holds fewer than a
    trial needs), each pass without its short last batch: a new shape would make a compiled model compile again
    inside a timed block."""
    sizes = batches.batch_sizes(len(batches))
    if not sizes:
        raise ValueError("no training batches to try")
    full_steps = sizes.count(batches.batch_size) or len(sizes)  # a training set smaller than a batch: its one batch
    for epoch in itertools.count(1):
        yield from batches.epoch(epoch, full_steps)
