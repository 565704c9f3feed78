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
import logging
import signal
import uuid
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from devicebench import data, stopping
from devicebench.budget import BudgetShares, fit_to_share, note_pacing, sized_plan, time_probe
from devicebench.checkpoint import CheckpointNotSaved, save_checkpoint
from devicebench.choices import DATA_CHOICES, narrowed
from devicebench.data import DataFormatError, DataUnavailable, ImageFolderDataset, TableDataset, load_dataset
from devicebench.data.own import OwnData, TensorData, TorchData
from devicebench.data.pipeline import Batches, Data, batches_for, default_workers, usable_cores
from devicebench.devices import device_name, out_of_memory
from devicebench.engine.boosting import train_boosted_trees
from devicebench.engine.calibration_store import peak_tflops, stored_run_to_run
from devicebench.engine.distributed import current_shard, data_parallel, world_size
from devicebench.engine.flops import training_flops_per_sample
from devicebench.engine.loop import StepTimes, TrainingSetup, train
from devicebench.engine.monitor import peak_rss_mib
from devicebench.engine.timing import Stopwatch, wall_clock_utc
from devicebench.engine.tuning import Tuning, base_tuning
from devicebench.engine.tuning_applied import (
    dynamo_counts,
    note_compilation,
    process_settings,
    tuned_setup,
)
from devicebench.environment import machine_fingerprint
from devicebench.events import RunReporter
from devicebench.planning import Job, Plan
from devicebench.results.diagnosis import diagnose
from devicebench.results.plausibility import flag_run, peak_precision
from devicebench.results.schema import Result, RunRecord, RunSettings
from devicebench.session_choices import SessionChoices, choose, grow_batch_size, layers_of, note_tuning
from devicebench.version import __version__
from devicebench.workloads import Hyperparameters, Workload
from devicebench.workloads.definition import definition_fingerprint
from devicebench.workloads.outputs import predicted_classes

TRAINERS = {"boosted-trees": train_boosted_trees}  # the engine's trainers of models that are not torch's
# What a job trains on: a dataset devicebench reads, or the data a model of yours brings
Dataset = data.Dataset | OwnData
DataProblem = DataUnavailable | DataFormatError  # why a workload got no data: every run of it fails with this
PROCESS_ID = uuid.uuid4().hex[:12]  # this process, in each run's record: the speedup interval's unit is the process


# trains one repeat of a job in a fresh process and returns its record (launch.repeat_in_fresh_process): given the
# job, its record so far and its budget share in seconds (None: no budget); None back: it trains in this process
FreshRepeat = Callable[[Job, RunRecord, float | None], RunRecord | None]


def run(
    plan: Plan,
    reporter: RunReporter | None = None,
    *,
    save_to: Path | None = None,
    spent_before_s: float = 0.0,
    fresh_repeat: FreshRepeat | None = None,
    fresh_from: int = 1,
) -> Result:
    """Execute every job of `plan` and return every measurement, finished or not.

    `save_to`: write the model of the last run that finishes well there, as a checkpoint for `predict`.
    `spent_before_s`: seconds of the plan's time budget already spent (a command's start-up).
    `fresh_repeat`: how a repeat from the `fresh_from`th (0-based; 0: every run) trains in a fresh process
    (`repeats_apart` says which may); None: every repeat in this one."""
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
    shares = BudgetShares.for_plan(plan, spent_before_s)
    try:
        _execute(plan.jobs, result, reporter, save_to, shares, fresh_repeat, fresh_from)
        if shares is not None:
            reporter.budget_spent(shares.account(len({job.workload.name for job in plan.jobs})))
    finally:
        torch.set_num_threads(threads_before)  # a library call leaves the process as it found it
    return result


def _execute(
    jobs: tuple[Job, ...],
    result: Result,
    reporter: RunReporter,
    save_to: Path | None,
    shares: BudgetShares | None,
    fresh_repeat: FreshRepeat | None,
    fresh_from: int = 1,
) -> None:
    # One dataset in memory at a time (the quick suite's together weigh about 1 GB), reused for as long as the
    # next job wants the same one.
    loaded: list = [None, None]  # (what was asked, the dataset or its problem)
    choices = SessionChoices()  # tuned choices and auto batch sizes, made once per session: repeats agree

    def data_for(job: Job) -> Dataset | DataProblem:
        wanted = (job.workload.load_data, job.data)  # data of your own is its loader's
        if wanted != loaded[0]:
            loaded[:] = [None, None]  # let the last one go before the next one is read
            reporter.preparing(f"getting {job.data.dataset} data ({job.data.source}) for {job.workload.name}")
            loaded[:] = [wanted, load_data(job)]
            if not isinstance(loaded[1], DataProblem):
                reporter.dataset_loaded(job.workload, loaded[1])
        return loaded[1]

    def probe(job: Job) -> StepTimes | None:  # a budget's first steps of `job`, on a model built for them alone
        dataset = data_for(job)
        if isinstance(dataset, DataProblem):
            return None  # its runs fail with the problem, at whatever size
        reporter.preparing(f"timing {job.workload.name}'s first steps on {job.device} to size it to the budget")
        return time_probe(job, _torch_data(dataset), lambda: build_setup(job, job.hyperparameters))

    try:
        for job in jobs:
            if shares is not None:
                job = dataclasses.replace(fit_to_share(job, shares, probe, reporter), sized=True)
            dataset = data_for(job)
            for repeat in range(job.repeats):
                reporter.preparing(f"building {job.workload.name} to record its definition")  # seconds, the first time
                record = new_record(job, dataset, repeat)
                result.runs.append(record)
                if isinstance(dataset, DataProblem):  # no data: say so for every run it stops
                    reporter.run_started(record)
                    record.status, record.error = "failed", str(dataset)
                    reporter.run_finished(record)
                else:
                    apart = _in_a_process_of_its_own(fresh_repeat, fresh_from, job, record, shares, reporter)
                    if apart is None:  # in this process, as planned or where no process of its own could run
                        train_record(record, job, dataset, reporter, save_to=save_to, choices=choices, shares=shares)
                    else:
                        record = result.runs[-1] = apart
                        _told(record, reporter)
                if shares is not None:
                    shares.run_done(record, elsewhere=record.process_id != PROCESS_ID)
    except KeyboardInterrupt:
        result.interrupted = True
        for record in result.runs:
            if record.status == "running":
                record.status = "interrupted"
                record.error = _stopped_reason()
                reporter.run_finished(record)


def repeats_apart(job: Job) -> bool:
    """Whether `job`'s repeats may each run in a fresh process: not where the session chooses once for them all
    (tuned mode's choices, --batch-size auto's batch), which a fresh one would choose again (their interval says so)."""
    return job.mode == "seed" and not job.batch_size_auto


def _in_a_process_of_its_own(
    fresh_repeat: FreshRepeat | None,
    fresh_from: int,
    job: Job,
    record: RunRecord,
    shares: BudgetShares | None,
    reporter: RunReporter,
) -> RunRecord | None:
    """`record`'s run trained by `fresh_repeat` in a fresh process, where the plan has it so; None: in this one."""
    if fresh_repeat is None or record.repeat < fresh_from or not repeats_apart(job):
        return None
    reporter.preparing(f"training {job.workload.name} in a fresh process, whose epochs show when it ends")
    return fresh_repeat(job, record, None if shares is None else shares.even_share_s())


def _told(record: RunRecord, reporter: RunReporter) -> None:
    """Tell `reporter` of a run another process trained, as if it had run here; one stopped there stops this too."""
    reporter.run_started(record)
    for epoch in record.epochs:
        reporter.epoch_finished(record, epoch)
    reporter.run_finished(record)
    if record.status == "interrupted":
        raise KeyboardInterrupt


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
                narrowed(request.source, DATA_CHOICES),  # one of them: the request was checked (config.RunConfig)
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
            else default_workers(_torch_data(dataset), job.workload.build_preprocessing(job.hyperparameters))
        )
    batch_size, hyperparameters = job.batch_size, job.hyperparameters
    if not isinstance(dataset, DataProblem) and job.workload.trainer is None:
        # a batch larger than the training set trains on the whole set at once: record the size that really ran
        batch_size = min(batch_size, _training_samples(dataset))
        hyperparameters = {**hyperparameters, "batch_size": batch_size}
    definition = definition_fingerprint(job.workload)  # before the start time: a first build takes a moment
    run_to_run = stored_run_to_run(machine_fingerprint()["machine_id"], str(job.device))
    return RunRecord(
        workload=job.workload.name,
        seed_experiment=job.workload.seed or "",  # empty: not a seed experiment
        device=str(job.device),
        device_name=device_name(job.device),
        repeat=repeat,
        started_utc=wall_clock_utc(),
        target_accuracy=job.training.target_accuracy,
        definition=definition,
        process_id=PROCESS_ID,
        run_to_run_cv=None if run_to_run is None else run_to_run.cv,
        run_to_run_freedom=None if run_to_run is None else run_to_run.run_to_run.freedom,
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
    choices: SessionChoices | None = None,
    shares: BudgetShares | None = None,
) -> None:
    """Train `job`'s workload on `dataset` and its device into `record`, which ends with its final status.

    `choices`: tuned-mode choices already made in this session, reused (and added to) here.
    `shares`: the session's time budget, of which this run is the first still to come: its epochs are sized to
    its share.
    """
    reporter = reporter or RunReporter()
    reporter.run_started(record)
    reporter.preparing(f"building {record.workload} on {record.device} and timing its first steps")
    settings = record.settings
    if settings.batch_size < job.batch_size:  # new_record cut it to the training set
        logging.getLogger(__name__).warning(
            "batch %s is larger than the %s training samples: trained with batch %s",
            f"{job.batch_size:,}",
            f"{settings.batch_size:,}",
            f"{settings.batch_size:,}",
        )
    batches: list[Batches] = []
    try:
        model = _train(
            record, job, dataset, reporter, SessionChoices() if choices is None else choices, batches, shares
        )
        record.peak_tflops = _calibrated_peak_tflops(record)
        flag_run(record)
        if record.status == "running":
            record.status = "ok"
            if save_to is not None and model is not None:
                _save(save_to, model, job.workload, record, dataset)
    except Exception as error:  # a broken workload must not end the suite: record it and move on
        if stopping.received() is not None:  # raised by the stopping (a loader worker the signal reached): the
            raise KeyboardInterrupt from error  # run is interrupted, not failed, and no later run starts
        _record_failure(record, error, job.device)
    finally:
        for stream in batches:
            stream.close()  # stops loader workers, also after Ctrl-C
        record.peak_rss_mib = peak_rss_mib()
        if record.status != "running":  # an interrupted run is closed by run(), once it is marked so
            reporter.run_finished(record)


def _train(
    record: RunRecord,
    job: Job,
    dataset: Dataset,
    reporter: RunReporter,
    choices: SessionChoices,
    opened: list[Batches],
    shares: BudgetShares | None,
) -> torch.nn.Module | None:
    """Train `job` into `record`: a torch model (returned, for a checkpoint), or a model that trains itself."""
    workload, settings = job.workload, record.settings
    _check_classes(workload, dataset)
    record.parameter_count = workload.parameter_count(settings.hyperparameters)
    record.flops_per_sample = training_flops_per_sample(workload, settings.hyperparameters)
    if workload.trainer is None:
        model = _train_model(record, job, _torch_data(dataset), reporter, choices, opened=opened, shares=shares)
        diagnosis = diagnose(record, cores=usable_cores())
        if diagnosis is not None:
            record.input_verdict, record.input_diagnosis = diagnosis.verdict, diagnosis.text
        return model
    # not a torch model: it trains itself, timed by the same Stopwatch
    if job.mode == "tuned" or job.batch_size_auto:
        record.tuning_note = "not a torch model: it trains as in seed mode, with nothing to tune"
    # the workloads with a trainer of their own (boosted trees) are the only ones that read a table
    assert isinstance(dataset, TableDataset), type(dataset).__name__
    TRAINERS[workload.trainer](
        record, dataset, job.device, settings.hyperparameters, job.training, Stopwatch(job.device), reporter
    )
    return None


def _torch_data(dataset: Dataset) -> Data:
    """`dataset`, which a torch model trains on in batches: never a table (those train with a trainer of their own)."""
    assert not isinstance(dataset, TableDataset), "a table trains only with a trainer of its own"
    return dataset


def _save(path: Path, model: torch.nn.Module, workload: Workload, record: RunRecord, dataset: Dataset) -> None:
    try:
        save_checkpoint(path, model, workload, record, dataset)
    except CheckpointNotSaved as error:  # the run itself finished well: it stays ok and is kept;
        # the save fails on its own, said once on stderr, and leaves no file behind
        logging.getLogger(__name__).error("error: %s", error)


def _train_model(
    record: RunRecord,
    job: Job,
    dataset: Data,
    reporter: RunReporter,
    choices: SessionChoices,
    *,
    opened: list[Batches],
    shares: BudgetShares | None = None,
) -> torch.nn.Module:
    """Train a torch model into `record`, tuned and with its batch size grown where `job` asks, its epochs sized to
    its share of a time budget, and return it. The batches it draws from land in `opened`, for the caller to close
    however training ends."""
    layers = layers_of(job.workload, record.settings.hyperparameters) if job.mode == "tuned" else None
    base = Tuning() if layers is None else base_tuning(job.device, layers, resident_possible=True)
    batches_of = _batches_of(job, dataset, record.settings)
    with process_settings(base):
        if job.batch_size_auto:
            grow_batch_size(record, job, _training_samples(dataset), base, build_setup, batches_of, choices)
        hyperparameters = record.settings.hyperparameters
        batches = batches_of(record.settings.batch_size)
        opened += batches
        # in seed mode too: where the data lived decides what a step waits for (the tuning, in tuned mode, says so again)
        record.settings = dataclasses.replace(record.settings, device_resident=batches[0].resident)
        base = dataclasses.replace(base, device_resident=batches[0].resident)
        record.settings.workers = batches[0].workers  # none where the batches are distorted on the device
        tuning = None
        if layers is not None:  # tuned mode
            tuning = choose(base, batches[0], job, record, build_setup, choices)
            note_tuning(record, tuning, layers)
        # Dynamo's counts before a compiled run (importing Dynamo takes seconds: only then)
        compiled_from = dynamo_counts() if tuning is not None and tuning.compiled else None

        def build() -> TrainingSetup:  # the run's model: as the seed builds it, run the tuned way in tuned mode
            return build_setup(job, hyperparameters, tuning)

        training = sized_plan(job, record, build, batches, reporter, shares)
        pacer = None if shares is None else shares.pacer
        model = train(
            record,
            build=build,
            train_batches=batches[0],
            test_batches=batches[1],
            plan=training,
            watch=Stopwatch(job.device),
            reporter=reporter,
            pace=pacer,
        )
        if pacer is not None:
            note_pacing(record, job, pacer, reporter)
        if compiled_from is not None:
            note_compilation(record, compiled_from)
    return model


def _batches_of(job: Job, dataset: Data, settings: RunSettings) -> Callable[[int], tuple[Batches, Batches]]:
    """The run's (training, test) batches at any batch size, preprocessed as its `settings` say: this process's
    shard of each, held on the device where in-memory data fits there (`HostBatches`), in seed mode as in tuned."""
    preprocessing = job.workload.build_preprocessing(settings.hyperparameters)

    def batches_of(batch_size: int) -> tuple[Batches, Batches]:
        return batches_for(
            dataset,
            job.workload.image_shape,
            preprocessing,
            batch_size,
            job.device,
            workers=settings.workers,
            seed=job.seed,
            device_augment=job.mode == "tuned",  # seed mode distorts image by image, as the seeds did
            shard=current_shard(batch_size),
        )

    return batches_of


def build_setup(job: Job, hyperparameters: Hyperparameters, tuning: Tuning | None = None) -> TrainingSetup:
    """A fresh model of `job`'s workload with `hyperparameters`, its loss and its optimizer, on its device, seeded so
    that every device and repeat starts from the same weights: wrapped for data-parallel training when several
    processes train together, and run the way `tuning` says in tuned mode."""
    workload, device = job.workload, job.device
    if workload.build_loss is None or workload.build_optimizer is None:
        raise TypeError(f"{workload.name} is not a torch model: it trains with a trainer of its own")
    torch.manual_seed(job.seed)  # the same initial weights on every device and repeat
    model = workload.build_model(hyperparameters).to(device)
    loss_function = workload.build_loss()
    setup = TrainingSetup(
        model=model,
        loss_function=None if loss_function is None else loss_function.to(device),
        optimizer=workload.build_optimizer(model, hyperparameters),
        predict=None if workload.output == "values" else partial(predicted_classes, output=workload.output),
        step=workload.train_step,
    )
    if world_size() > 1:
        setup = data_parallel(setup, device)
    return setup if tuning is None else tuned_setup(setup, tuning, device)[0]


def _record_failure(record: RunRecord, error: Exception, device: torch.device) -> None:
    """A run that raised: out of memory (on the device or the host) with the batch that did not fit, else failed."""
    where = out_of_memory(error)
    if where is None:
        record.status = "failed"
        record.error = f"{type(error).__name__}: {error}"
        logging.getLogger(__name__).error("%s on %s failed", record.workload, record.device, exc_info=error)
        return
    record.status = "oom"
    memory = f"memory at batch size {record.settings.batch_size}"
    what = f"out of {memory} on {device}" if where == "device" else f"out of host {memory}"
    record.error = f"{what}: try a smaller --batch-size ({error})"


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


def _calibrated_peak_tflops(record: RunRecord) -> float | None:
    """The device's calibrated matmul peak at the precision this run's arithmetic really used, for its MFU."""
    precision = peak_precision(record.device, record.settings)
    return None if precision is None else peak_tflops(machine_fingerprint()["machine_id"], record.device, precision)


def _stopped_reason() -> str:
    """Why an interrupted run ended, as its error says: by the user (Ctrl-C) or by a signal from outside."""
    number = stopping.received()
    return "interrupted by the user" if number in (None, signal.SIGINT) else stopping.described(number)
