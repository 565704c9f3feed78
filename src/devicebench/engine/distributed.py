"""Data-parallel training inside each process: the process group, each rank's slice of the batches, DDP, and the
merging of every rank's epochs into the run's.

Every rank trains the same seeded model on its slice of every global batch (data/pipeline.py: `Shard`) inside
DistributedDataParallel, which averages the gradients in the backward pass, and times its own epochs. Rank 0
gathers every rank's epochs and keeps, per epoch, the global samples over the *slowest* rank's time: the ranks wait
for each other at every all-reduce, so the slowest decides, and a sum of per-rank rates would overstate it.

The ranks meet at a barrier just before each epoch's clock starts, so no rank's clock runs while another is still
reporting the last epoch. A rank whose loss is no longer finite stops every rank after that epoch (they agree
before evaluating). A rank that fails on its own (an error, out of memory) cannot tell the others, which may be
waiting for it inside a collective: it leaves its reason beside the result file and exits, and torchrun stops the
rest at once. Starting the ranks and reading back what they did is the launcher's (devicebench/launch.py).

    devicebench run mnist-cnn2 --devices cpu --nproc 2 --max-steps 50
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from devicebench.data.pipeline import Shard, usable_cores
from devicebench.engine.loop import TrainingSetup, total_energy_j
from devicebench.events import Divergence, RunReporter
from devicebench.results.plausibility import flag_run
from devicebench.results.schema import EpochRecord, Result, RunRecord

RANK_TIMEOUT_S = 300  # a collective that waits longer than this ends the run: a rank has died or hung
RANK_FAILED_EXIT_CODE = 3  # a rank whose run failed on its own ends with this, its reason in the reason file
ENDS_A_RANK = ("failed", "oom")  # run statuses one rank can reach alone, while the others wait for it


def partial_path(output_file: Path) -> Path:
    """Where rank 0 keeps the merged epochs of a run that has not finished yet."""
    return output_file.with_name("partial-" + output_file.name)


def reason_path(output_file: Path) -> Path:
    """Where the first rank that fails on its own says why."""
    return output_file.with_name("reason-" + output_file.name)


def world_size() -> int:
    """Processes in this run's process group; 1 outside a distributed run."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def current_shard(global_batch: int) -> Shard | None:
    """This rank's slice of every global batch of `global_batch` samples; None outside a distributed run."""
    world = world_size()
    return None if world == 1 else Shard(rank=dist.get_rank(), world=world, global_batch=global_batch)


def data_parallel(setup: TrainingSetup, device: torch.device) -> TrainingSetup:
    """`setup` with its forward pass in DistributedDataParallel: gradients are averaged over the ranks during the
    backward pass, so every rank's optimizer takes the same step."""
    module = setup.forward if isinstance(setup.forward, nn.Module) else setup.model
    wrapped = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    return dataclasses.replace(setup, forward=wrapped)


def merge_rank_epochs(epochs_by_rank: list[list[EpochRecord]]) -> list[EpochRecord]:
    """Every rank's records of the same epochs as one record per epoch: global samples over the slowest rank's
    time, the mean of the ranks' losses and accuracies (their batches are the same size), rank 0's evaluation
    (every rank evaluates the same weights on the whole test split), and what all the ranks' devices and
    processes did: energy, power and CPU use summed (100% = one core), and each rank's GPU utilisation kept beside
    their mean."""
    merged = []
    for same_epoch in zip(*epochs_by_rank):
        first = same_epoch[0]
        slowest = max(epoch.train_time_s for epoch in same_epoch)
        samples = sum(epoch.samples for epoch in same_epoch)
        utilizations = [epoch.device_utilization_percent for epoch in same_epoch]
        merged.append(
            dataclasses.replace(
                first,
                samples=samples,
                train_time_s=slowest,
                samples_per_s=samples / slowest,
                step_time_ms=slowest / first.steps * 1000,
                train_loss=_of_every_rank([epoch.train_loss for epoch in same_epoch], statistics.fmean),
                train_accuracy=_of_every_rank([epoch.train_accuracy for epoch in same_epoch], statistics.fmean),
                input_wait_s=_of_every_rank([epoch.input_wait_s for epoch in same_epoch], max),
                train_thread_cpu_s=_of_every_rank([epoch.train_thread_cpu_s for epoch in same_epoch], max),
                fastest_rank_train_time_s=min(epoch.train_time_s for epoch in same_epoch),
                process_cpu_percent=_of_every_rank([epoch.process_cpu_percent for epoch in same_epoch], sum),
                device_power_mean_w=_of_every_rank([epoch.device_power_mean_w for epoch in same_epoch], sum),
                device_energy_j=_of_every_rank([epoch.device_energy_j for epoch in same_epoch], sum),
                device_utilization_percent=_of_every_rank(utilizations, statistics.fmean),
                rank_device_utilization_percent=utilizations
                if any(value is not None for value in utilizations)
                else None,
            )
        )
    return merged


def _of_every_rank(values: list[float | None], combine: Callable[[list[float]], float]) -> float | None:
    """`combine(values)`, or None when any rank's value is unknown: a sum or mean that left out a rank would pass
    for the figure of them all."""
    known = [value for value in values if value is not None]
    return None if len(known) < len(values) else combine(known)


def merge_rank_runs(runs_by_rank: list[list[RunRecord]]) -> list[RunRecord]:
    """Rank 0's runs, each with every rank's epochs merged, the energy of them all, the peak memory of the rank
    that used the most, and the first failure of any rank as its status."""
    merged = []
    for same_run in zip(*runs_by_rank):
        run = same_run[0]
        run.epochs = merge_rank_epochs([record.epochs for record in same_run])
        run.energy_j = total_energy_j(run)
        run.peak_device_memory_mib = _of_every_rank([record.peak_device_memory_mib for record in same_run], max)
        run.peak_rss_mib = _of_every_rank([record.peak_rss_mib for record in same_run], max)
        failed = next(((rank, record) for rank, record in enumerate(same_run) if record.status not in ("ok",)), None)
        if failed is not None and run.status == "ok":
            rank, record = failed
            run.status, run.error = record.status, f"rank {rank}: {record.error}"
        flag_run(run)  # rank 0 flagged its own epochs; the merged ones are every rank's
        merged.append(run)
    return merged


class RankReporter(RunReporter):
    """Every rank hands each finished epoch to rank 0, which merges them (merge_rank_epochs: the slowest rank's
    time), shows the merged epoch, and keeps the merged runs in a file, so that a rank dying later loses nothing
    that finished. The hand-over comes after the epoch's clock has stopped, at the same epoch on every rank.

    It also keeps the ranks in step: they start each epoch's clock together, stop together when any one's loss
    is no longer finite, and a rank whose run fails ends (see `run_finished`)."""

    def __init__(self, output_file: Path, screen: RunReporter) -> None:
        self.partial_file, self.reason_file = partial_path(output_file), reason_path(output_file)
        self.screen = screen
        self.leader = dist.get_rank() == 0
        self.result: Result | None = None

    def session_started(self, result: Result) -> None:
        self.result = dataclasses.replace(result, runs=[])

    @property
    def _session(self) -> Result:
        assert self.result is not None  # the runner starts the session before any of its runs
        return self.result

    def dataset_loaded(self, workload, dataset) -> None:
        if self.leader:
            self.screen.dataset_loaded(workload, dataset)

    def run_started(self, record: RunRecord) -> None:
        self._session.runs.append(dataclasses.replace(record, epochs=[]))
        if self.leader:
            self.screen.run_started(record)

    def epoch_started(self, epoch: int, steps: int) -> None:
        if self.leader:
            self.screen.epoch_started(epoch, steps)
        # the loop starts the epoch's clock right after this: no rank's clock runs while rank 0 is still showing and
        # saving the last epoch, or the slowest rank's time would include it
        barrier()

    def steps_finished(self, steps_done: int) -> None:
        if self.leader:
            self.screen.steps_finished(steps_done)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        epochs: list = [None] * dist.get_world_size()
        dist.all_gather_object(epochs, epoch)
        if self.leader:
            merged_run = self._session.runs[-1]
            (merged,) = merge_rank_epochs([[rank_epoch] for rank_epoch in epochs])
            merged_run.epochs.append(merged)
            self._session.write_json(self.partial_file)
            self.screen.epoch_finished(merged_run, merged)

    def divergence(self, own: Divergence | None) -> Divergence | None:
        """The earliest divergence of any rank, with its rank, so that every rank stops after this epoch and none
        evaluates alone (a DDP forward pass may wait for the others to broadcast buffers)."""
        every_rank: list = [None] * dist.get_world_size()
        dist.all_gather_object(every_rank, own)
        diverged = [(rank, found) for rank, found in enumerate(every_rank) if found is not None]
        if not diverged:
            return None
        rank, first = min(diverged, key=lambda entry: entry[1].step)  # the earliest; the lowest rank on a tie
        return dataclasses.replace(first, process=f"rank {rank}")

    def run_finished(self, record: RunRecord) -> None:
        if self.leader:
            self.screen.run_finished(record)
        if record.status in ENDS_A_RANK:
            self._end_rank(record)  # its run stays "running" in the partial file: run_distributed gives it the reason
        elif self.leader:  # it ended alike on every rank: a later run's failure must not take it along
            self._session.runs[-1].status, self._session.runs[-1].error = record.status, record.error
            self._session.write_json(self.partial_file)

    def _end_rank(self, record: RunRecord) -> None:
        """A run that failed on this rank may have failed on it alone, mid-epoch, while the other ranks wait for it
        inside an all-reduce they cannot leave; they would wait out RANK_TIMEOUT_S. So this rank leaves its reason
        beside the result file (the first rank to fail speaks for the run) and exits at once, without tearing down
        the process group that the others still hold; torchrun then stops them, and run_distributed reports it."""
        try:
            with self.reason_file.open("x") as reason:  # "x": created by one rank only
                json.dump({"rank": dist.get_rank(), "status": record.status, "error": record.error}, reason)
        except FileExistsError:
            pass  # another rank failed first: its reason is the run's
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(RANK_FAILED_EXIT_CODE)


def take_rank_share(devices: str, threads: int | None, local_rank: int, local_world: int) -> str:
    """Give this rank its share of the machine and return its device: the GPU of its local rank ("cuda" devices)
    or the CPU, and `threads` intra-op threads (--threads), else an even share of the cores this process may use
    between the machine's `local_world` ranks. GPU ranks too: torchrun sets OMP_NUM_THREADS=1, which would leave
    their host-side work (decoding and augmenting batches, the loader) a single core."""
    device = "cpu"
    if devices.startswith("cuda"):
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    torch.set_num_threads(threads or max(1, usable_cores() // local_world))
    return device


def barrier() -> None:
    """Wait for every rank. NCCL's barrier runs on this rank's GPU, named so that it never guesses another."""
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
