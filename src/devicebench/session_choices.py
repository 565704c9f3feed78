"""The choices a session's trials make once, so that every repeat of a run trains the same way: tuned mode's tuning
(which precision, layout, fused optimizer, compilation a trial measures fastest) and `--batch-size auto`'s batch size.
Each is made the first time a run needs it, its seconds added to that run's `tuning_s`, and kept in SessionChoices.
The trials themselves are engine/tuning.py's; what they are asked, and what the record then says, is here.

    python -m pytest tests/test_tuning.py -q
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import torch

from devicebench.data.pipeline import Batches
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.step_graph import step_graph_refusal
from devicebench.engine.timing import Stopwatch
from devicebench.engine.tuning import Tuning, candidates, choose_batch_size, choose_tuning, untried_switches
from devicebench.engine.tuning_applied import add_tuning_note, recurrent_layers, tuned_setup
from devicebench.results.schema import RunRecord
from devicebench.workloads import Hyperparameters, Workload

if TYPE_CHECKING:  # a job is only read here
    from devicebench.planning import Job

AUTO_BATCH_FEWEST_STEPS = 7  # the largest batch --batch-size auto tries still makes this many steps an epoch
SetupBuilder = Callable[["Job", Hyperparameters, "Tuning | None"], TrainingSetup]  # runner.build_setup
BatchSizeAsked = tuple[str, str, int, str]  # (workload, device, the batch size asked, mode)
TuningAsked = tuple[str, str, str, str, str]  # (workload, device, hyperparameters as JSON, precision, compile)
Asked = TypeVar("Asked")
Choice = TypeVar("Choice")


@dataclass
class SessionChoices:
    """What a session's trials chose, each the first time a run needed it: `--batch-size auto`'s batch sizes and
    tuned mode's tunings (as they could be applied), each with the note that says what its trial measured."""

    batch_sizes: dict[BatchSizeAsked, tuple[int, str]] = field(default_factory=dict)
    tunings: dict[TuningAsked, tuple[Tuning, str]] = field(default_factory=dict)


def layers_of(workload: Workload, hyperparameters: Hyperparameters) -> torch.nn.Module:
    """The model's layers, for tuned mode to look at: built on the meta device, so no memory, no time."""
    with torch.device("meta"):
        return workload.build_model(hyperparameters)


def grow_batch_size(
    record: RunRecord,
    job: Job,
    training_samples: int,
    base: Tuning,
    build: SetupBuilder,
    batches_of: Callable[[int], tuple[Batches, Batches]],
    choices: SessionChoices,
) -> None:
    """`--batch-size auto`: the fastest batch size on this device, found once per session, into the record.
    `build` makes the model, `batches_of(size)` its batches; of `training_samples`, every size tried trains at least
    AUTO_BATCH_FEWEST_STEPS steps an epoch."""
    settings = record.settings
    asked: BatchSizeAsked = (record.workload, record.device, settings.batch_size, settings.mode)

    def single(size: int) -> Batches:
        train_batches, test_batches = batches_of(size)
        test_batches.close()
        return train_batches

    def setup() -> TrainingSetup:  # at the batch size asked: the trial feeds it batches of every size it tries
        return build(job, settings.hyperparameters, base if settings.mode == "tuned" else None)

    largest = max(settings.batch_size, training_samples // AUTO_BATCH_FEWEST_STEPS)
    batch_size, note = chosen(
        record,
        choices.batch_sizes,
        asked,
        job.device,
        lambda watch: choose_batch_size(settings.batch_size, largest, setup, single, watch),
    )
    record.settings = dataclasses.replace(
        settings,
        batch_size=batch_size,
        batch_size_auto=True,
        hyperparameters={**settings.hyperparameters, "batch_size": batch_size},
    )
    record.tuning_note = note


def choose(
    base: Tuning, batches: Batches, job: Job, record: RunRecord, build: SetupBuilder, choices: SessionChoices
) -> Tuning:
    """Tuned mode's choice for this run, as it can be applied to its model (`build` makes one): measured on a trial
    the first time, the same for every repeat after. On CUDA the trial tries the whole step as a CUDA graph too,
    unless the model is known not to allow it: the note then says why."""
    device, hyperparameters = job.device, record.settings.hyperparameters
    asked: TuningAsked = (
        record.workload,
        record.device,
        json.dumps(hyperparameters, sort_keys=True, default=str),
        job.precision,
        job.compile,
    )

    def choose(watch: Stopwatch) -> tuple[Tuning, str]:
        # a fused optimizer only where its class and device have one, and a graph only where the step allows one:
        # a model built for that alone tells
        plain = build(job, hyperparameters, None)
        refusal = step_graph_refusal(plain) if device.type == "cuda" else None
        options = candidates(base, device, job.precision, job.compile, step_graph=refusal is None)
        kept, note = choose_tuning(options, lambda option: build(job, hyperparameters, option), batches, watch)
        tuning = tuned_setup(plain, kept, device)[1]
        return tuning, "; ".join(
            filter(None, [note, untried_switches(tuning, options, device), graph_note(tuning, refusal)])
        )

    tuning, note = chosen(record, choices.tunings, asked, device, choose)
    record.tuning_note = "; ".join(filter(None, [record.tuning_note, note])) or None
    return tuning


def graph_note(tuning: Tuning, refusal: str | None) -> str:
    """What the run's note says of the whole step as a CUDA graph: why it was not tried, or how a graphed run
    trains the batches the graph was not captured for; "" where the trial tried it and kept another option."""
    if refusal is not None:
        return f"the step as one CUDA graph was not tried: {refusal}"
    if tuning.step_graph:
        return "the step replayed as one CUDA graph; a batch of another shape (an epoch's short last one) ran eagerly"
    return ""


def note_tuning(record: RunRecord, tuning: Tuning, layers: torch.nn.Module) -> None:
    """The settings say what of the tuning was applied, and the note which of the model's `layers` bf16 left in
    fp32."""
    record.settings = dataclasses.replace(record.settings, **dataclasses.asdict(tuning))
    recurrent = recurrent_layers(layers)
    if tuning.precision == "bf16" and recurrent:
        names = ", ".join(sorted({type(layer).__name__ for layer in recurrent}))
        add_tuning_note(
            record, f"bf16 autocast left out the recurrent layers ({len(recurrent)} {names}): they ran in fp32"
        )


def chosen(
    record: RunRecord,
    made: dict[Asked, Choice],
    asked: Asked,
    device: torch.device,
    choose: Callable[[Stopwatch], Choice],
) -> Choice:
    """`made[asked]`, made by `choose(watch)` the first time this session needs it. The seconds that took are
    added to the record's `tuning_s` (0 when an earlier run made the choice): time no other figure holds."""
    seconds = 0.0
    if asked not in made:
        watch = Stopwatch(device)
        started = watch.now()
        made[asked] = choose(watch)
        seconds = watch.now() - started
    record.tuning_s = (record.tuning_s or 0.0) + seconds
    return made[asked]
