"""The tuned-mode trial and --batch-size auto time candidates as training runs: the device synchronized at the
two ends of a block of steps only, each candidate timed for at least a second and 20 steps, the candidates in
turns, and a gain kept only when it is larger than the spread the trial itself measured. A fake clock, moved
only by the steps, makes every number exact (all step times are powers of two, so no rounding either).

    python -m pytest tests/test_trial.py -q
"""

from __future__ import annotations

import itertools
import math
import re
import weakref
from collections.abc import Callable

import numpy as np
import pytest
import torch
from fakes import FakeCapture
from torch import nn

from devicebench.data.pipeline import HostBatches
from devicebench.engine import tuning, tuning_applied
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.step_graph import GraphedStep
from devicebench.engine.timing import Stopwatch
from devicebench.engine.tuning import Tuning, choose_batch_size, choose_tuning

CPU = torch.device("cpu")
FP32, BF16 = Tuning(precision="fp32"), Tuning(precision="bf16")
BLOCK_STEPS = 4  # what a block takes at the step times below (0.0625 s and slower): TRIAL_MIN_STEPS / TRIAL_ROUNDS


class FakeDevice:
    """Steps move a fake clock by the seconds they are given; every step and every synchronize is logged."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.events: list[str] = []
        self.watch = Stopwatch(CPU, clock=lambda: self.seconds, synchronize=lambda device: self.events.append("|"))

    def step(self, name: str, seconds: float) -> None:
        self.seconds += seconds
        self.events.append(name)

    def timeline(self) -> str:
        """The log as runs of steps between synchronizations: 'fp32x2 | fp32x1 | ...'."""
        return " ".join(
            " ".join(run) if event == "|" else f"{event}x{len(list(run))}"
            for event, run in itertools.groupby(self.events)
        )

    def timed_blocks(self, name: str) -> list[int]:
        """The steps of each of `name`'s blocks that sit between two synchronizations, after its warm-up."""
        blocks = [int(steps) for steps in re.findall(rf"\| {name}x(\d+) \|", self.timeline())]
        return blocks[1:]  # the first is the last warm-up step, timed alone


def batches(samples: int = 400, batch_size: int = 8) -> HostBatches:
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (samples, 1, 4, 4), dtype=np.uint8)
    labels = generator.integers(0, 3, samples).astype(np.int64)
    return HostBatches(images, labels, batch_size, CPU)


def per_round(*seconds: float) -> Callable[[int], float]:
    """Step seconds by round: the warm-up and the first block take the first figure, each later block the next."""
    return lambda step: seconds[max(0, step - tuning.TRIAL_WARMUP_STEPS) // BLOCK_STEPS]


def steady(seconds: float) -> Callable[[int], float]:
    return lambda step: seconds


def afresh(error: Exception) -> Exception:
    """A new exception like `error`: one raised before keeps the frames it passed through, and their tensors."""
    return type(error)(*error.args)


def builder(
    device: FakeDevice,
    step_seconds: dict[str, Callable[[int], float]],
    sizes: list[int] | None = None,
    fails: dict[str, tuple[int, Exception]] | None = None,
):
    """A build for `choose_tuning` whose n-th step of an option takes `step_seconds[label](n)` fake seconds and
    whose step `fails[label][0]` raises `fails[label][1]` (-1: its build raises it); an option's label is `fp32`,
    `bf16`, `fp32+graph` (a graphed option's step replays a fake CUDA graph, whose capture the device's log shows)."""
    fails = fails or {}

    def build(option: Tuning) -> TrainingSetup:
        name = tuning._label(option)
        failing_step, error = fails.get(name, (None, None))
        if failing_step == -1:
            raise afresh(error)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        steps = itertools.count()

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            step = next(steps)
            if step == failing_step:
                raise afresh(error)
            device.step(name, step_seconds[name](step))
            if sizes is not None:
                sizes.append(len(inputs))
            return model(inputs)

        setup = TrainingSetup(
            model=model,
            loss_function=nn.CrossEntropyLoss(),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            forward=forward,
        )
        if option.step_graph:
            setup.graphed = GraphedStep(setup.eager_step, FakeCapture(device.events))
        return setup

    return build


def test_an_option_s_label_names_the_switches_the_trial_varies_and_not_those_every_option_has():
    cpu = [Tuning(), Tuning(fused_optimizer=True), Tuning(channels_last=True, fused_optimizer=True)]
    assert [tuning._label(option, cpu) for option in cpu] == ["fp32", "fp32+fused", "fp32+channels_last+fused"]
    gpu = [
        Tuning(channels_last=True, fused_optimizer=True),
        Tuning(channels_last=True, fused_optimizer=True, compiled=True),
    ]
    assert [tuning._label(option, gpu) for option in gpu] == ["fp32", "fp32+compiled"]


def test_a_single_option_needs_no_trial():
    def build(option: Tuning) -> TrainingSetup:
        raise AssertionError("no trial should run")

    chosen, note = choose_tuning([BF16], build, batches(), FakeDevice().watch)
    assert chosen.precision == "bf16" and note == ""


def test_the_trial_synchronizes_only_at_the_ends_of_its_blocks_and_the_options_take_turns():
    device = FakeDevice()
    choose_tuning(
        [FP32, BF16], builder(device, {"fp32": steady(0.125), "bf16": steady(0.125)}), batches(), device.watch
    )
    warm_up = "fp32x3 | fp32x1 | bf16x3 | bf16x1 |"  # untimed steps, then one timed alone to size the first block
    in_order, reversed_order = "| fp32x4 | | bf16x4 |", "| bf16x4 | | fp32x4 |"  # a steady drift favours no one
    assert device.timeline() == " ".join([warm_up, in_order, reversed_order, in_order, reversed_order, in_order])


@pytest.mark.parametrize(
    ("seconds", "blocks"),
    [
        (1 / 64, [13, 13, 13, 13, 12]),  # fast steps: a second in all, spread over the rounds
        (0.5, [4, 4, 4, 4, 4]),  # slow steps: 20 steps in all, 10 s
    ],
)
def test_each_option_is_timed_for_at_least_a_second_and_20_steps(seconds, blocks):
    device = FakeDevice()
    compiling = lambda step: 30.0 if step == 0 else seconds  # noqa: E731 (the first step compiles: 30 s)
    _, note = choose_tuning(
        [FP32, BF16], builder(device, {"fp32": compiling, "bf16": steady(seconds)}), batches(), device.watch
    )
    for name in ("fp32", "bf16"):
        assert device.timed_blocks(name) == blocks
        assert sum(blocks) >= tuning.TRIAL_MIN_STEPS and sum(blocks) * seconds >= tuning.TRIAL_SECONDS
    rate = f"{8 / seconds:,.0f} ({8 / seconds:,.0f}-{8 / seconds:,.0f})"  # 8 samples a step; no compiling in it
    assert note == f"trial samples/s: fp32 {rate}, bf16 {rate}, median (range) of 5 rounds; kept fp32"


def test_a_first_block_sized_from_a_slow_warm_up_is_made_up_for_in_the_rounds_left():
    device = FakeDevice()
    warming = lambda step: 1.0 if step < tuning.TRIAL_WARMUP_STEPS else 1 / 64  # noqa: E731 (clocks still low)
    choose_tuning([FP32, BF16], builder(device, {"fp32": warming, "bf16": warming}), batches(), device.watch)
    assert device.timed_blocks("fp32") == [4, 15, 15, 15, 15]  # 1/16 s, then the rest of the second in 4 blocks


def test_rounds_go_on_until_every_option_has_had_its_second():
    device = FakeDevice()
    fifth_block = tuning.TRIAL_WARMUP_STEPS + 4 * 13
    speeding_up = lambda step: 1 / 64 if step < fifth_block else 1 / 256  # noqa: E731
    _, note = choose_tuning(
        [FP32, BF16], builder(device, {"fp32": speeding_up, "bf16": speeding_up}), batches(), device.watch
    )
    assert device.timed_blocks("bf16") == [13, 13, 13, 13, 12, 36]  # 0.86 s after five rounds: a sixth
    assert "median (range) of 6 rounds" in note


# fp32 runs at 64 samples/s in four rounds and at 128 in one: its spread reaches 128
FP32_SCATTERED = per_round(0.125, 0.125, 0.0625, 0.125, 0.125)


@pytest.mark.parametrize(
    ("bf16_seconds", "kept", "bf16_text", "why"),
    [
        (0.0625, "fp32", "128 (128-128)", ": bf16's gain is within the spread"),  # twice fp32's median, not its best
        (0.0625 - 2**-12, "bf16", "129 (129-129)", ""),  # faster in every round than fp32 in its fastest
    ],
)
def test_an_option_is_kept_only_when_its_slowest_round_beats_the_plainest_option_s_fastest(
    bf16_seconds, kept, bf16_text, why
):
    device = FakeDevice()
    build = builder(device, {"fp32": FP32_SCATTERED, "bf16": steady(bf16_seconds)})
    chosen, note = choose_tuning([FP32, BF16], build, batches(), device.watch)
    assert chosen.precision == kept
    assert note == f"trial samples/s: fp32 64 (64-128), bf16 {bf16_text}, median (range) of 5 rounds; kept {kept}{why}"


def test_a_candidate_faster_in_most_rounds_but_slower_in_one_is_not_kept():
    """bf16 twice as fast as fp32 in four rounds and half as fast in one: its median beats fp32's every round, its
    slowest does not, and only its slowest counts (a candidate perfectly steady cannot tell the two apart)."""
    device = FakeDevice()
    build = builder(device, {"fp32": steady(0.125), "bf16": per_round(0.0625, 0.0625, 0.25, 0.0625, 0.0625)})
    chosen, note = choose_tuning([FP32, BF16], build, batches(), device.watch)
    assert chosen.precision == "fp32"
    assert note == (
        "trial samples/s: fp32 64 (64-64), bf16 128 (32-128), median (range) of 5 rounds; "
        "kept fp32: bf16's gain is within the spread"
    )


@pytest.mark.parametrize(
    ("failing_step", "error", "reason"),
    [
        (
            -1,
            TypeError("TunedForward does not support len()"),
            "failed (TypeError: TunedForward does not support len())",
        ),
        (
            0,
            RuntimeError("Dynamo failed to run FX node\nwith fake tensors: ..."),
            "failed (RuntimeError: Dynamo failed to run FX node)",
        ),  # while compiling, in its first step
        (14, ValueError("x" * 300), "failed (ValueError: ...)"),  # in the third round; a long message is cut short
        (14, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "ran out of memory"),
    ],
)
def test_an_option_that_fails_for_any_reason_is_left_out_of_the_trial_and_named_with_its_reason(
    failing_step, error, reason
):
    device = FakeDevice()
    build = builder(device, {"fp32": steady(0.125), "bf16": steady(0.0625)}, fails={"bf16": (failing_step, error)})
    chosen, note = choose_tuning([FP32, BF16], build, batches(), device.watch)
    assert chosen.precision == "fp32"
    assert note == f"trial samples/s: fp32 64 (64-64), median (range) of 5 rounds; bf16 {reason}; kept fp32"
    assert len(device.timed_blocks("fp32")) == 5  # the others go on without it


@pytest.mark.parametrize(
    ("graph_seconds", "kept"),
    [(0.0625 - 2**-12, "fp32+graph"), (0.0625, "fp32")],  # faster in every round than eager's fastest, or not
)
def test_the_step_as_a_cuda_graph_is_captured_before_its_timed_blocks_and_kept_only_where_faster(graph_seconds, kept):
    device = FakeDevice()
    build = builder(device, {"fp32": FP32_SCATTERED, "fp32+graph": steady(graph_seconds)})
    chosen, note = choose_tuning([FP32, Tuning(step_graph=True)], build, batches(), device.watch)
    assert tuning._label(chosen) == kept and note.endswith(
        f"; kept {kept}" + ("" if chosen.step_graph else ": fp32+graph's gain is within the spread")
    )
    # two eager steps, the capture and its first replay untimed, then a replay timed alone to size the first block
    warm_up = (
        "| warm-upx1 fp32+graphx1 warm-upx1 fp32+graphx1 capturex1 replayx1 fp32+graphx1 | replayx1 fp32+graphx1 |"
    )
    assert warm_up in device.timeline()
    assert "capture" not in device.timeline().split(warm_up)[1]  # every timed block replays the one graph


def test_out_of_memory_in_a_trial_frees_the_failed_model_and_empties_the_cache(monkeypatch):
    models, released = [], []
    device = FakeDevice()
    build = builder(
        device,
        {"fp32": steady(0.125), "bf16": steady(0.0625)},
        fails={"bf16": (5, torch.OutOfMemoryError("CUDA out of memory"))},
    )

    def tracked(option: Tuning) -> TrainingSetup:
        setup = build(option)
        models.append(weakref.ref(setup.model))
        return setup

    monkeypatch.setattr(tuning, "_release_cached_memory", lambda device: released.append(models[1]() is None))
    choose_tuning([FP32, BF16], tracked, batches(), device.watch)
    assert released == [True]  # once, with nothing left holding the failed option's model


def test_every_option_failing_fails_the_run_with_each_reason():
    device = FakeDevice()
    build = builder(device, {}, fails={"fp32": (0, KeyError("weight")), "bf16": (-1, TypeError("no len()"))})
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "every tuned option failed in the trial: fp32 failed (KeyError: "
            "'weight'); bf16 failed (TypeError: no len())"
        ),
    ):
        choose_tuning([FP32, BF16], build, batches(), device.watch)


def test_a_trial_goes_on_into_the_next_epochs_and_draws_full_batches_only():
    device, sizes, epochs = FakeDevice(), [], []
    small = batches(samples=45)  # 5 full batches of 8 and one of 5: fewer than a trial needs
    real_epoch = small.epoch

    def logged_epoch(epoch: int, steps: int | None = None):
        epochs.append((epoch, steps))
        return real_epoch(epoch, steps)

    small.epoch = logged_epoch
    choose_tuning(
        [FP32, BF16], builder(device, {"fp32": steady(0.125), "bf16": steady(0.125)}, sizes), small, device.watch
    )
    assert len(sizes) == 2 * (tuning.TRIAL_WARMUP_STEPS + 20) and set(sizes) == {8}
    assert epochs == [(epoch, 5) for epoch in range(1, 11)]  # 46 steps: 10 passes of the 5 full batches


def test_compiled_options_are_each_compiled_once_before_their_timed_blocks(monkeypatch):
    """Compiling one option resets Dynamo (engine/tuning_applied.py `compiled_afresh`): were one built after another had
    compiled, the other would compile again inside a timed block."""
    monkeypatch.setattr(tuning_applied, "COMPILE_BACKEND", "eager")  # compiles in milliseconds
    frames = torch._dynamo.utils.counters["frames"]
    compiled_before = frames["ok"]

    def build(option: Tuning) -> TrainingSetup:
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        setup = TrainingSetup(
            model=model, loss_function=nn.CrossEntropyLoss(), optimizer=torch.optim.SGD(model.parameters(), lr=0.1)
        )
        return tuning_applied.tuned_setup(setup, option, CPU)[0]

    readings = itertools.count(step=0.25)  # each block lasts 0.25 s, however many steps
    watch = Stopwatch(CPU, clock=lambda: next(readings), synchronize=lambda device: None)
    _, note = choose_tuning([Tuning(compiled=True), Tuning(precision="bf16", compiled=True)], build, batches(), watch)
    assert frames["ok"] - compiled_before == 2
    assert note.startswith("trial samples/s: fp32+compiled ") and "bf16+compiled" in note and "failed" not in note


# --- --batch-size auto ---------------------------------------------------------------------------------------------


def sized_builder(
    device: FakeDevice,
    step_seconds: Callable[[int, int], float],
    fails_from: int | None = None,
    error: Exception | None = None,
):
    """A build whose n-th step at batch size b takes `step_seconds(b, n)` fake seconds, and whose steps from batch
    size `fails_from` on raise `error`."""

    def build() -> TrainingSetup:
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        steps = itertools.count()

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            if fails_from is not None and len(inputs) >= fails_from:
                raise afresh(error)
            device.step(str(len(inputs)), step_seconds(len(inputs), next(steps)))
            return model(inputs)

        return TrainingSetup(
            model=model,
            loss_function=nn.CrossEntropyLoss(),
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            forward=forward,
        )

    return build


def grow(device: FakeDevice, build, largest: int = 640) -> tuple[int, str]:
    return choose_batch_size(8, largest, build, lambda size: batches(4_000, size), device.watch)


def test_auto_batch_size_times_each_size_in_synchronized_blocks_of_at_least_a_second_and_20_steps():
    device = FakeDevice()
    size, note = grow(device, sized_builder(device, lambda batch, step: 1 / 64 * max(1, batch / 16)))
    assert size == 16
    for batch, seconds in ((8, 1 / 64), (16, 1 / 64), (32, 1 / 32)):
        assert device.timeline().count(f"{batch}x{tuning.TRIAL_WARMUP_STEPS - 1} | {batch}x1 |") == 1  # warm-up
        blocks = device.timed_blocks(str(batch))
        assert len(blocks) == 5 and sum(blocks) >= 20 and sum(blocks) * seconds >= 1.0
    assert device.events.count("|") == 3 * (2 + 2 * 5)  # no synchronize inside a block
    assert note == (
        "batch sizes tried, samples/s: 8 512 (512-512), 16 1,024 (1,024-1,024), 32 1,024 (1,024-1,024), "
        "median (range) of each size's blocks (stopped: 32 was no faster than 16 beyond the spread); "
        "kept 16"
    )


@pytest.mark.parametrize(("seconds_at_16", "kept"), [(0.125, 8), (0.125 - 2**-10, 16)])
def test_a_doubling_is_kept_only_when_its_slowest_block_beats_the_kept_size_s_fastest(seconds_at_16, kept):
    device = FakeDevice()
    # at 8: 64 samples/s in four blocks and 128 in one; at 16: 128 samples/s, or a little more
    at_8 = per_round(0.125, 0.0625, 0.125, 0.125, 0.125)
    build = sized_builder(device, lambda batch, step: at_8(step) if batch == 8 else seconds_at_16 * batch / 16)
    size, note = grow(device, build, largest=16)
    assert size == kept
    stopped = "16 was no faster than 8 beyond the spread" if kept == 8 else "16 is the most that fits the training set"
    assert f"(stopped: {stopped})" in note


def test_auto_batch_size_stops_before_timing_a_size_whose_warm_up_step_is_too_slow():
    device = FakeDevice()
    slow_from_32 = lambda batch, step: 1 / 64 if batch < 32 else 1.5  # noqa: E731
    size, note = grow(device, sized_builder(device, slow_from_32))
    assert size == 16 and "(stopped: a step of 32 took 1.5 s); kept 16" in note
    assert device.events.count("32") == tuning.TRIAL_WARMUP_STEPS  # no timed step of it


@pytest.mark.parametrize(
    "error", [torch.OutOfMemoryError("CUDA out of memory"), RuntimeError("CUDNN_STATUS_NOT_SUPPORTED")]
)  # cuDNN refuses a batch that big
def test_auto_batch_size_backs_off_from_a_size_that_fails_and_says_why(error):
    device = FakeDevice()
    size, note = grow(device, sized_builder(device, lambda batch, step: 1 / 64, fails_from=32, error=error))
    reason = "ran out of memory" if isinstance(error, torch.OutOfMemoryError) else f"failed (RuntimeError: {error})"
    assert size == 16 and f"(stopped: 32 {reason}); kept 16" in note


def test_auto_batch_size_failing_at_the_first_size_is_the_run_s_own_error():
    device = FakeDevice()
    with pytest.raises(TypeError, match="no len"):
        grow(device, sized_builder(device, lambda batch, step: 1 / 64, fails_from=8, error=TypeError("no len()")))


def test_a_slow_first_size_is_kept_without_a_trial():
    device = FakeDevice()
    size, note = grow(device, sized_builder(device, lambda batch, step: 2.0))
    assert size == 8 and note == "batch sizes tried, samples/s: none timed (stopped: a step of 8 took 2.0 s); kept 8"
    assert math.isclose(device.seconds, 2.0 * tuning.TRIAL_WARMUP_STEPS)
