"""Execute a plan (planning.py): every job, `repeats` times, in order.

The data is loaded once for every run of consecutive jobs that ask for the same (every device of a workload,
every point of a sweep that wants it), so each device trains on the same bytes in the same order. A run that fails
(an error, out of memory) is recorded with its reason and the suite moves on; Ctrl-C stops at once, marks the
current run `interrupted` and keeps every finished epoch; so does SIGTERM or SIGHUP where the CLI turns them into
Ctrl-C (devicebench.stopping), and any error raised once one was received is taken as part of the stopping. The
runner knows nothing of flags: the plan says it all.

    python -c "from devicebench import runner, RunConfig; from devicebench.planning import plan; r = runner.run(plan(RunConfig(devices='cpu', data='synthetic', max_steps=5))); print(len(r.runs))"
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from devicebench import stopping
from devicebench.checkpoint import CheckpointNotSaved, save_checkpoint
from devicebench.data import (
    ArrayDataset,
    DataFormatError,
    DataUnavailable,
    ImageFolderDataset,
    load_dataset,
)
from devicebench.data.own import TensorData, TorchData
from devicebench.data.pipeline import batches_for, default_workers, usable_cores
from devicebench.devices import device_name, out_of_memory
from devicebench.engine.boosting import train_boosted_trees
from devicebench.engine.budget import FINISHING_SHARE, MEASURABLE_EPOCHS, Pacer
from devicebench.engine.calibration_store import peak_tflops
from devicebench.engine.distributed import current_shard, data_parallel, world_size
from devicebench.engine.flops import training_flops_per_sample
from devicebench.engine.loop import (
    FEWEST_BUDGETED_STEPS,
    StepTimes,
    TrainingPlan,
    TrainingSetup,
    capped,
    steps_within,
    time_first_steps,
    train,
)
from devicebench.engine.timing import Budget, Stopwatch, wall_clock_utc
from devicebench.engine.tuning import Tuning, base_tuning, candidates, choose_batch_size, choose_tuning
from devicebench.engine.tuning_applied import (
    add_tuning_note,
    dynamo_counts,
    note_compilation,
    process_settings,
    recurrent_layers,
    tuned_setup,
)
from devicebench.environment import machine_fingerprint
from devicebench.events import BudgetAccount, RunReporter, RunSpent
from devicebench.planning import Job, Plan
from devicebench.results.diagnosis import diagnose
from devicebench.results.plausibility import flag_run, peak_precision
from devicebench.results.schema import Result, RunRecord, RunSettings
from devicebench.version import __version__
from devicebench.workloads import Workload
from devicebench.workloads.outputs import predicted_classes

TRAINERS = {"boosted-trees": train_boosted_trees}  # the engine's trainers of models that are not torch's
Dataset = ArrayDataset | ImageFolderDataset | TensorData | TorchData
DataProblem = DataUnavailable | DataFormatError  # why a workload got no data: every run of it fails with this


def run(
    plan: Plan, reporter: RunReporter | None = None, *, save_to: Path | None = None, spent_before_s: float = 0.0
) -> Result:
    """Execute every job of `plan` and return every measurement, finished or not.

    `save_to`: write the model of the last run that finishes well there, as a checkpoint for `predict`.
    `spent_before_s`: seconds of the plan's time budget already spent (a command's start-up).
    """
    reporter = reporter or RunReporter()
    threads_before = torch.get_num_threads()
    if plan.threads is not None:
        torch.set_num_threads(plan.threads)
    result = Result(
        machine=machine_fingerprint(),
        config=plan.request,
        created_utc=wall_clock_utc(),
        devicebench_version=__version__,
    )
    reporter.session_started(result)
    # several processes would each size their epochs differently, and must agree on every step: not budgeted
    shares = None
    if plan.budget_s is not None and world_size() == 1:
        shares = BudgetShares(
            Budget(plan.budget_s, spent_before=spent_before_s), [job for job in plan.jobs for _ in range(job.repeats)]
        )
    try:
        _execute(plan.jobs, result, reporter, save_to, shares)
        if shares is not None:
            reporter.budget_spent(shares.account(len({job.workload.name for job in plan.jobs})))
    finally:
        torch.set_num_threads(threads_before)  # a library call leaves the process as it found it
    return result


def _execute(
    jobs: tuple[Job, ...], result: Result, reporter: RunReporter, save_to: Path | None, shares: BudgetShares | None
) -> None:
    # One dataset in memory at a time (the quick suite's together weigh about 1 GB), reused for as long as the
    # next job wants the same one.
    loaded: list = [None, None]  # (what was asked, the dataset or its problem)
    tunings: dict[tuple, tuple] = {}  # tuned choices and auto batch sizes, made once per session: repeats agree

    def data_for(job: Job) -> Dataset | DataProblem:
        wanted = (job.workload.load_data, job.data)  # data of your own is its loader's
        if wanted != loaded[0]:
            loaded[:] = [None, None]  # let the last one go before the next one is read
            loaded[:] = [wanted, load_data(job)]
            if not isinstance(loaded[1], DataProblem):
                reporter.dataset_loaded(job.workload, loaded[1])
        return loaded[1]

    try:
        for job in jobs:
            if shares is not None and world_size() == 1 and job.workload.trainer is None and not job.batch_size_auto:
                job = _fit_to_share(job, shares, data_for, reporter)
            dataset = data_for(job)
            for repeat in range(job.repeats):
                record = new_record(job, dataset, repeat)
                result.runs.append(record)
                if isinstance(dataset, DataProblem):  # no data: say so for every run it stops
                    reporter.run_started(record)
                    record.status, record.error = "failed", str(dataset)
                    reporter.run_finished(record)
                else:
                    train_record(record, job, dataset, reporter, save_to=save_to, tunings=tunings, shares=shares)
                if shares is not None:
                    shares.run_done(record)
    except KeyboardInterrupt:
        result.interrupted = True
        for record in result.runs:
            if record.status == "running":
                record.status = "interrupted"
                record.error = _stopped_reason()
                reporter.run_finished(record)


def load_data(job: Job) -> Dataset | DataProblem:
    """The data `job` trains on, or the problem that keeps it from any (what every run of it then fails with)."""
    if job.workload.load_data is not None:  # a user's model on the user's own data
        return job.workload.load_data()
    request = job.data
    try:
        with warnings.catch_warnings():  # the reporter shows the fallback reason, which the dataset carries
            warnings.filterwarnings("ignore", message="real .* could not be had", category=UserWarning)
            return load_dataset(
                request.dataset,
                request.source,
                data_dir=request.data_dir,
                seed=request.seed,
                largest_download_bytes=request.largest_download_bytes,
                **request.shape_arguments,
            )
    except (DataUnavailable, DataFormatError) as error:
        return error


def new_record(job: Job, dataset: Dataset | DataProblem, repeat: int) -> RunRecord:
    """A record in status `running` holding the settings this repeat of `job` will train with."""
    workers = 0 if job.workload.trainer is not None else job.workers  # a trainer of its own reads no batches
    if workers is None:
        workers = (
            0
            if isinstance(dataset, DataProblem)
            else default_workers(dataset, job.workload.build_preprocessing(job.hyperparameters))
        )
    batch_size, hyperparameters = job.batch_size, job.hyperparameters
    if not isinstance(dataset, DataProblem) and job.workload.trainer is None:
        # a batch larger than the training set trains on the whole set at once: record the size that really ran
        batch_size = min(batch_size, _training_samples(dataset))
        hyperparameters = {**hyperparameters, "batch_size": batch_size}
    return RunRecord(
        workload=job.workload.name,
        seed_experiment=job.workload.seed or "",  # empty: not a seed experiment
        device=str(job.device),
        device_name=device_name(job.device),
        repeat=repeat,
        started_utc=wall_clock_utc(),
        target_accuracy=job.training.target_accuracy,
        settings=RunSettings(
            batch_size=batch_size,  # the global batch when several processes train together
            epochs=job.training.epochs,
            max_steps=job.training.max_steps,
            max_eval_steps=job.training.max_eval_steps,
            seed=job.seed,
            threads=torch.get_num_threads(),
            data_source=job.data.source if isinstance(dataset, DataProblem) else dataset.source,
            workers=workers,
            mode=job.mode,
            hyperparameters=hyperparameters,
            overrides=job.overrides,
            world_size=world_size(),
            per_device_batch=job.per_device_batch,
        ),
    )


def train_record(
    record: RunRecord,
    job: Job,
    dataset: Dataset,
    reporter: RunReporter | None = None,
    *,
    save_to: Path | None = None,
    tunings: dict[tuple, tuple] | None = None,
    shares: BudgetShares | None = None,
) -> None:
    """Train `job`'s workload on `dataset` and its device into `record`, which ends with its final status.

    `tunings`: tuned-mode choices already made in this session, reused (and added to) here.
    `shares`: the session's time budget, of which this run is the first still to come: its epochs are sized to
    its share.
    """
    reporter = reporter or RunReporter()
    reporter.run_started(record)
    settings = record.settings
    if settings.batch_size < job.batch_size:  # new_record cut it to the training set
        logging.getLogger(__name__).warning(
            "batch %s is larger than the %s training samples: trained with batch %s",
            f"{job.batch_size:,}",
            f"{settings.batch_size:,}",
            f"{settings.batch_size:,}",
        )
    workload, device = job.workload, job.device
    batches: list = []
    try:
        _check_classes(workload, dataset)
        record.parameter_count = workload.parameter_count(settings.hyperparameters)
        record.flops_per_sample = training_flops_per_sample(workload, settings.hyperparameters)
        model = None
        if workload.trainer is not None:  # not a torch model: it trains itself, timed by the same Stopwatch
            if job.mode == "tuned" or job.batch_size_auto:
                record.tuning_note = "not a torch model: it trains as in seed mode, with nothing to tune"
            TRAINERS[workload.trainer](
                record, dataset, device, settings.hyperparameters, job.training, Stopwatch(device), reporter
            )
        else:
            model = _train_model(
                record, job, dataset, reporter, {} if tunings is None else tunings, opened=batches, shares=shares
            )
            diagnosis = diagnose(record, cores=usable_cores())
            if diagnosis is not None:
                record.input_verdict, record.input_diagnosis = diagnosis.verdict, diagnosis.text
        record.peak_tflops = _calibrated_peak_tflops(record)
        flag_run(record)
        if record.status == "running":
            record.status = "ok"
            if save_to is not None and model is not None:
                try:
                    save_checkpoint(save_to, model, workload, record, dataset)
                except CheckpointNotSaved as error:  # the run itself finished well: it stays ok and is kept;
                    # the save fails on its own, said once on stderr, and leaves no file behind
                    logging.getLogger(__name__).error("error: %s", error)
    except Exception as error:  # a broken workload must not end the suite: record it and move on
        if stopping.received() is not None:  # raised by the stopping (a loader worker the signal reached): the
            raise KeyboardInterrupt from error  # run is interrupted, not failed, and no later run starts
        where = out_of_memory(error)
        if where is None:
            _record_failure(record, error)
        else:
            record.status = "oom"
            batch_size = record.settings.batch_size
            what = (
                f"out of memory at batch size {batch_size} on {device}"
                if where == "device"
                else f"out of host memory at batch size {batch_size}"
            )
            record.error = f"{what}: try a smaller --batch-size ({error})"
    finally:
        for stream in batches:
            stream.close()  # stops loader workers, also after Ctrl-C
        record.peak_rss_mib = _peak_rss_mib()
        if record.status != "running":  # an interrupted run is closed by run(), once it is marked so
            reporter.run_finished(record)


def _train_model(
    record: RunRecord,
    job: Job,
    dataset: Dataset,
    reporter: RunReporter,
    tunings: dict[tuple, tuple],
    *,
    opened: list,
    shares: BudgetShares | None = None,
) -> torch.nn.Module:
    """Train a torch model into `record`, tuned and with its batch size grown where `job` asks, its epochs sized to
    its share of a time budget, and return it. The batches it draws from land in `opened`, for the caller to close however training
    ends."""
    settings = record.settings
    workload, device, seed = job.workload, job.device, job.seed
    preprocessing = workload.build_preprocessing(settings.hyperparameters)
    tuned = job.mode == "tuned"
    base = _base_tuning(workload, settings.hyperparameters, device) if tuned else Tuning()

    def batches_of(batch_size: int) -> list:
        return list(
            batches_for(
                dataset,
                workload.image_shape,
                preprocessing,
                batch_size,
                device,
                workers=settings.workers,
                seed=seed,
                resident=base.device_resident,
                shard=current_shard(batch_size),
            )
        )

    build = partial(_build, workload, settings.hyperparameters, device, seed)
    if settings.world_size > 1:
        build = partial(_in_data_parallel, build, device)
    with process_settings(base):
        if job.batch_size_auto:
            _grow_batch_size(record, dataset, base, build, batches_of, device, tunings)
            build = partial(_build, workload, record.settings.hyperparameters, device, seed)
        batches = batches_of(record.settings.batch_size)
        opened += batches
        base = dataclasses.replace(base, device_resident=batches[0].resident)
        compiled_from = None  # Dynamo's counts before a compiled run (importing Dynamo takes seconds: only then)
        if tuned:
            tuning = _choose(base, build, batches[0], job, record, tunings)
            build = partial(_build_tuned, build, tuning, device, record)
            compiled_from = dynamo_counts() if tuning.compiled else None
        training = _sized(
            job, record, build, batches, reporter, shares, None if shares is None else shares.estimates.get(id(job))
        )
        pacer = None if shares is None else shares.pacer
        model = train(
            record,
            build=build,
            train_batches=batches[0],
            test_batches=batches[1],
            plan=training,
            watch=Stopwatch(device),
            reporter=reporter,
            pace=pacer,
        )
        if pacer is not None:
            _note_pacing(record, job, pacer, reporter)
        if compiled_from is not None:
            note_compilation(record, compiled_from)
    return model


@dataclass
class BudgetShares:
    """A session's time budget, shared among its runs as each is sized: every run is sure of its fewest steps
    (FEWEST_BUDGETED_STEPS an epoch), and what is left beyond the fewest steps of every run still to come is shared
    equally. A run not yet timed has its fewest steps estimated from its FLOPs at the speed the runs so far reached
    on its device (none: a run of its own trainer, or before any was timed there), so that a heavy model late in the
    suite still fits when the light ones before it are sized. Each run then keeps to its share as it goes (a Pacer),
    and what each took is kept for the account of a session that ran over."""

    budget: Budget
    runs: list[Job]  # one per run still to come, the one being sized first
    speeds: dict[str, list[float]] = field(default_factory=dict)  # training FLOP/s reached, by device
    spent: list[RunSpent] = field(default_factory=list)  # the runs finished, in order
    pacer: Pacer | None = None  # the run under way's, once sized
    estimates: dict[int, StepTimes] = field(default_factory=dict)  # by id(job): a job _fit_to_share made smaller
    _run_started_s: float = 0.0  # budget spent when the run under way began (the one before it ended)
    _share_s: float = 0.0  # the run under way's share, counted from its sizing
    _sized_s: float = 0.0  # budget spent when the run under way was sized

    def __post_init__(self) -> None:
        self._run_started_s = self.budget.spent()

    def seconds_for(self, job: Job, times: StepTimes, eval_most: int, flops_per_step: float | None) -> float:
        """Seconds the run of `job` now being sized may take, from its own first steps `times` (of
        `flops_per_step` each: the batch that runs, which --batch-size auto may have grown)."""
        epochs = min(job.training.epochs, MEASURABLE_EPOCHS)  # the pacer may end a run after these
        fewest = times.run_s(epochs, FEWEST_BUDGETED_STEPS, min(FEWEST_BUDGETED_STEPS, eval_most))
        if flops_per_step and times.step_s > 0:
            self.speeds.setdefault(str(job.device), []).append(flops_per_step / times.step_s)
        return self.share_s(fewest)

    def share_s(self, fewest_s: float) -> float:
        """Seconds the run now being sized may take, when its fewest steps take `fewest_s`: those, and an equal
        part of what the fewest steps of every run still to come leave of the budget."""
        later = sum(self._fewest_s(run) for run in self.runs[1:])
        left = self.budget.left() - FINISHING_SHARE * self.budget.seconds  # what follows the last run needs time too
        return fewest_s + max(0.0, left - fewest_s - later) / len(self.runs)

    def even_share_s(self) -> float:
        """What is left of the budget, shared equally among the runs still to come (the one being sized first)."""
        return max(0.0, self.budget.left() - FINISHING_SHARE * self.budget.seconds) / len(self.runs)

    def device_speed(self, device: torch.device) -> float | None:
        """Training FLOP/s the runs so far reached on `device`; None before any was timed there."""
        speeds = self.speeds.get(str(device))
        return statistics.median(speeds) if speeds else None

    def pace(self, times: StepTimes, share_s: float) -> Pacer:
        """The run under way's Pacer, which keeps it within `share_s` from now."""
        self._share_s, self._sized_s = share_s, self.budget.spent()
        self.pacer = Pacer(self.budget, self._sized_s + share_s, times)
        return self.pacer

    def run_done(self, record: RunRecord) -> None:
        now = self.budget.spent()
        pacer, self.pacer = self.pacer, None
        steady = [epoch.samples_per_s for epoch in record.steady_epochs]
        if record.flops_per_sample and steady:  # what this device really did, for the runs to come on it
            self.speeds.setdefault(record.device, []).append(record.flops_per_sample * statistics.median(steady))
        evaluation_s = sum(epoch.eval_time_s or 0.0 for epoch in record.epochs)
        started_s, self._run_started_s = self._run_started_s, now
        spent_s = now - started_s
        if pacer is None:  # not sized: a trainer of its own, or a run that failed before its sizing
            self.spent.append(RunSpent(f"{record.workload} on {record.device}", spent_s, None, evaluation_s))
        else:
            settings = record.settings
            at_fewest = record.epochs and all(epoch.steps <= FEWEST_BUDGETED_STEPS for epoch in record.epochs)
            self.spent.append(
                RunSpent(
                    f"{record.workload} on {record.device}",
                    spent_s,
                    self._share_s,
                    set_up_s=self._sized_s - started_s,
                    evaluation_s=evaluation_s,
                    evaluation_share_s=pacer.planned.eval_step_s * settings.epochs * (settings.max_eval_steps or 0),
                    fewest_epochs=len(record.epochs) if at_fewest else None,
                    slowdown=pacer.slowdown,
                )
            )
        self.runs.pop(0)

    def account(self, workloads: int) -> BudgetAccount:
        return BudgetAccount(
            self.budget.seconds,
            self.budget.spent(),
            self.budget.spent_before,
            tuple(self.spent),
            workloads,
            FEWEST_BUDGETED_STEPS,
        )

    def _fewest_s(self, job: Job) -> float:
        flops, speed = _flops_per_step(job), self.device_speed(job.device)
        if not flops or not speed:
            return 0.0
        return min(job.training.epochs, MEASURABLE_EPOCHS) * FEWEST_BUDGETED_STEPS * flops / speed


def _flops_per_step(job: Job) -> float | None:
    """FLOPs of one training step of `job` (engine/flops.py, counted once per process); None when uncountable."""
    per_sample = training_flops_per_sample(job.workload, job.hyperparameters)
    return None if per_sample is None else per_sample * job.batch_size


# A time budget's sizes (_fit_to_share). Before a device has run anything, a step's FLOPs are taken at this speed,
# that of a slow laptop's two cores, to decide whether to time a few steps of the smallest size first: only a
# trigger for that measurement, never a figure shown. The smallest batch is PROBE_BATCH (BatchNorm needs two
# samples), the shortest sequence SHORTEST_BUDGETED_LENGTH tokens (a workload's `budget_lengths`).
ASSUMED_SLOW_FLOP_S = 50e9
PROBE_BATCH = 2
SHORTEST_BUDGETED_LENGTH = 16
PROBE_SPAN = 8  # the second size timed does at most this many times the smallest one's FLOPs a step


def _fit_to_share(
    job: Job, shares: BudgetShares, data_for: Callable[[Job], Dataset | DataProblem], reporter: RunReporter
) -> Job:
    """`job`, or a smaller one whose fewest steps end within its share of a time budget: a reference model on a
    laptop (a step of ResNet-50 at batch 256 takes half a minute on two cores, one of GPT-2 at 12 x 1,024 tokens
    longer). The batch is halved first, down to PROBE_BATCH; then the sequence (the workload's `budget_lengths`),
    down to SHORTEST_BUDGETED_LENGTH tokens. Whether the planned sizes fit is told from a step's FLOPs at the speed
    reached on this device so far; where that says they may not, the smallest sizes and a few times larger ones are
    trained for two steps each, and a step of any other size is taken to cost a fixed part and a part per FLOP
    through those two (`_step_times_model`; a larger size runs no slower per FLOP: the sizes kept are not too
    large). The share is an equal part of what is left, since a run not yet timed on a device counts for nothing in
    the budget's shares. The smaller job's runs keep its sizes, in their settings (a shorter sequence
    among their overrides, so they are never pooled with full-length runs), said on the screen; the step times
    estimated for it size its epochs (`shares.estimates`), without timing its first steps again."""
    planned_flops = _flops_per_step(job)
    candidates = _smaller_jobs(job)
    if not planned_flops or len(candidates) == 1:
        return job
    share_s = shares.even_share_s()
    step_s = planned_flops / (shares.device_speed(job.device) or ASSUMED_SLOW_FLOP_S)
    if _fewest_run_s(job, StepTimes(step_s, step_s, step_s / 3)) <= share_s:
        return job
    smallest = candidates[-1]
    smallest_flops = _flops_per_step(smallest) or planned_flops
    # a second size, a few times the smallest's work but far below the planned one's, tells a step's fixed cost
    # (the optimizer's, a kernel launch's) from its cost per FLOP: at the smallest sizes the fixed cost is most
    # of a step, and a step taken to grow in proportion to its FLOPs alone would keep far too small a size
    larger = next(
        (
            candidate
            for candidate in candidates[1:-1]
            if (_flops_per_step(candidate) or 0) <= PROBE_SPAN * smallest_flops
        ),
        None,
    )
    timed = []
    for probe_job in (smallest, larger) if larger is not None else (smallest,):
        times = _time_probe(probe_job, data_for)
        if times is None:
            return job  # no data: its runs fail with the problem, at whatever size
        timed.append((_flops_per_step(probe_job) or planned_flops, times))
    at = _step_times_model(timed)
    chosen = next((candidate for candidate in candidates if _fewest_run_s(job, at(candidate)) <= share_s), smallest)
    if chosen is job:
        return job
    shares.estimates[id(chosen)] = at(chosen)
    shares.runs = [chosen if run is job else run for run in shares.runs]
    changed = {
        name: (job.hyperparameters[name], chosen.hyperparameters[name])
        for name in ("batch_size", *job.workload.budget_lengths)
        if chosen.hyperparameters[name] != job.hyperparameters[name]
    }
    reporter.run_shrunk(job.workload.name, str(job.device), changed, share_s)
    return chosen


def _time_probe(job: Job, data_for: Callable[[Job], Dataset | DataProblem]) -> StepTimes | None:
    """Two training steps and an evaluation batch of `job`, on a model built for them alone; None without data."""
    dataset = data_for(job)
    if isinstance(dataset, DataProblem):
        return None
    train_batches, test_batches = batches_for(
        dataset,
        job.workload.image_shape,
        job.workload.build_preprocessing(job.hyperparameters),
        job.batch_size,
        job.device,
        workers=0,
        seed=job.seed,
    )
    try:
        return time_first_steps(
            partial(_build, job.workload, job.hyperparameters, job.device, job.seed),
            train_batches,
            test_batches,
            Stopwatch(job.device),
        )
    finally:
        train_batches.close()
        test_batches.close()


def _step_times_model(timed: list[tuple[float, StepTimes]]) -> Callable[[Job], StepTimes]:
    """What a step of any job is estimated to take from the steps timed at one or two sizes ((FLOPs a step, times)
    each): a fixed cost plus a cost per FLOP through two points, never below the larger one's rate where the line
    would fall below it (noise); in proportion to its FLOPs from one. An evaluation batch, which runs no optimizer,
    in proportion to its FLOPs from the larger size's."""
    flops_big, big = timed[-1]
    per_flop, fixed = big.step_s / flops_big, 0.0
    if len(timed) == 2:
        flops_small, small = timed[0]
        slope = (big.step_s - small.step_s) / (flops_big - flops_small) if flops_big > flops_small else 0.0
        if 0 < slope < per_flop:  # a fixed cost that is positive
            per_flop, fixed = slope, big.step_s - slope * flops_big

    def at(candidate: Job) -> StepTimes:
        flops = _flops_per_step(candidate) or flops_big
        step_s = fixed + per_flop * flops
        return StepTimes(big.first_step_s - big.step_s + step_s, step_s, big.eval_step_s * flops / flops_big)

    return at


def _smaller_jobs(job: Job) -> list[Job]:
    """`job`, then each smaller one a budget may train instead, in the order it prefers them: the batch halved
    down to PROBE_BATCH, then, at that batch, the sequence halved down to SHORTEST_BUDGETED_LENGTH tokens."""
    jobs, batch = [job], job.batch_size
    while batch > PROBE_BATCH:
        batch = max(batch // 2, PROBE_BATCH)
        jobs.append(_resized(job, batch, 1))
    lengths = job.workload.budget_lengths
    halvings = 1
    while any(job.hyperparameters[name] >> halvings >= SHORTEST_BUDGETED_LENGTH for name in lengths):
        jobs.append(_resized(job, batch, 2**halvings))
        halvings += 1
    return jobs


def _resized(job: Job, batch: int, shorter: int) -> Job:
    """`job` at `batch`, its `budget_lengths` divided by `shorter` (none below SHORTEST_BUDGETED_LENGTH)."""
    lengths = {
        name: max(job.hyperparameters[name] // shorter, min(job.hyperparameters[name], SHORTEST_BUDGETED_LENGTH))
        for name in job.workload.budget_lengths
        if shorter > 1
    }
    hyperparameters = {**job.hyperparameters, "batch_size": batch, **lengths}
    shape = tuple(sorted(job.workload.data_request(hyperparameters).items()))
    return dataclasses.replace(
        job,
        hyperparameters=hyperparameters,
        overrides={**job.overrides, **lengths},
        data=dataclasses.replace(job.data, shape=shape),
    )


def _fewest_run_s(job: Job, times: StepTimes) -> float:
    """What a budgeted run of `job` takes at least, at `times`: its steps timed first, then the fewest epochs a
    budget keeps (a warm-up and two steady ones of FEWEST_BUDGETED_STEPS steps, evaluation included)."""
    eval_most = job.training.max_eval_steps or FEWEST_BUDGETED_STEPS
    return (
        times.first_step_s
        + times.step_s
        + times.eval_step_s
        + times.run_s(
            min(job.training.epochs, MEASURABLE_EPOCHS), FEWEST_BUDGETED_STEPS, min(FEWEST_BUDGETED_STEPS, eval_most)
        )
    )


ESTIMATED_FROM_STEPS = 200  # a run of more steps than this (all epochs) is timed first, and its length foretold


def _sized(
    job: Job,
    record: RunRecord,
    build: partial,
    batches: list,
    reporter: RunReporter,
    shares: BudgetShares | None,
    estimated: StepTimes | None = None,
) -> TrainingPlan:
    """`job`'s plan, its epochs sized to the run's share of a time budget (their steps recorded in the settings),
    from two steps and an evaluation batch timed first (a batch the budget shrank: `estimated` from a tiny batch's);
    a long run is timed the same way, to say how long it takes."""
    plan, (train_batches, test_batches) = job.training, batches
    steps, eval_steps = capped(len(train_batches), plan.max_steps), capped(len(test_batches), plan.max_eval_steps)
    if world_size() > 1 or (shares is None and plan.epochs * steps <= ESTIMATED_FROM_STEPS):
        return plan  # several processes would each time their own steps, and must agree on every step
    times = estimated or time_first_steps(build, train_batches, test_batches, Stopwatch(job.device))
    if shares is not None:
        flops = (record.flops_per_sample or 0) * record.settings.batch_size
        share_s = shares.seconds_for(job, times, eval_steps, flops)
        steps = steps_within(share_s, times, plan.epochs, steps, eval_steps)
        shares.pace(times, share_s)
        eval_steps = min(steps, eval_steps)
        plan = dataclasses.replace(plan, max_steps=steps, max_eval_steps=eval_steps)
        record.settings = dataclasses.replace(record.settings, max_steps=steps, max_eval_steps=eval_steps)
    seconds = times.run_s(plan.epochs, steps, eval_steps)
    if shares is not None:  # the run ends by its share, however many epochs it was planned: its pacer sees to it
        seconds = min(seconds, share_s)
    reporter.run_estimated(record, seconds)
    return plan


def _note_pacing(record: RunRecord, job: Job, pacer: Pacer, reporter: RunReporter) -> None:
    """A run its budget shortened as it went: its settings say the longest epoch that ran, and the screen how."""
    ran, settings = [epoch.steps for epoch in record.epochs], record.settings
    if ran and (pacer.resized or settings.epochs < job.training.epochs):
        reporter.run_paced(record, job.training.epochs, settings.max_steps, pacer.slowdown)
        record.settings = dataclasses.replace(
            settings, max_steps=max(ran), max_eval_steps=min(settings.max_eval_steps or 0, max(ran))
        )


AUTO_BATCH_FEWEST_STEPS = 7  # the largest batch --batch-size auto tries still makes this many steps an epoch


def _grow_batch_size(
    record: RunRecord, dataset: Dataset, base: Tuning, build: partial, batches_of, device, tunings: dict[tuple, tuple]
) -> None:
    """`--batch-size auto`: the fastest batch size on this device, found once per session, into the record."""
    settings = record.settings
    key = ("batch size", record.workload, record.device, settings.batch_size, settings.mode)

    def single(size: int):
        train_batches, test_batches = batches_of(size)
        test_batches.close()
        return train_batches

    setup = (lambda: tuned_setup(build(), base, device)[0]) if settings.mode == "tuned" else build
    largest = max(settings.batch_size, _training_samples(dataset) // AUTO_BATCH_FEWEST_STEPS)
    batch_size, note = _chosen(
        record,
        tunings,
        key,
        device,
        lambda watch: choose_batch_size(settings.batch_size, largest, setup, single, watch),
    )
    record.settings = dataclasses.replace(
        settings,
        batch_size=batch_size,
        batch_size_auto=True,
        hyperparameters={**settings.hyperparameters, "batch_size": batch_size},
    )
    record.tuning_note = note


def _training_samples(dataset: Dataset) -> int:
    if isinstance(dataset, (TensorData, TorchData)):
        return dataset.train_size
    return len(dataset.train.labels) if isinstance(dataset, ImageFolderDataset) else len(dataset.train_labels)


def _check_classes(workload: Workload, dataset: Dataset) -> None:
    """A model cannot learn more classes than its output layer has; say so before any training."""
    model_classes = workload.num_classes
    if model_classes is not None and dataset.num_classes is not None and dataset.num_classes > model_classes:
        raise ValueError(
            f"{workload.name} tells {model_classes} classes apart but {dataset.name} has "
            f"{dataset.num_classes}; pick a workload with at least that many outputs"
        )


def _build(workload: Workload, hyperparameters: dict, device: torch.device, seed: int) -> TrainingSetup:
    torch.manual_seed(seed)  # the same initial weights on every device and repeat
    model = workload.build_model(hyperparameters).to(device)
    loss_function = workload.build_loss()
    return TrainingSetup(
        model=model,
        loss_function=None if loss_function is None else loss_function.to(device),
        optimizer=workload.build_optimizer(model, hyperparameters),
        predict=None if workload.output == "values" else partial(predicted_classes, output=workload.output),
        step=workload.train_step,
    )


def _base_tuning(workload: Workload, hyperparameters: dict, device: torch.device) -> Tuning:
    with torch.device("meta"):  # only its layers are looked at: no memory, no time
        model = workload.build_model(hyperparameters)
    return base_tuning(device, model, resident_possible=True)


def _choose(base: Tuning, build: partial, batches, job: Job, record: RunRecord, tunings: dict[tuple, tuple]) -> Tuning:
    """Tuned mode's choice for this run: measured on a trial the first time, the same for every repeat after."""
    device = job.device
    key = (
        "tuning",
        record.workload,
        record.device,
        json.dumps(record.settings.hyperparameters, sort_keys=True, default=str),
        job.precision,
        job.compile,
    )
    options = candidates(base, device, job.precision, job.compile)
    tuning, note = _chosen(
        record,
        tunings,
        key,
        device,
        lambda watch: choose_tuning(options, lambda option: tuned_setup(build(), option, device)[0], batches, watch),
    )
    record.tuning_note = "; ".join(filter(None, [record.tuning_note, note])) or None
    return tuning


def _chosen(record: RunRecord, tunings: dict[tuple, tuple], key: tuple, device: torch.device, choose) -> tuple:
    """`tunings[key]`, made by `choose(watch)` the first time this session needs it. The seconds that took are
    added to the record's `tuning_s` (0 when an earlier run made the choice): time no other figure holds."""
    seconds = 0.0
    if key not in tunings:
        watch = Stopwatch(device)
        started = watch.now()
        tunings[key] = choose(watch)
        seconds = watch.now() - started
    record.tuning_s = (record.tuning_s or 0.0) + seconds
    return tunings[key]


def _in_data_parallel(build: partial, device: torch.device) -> TrainingSetup:
    return data_parallel(build(), device)


def _build_tuned(build: partial, tuning: Tuning, device: torch.device, record: RunRecord) -> TrainingSetup:
    """The run's model, built as in seed mode and then run the tuned way; the settings say what could be applied,
    and the note which layers bf16 left in fp32."""
    setup, applied = tuned_setup(build(), tuning, device)
    record.settings = dataclasses.replace(record.settings, **dataclasses.asdict(applied))
    recurrent = recurrent_layers(setup.model)
    if applied.precision == "bf16" and recurrent:
        names = ", ".join(sorted({type(layer).__name__ for layer in recurrent}))
        add_tuning_note(
            record, f"bf16 autocast left out the recurrent layers ({len(recurrent)} {names}): they ran in fp32"
        )
    return setup


def _calibrated_peak_tflops(record: RunRecord) -> float | None:
    """The device's calibrated matmul peak at the precision this run's arithmetic really used, for its MFU."""
    precision = peak_precision(record.device, record.settings)
    return None if precision is None else peak_tflops(machine_fingerprint()["machine_id"], record.device, precision)


def _stopped_reason() -> str:
    """Why an interrupted run ended, as its error says: by the user (Ctrl-C) or by a signal from outside."""
    number = stopping.received()
    return "interrupted by the user" if number in (None, signal.SIGINT) else stopping.described(number)


def _record_failure(record: RunRecord, error: Exception) -> None:
    record.status = "failed"
    record.error = f"{type(error).__name__}: {error}"
    logging.getLogger(__name__).error("%s on %s failed", record.workload, record.device, exc_info=error)


def _peak_rss_mib() -> float | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20  # kB on Linux, bytes on macOS
