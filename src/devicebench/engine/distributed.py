"""Data-parallel training over torch.distributed: N processes started by torchrun, one device each, DDP.

`run_distributed` starts `python -m torch.distributed.run ... -m devicebench.engine.distributed CONFIG OUT`. Every
rank joins the process group (gloo on CPUs, NCCL on GPUs), trains the same seeded model on its slice of every
global batch (data/pipeline.py: `Shard`) inside DistributedDataParallel, which averages the gradients in the
backward pass, and times its own epochs. Rank 0 then gathers every rank's epochs and keeps, per epoch, the
global samples over the *slowest* rank's time: the ranks wait for each other at every all-reduce, so the
slowest decides, and a sum of per-rank rates would overstate it. Only rank 0 writes the result.

The ranks meet at a barrier just before each epoch's clock starts, so no rank's clock runs while another is still
reporting the last epoch. A rank whose loss is no longer finite stops every rank after that epoch (they agree
before evaluating). A rank that fails on its own (an error, out of memory) cannot tell the others, which may be
waiting for it inside a collective: it leaves its reason beside the result file and exits, and torchrun stops the
rest at once.

    devicebench run mnist-cnn2 --devices cpu --nproc 2 --max-steps 50
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from devicebench.config import RunConfig
from devicebench.data import DataUnavailable, known_datasets
from devicebench.data.images import is_image_folder
from devicebench.data.pipeline import Shard, usable_cores
from devicebench.data.sources import dataset_folder, dataset_spec, fetch
from devicebench.data.text import is_text_folder
from devicebench.engine.loop import TrainingSetup, total_energy_j
from devicebench.events import Divergence, Reporter
from devicebench.results.schema import EpochRecord, Result, RunRecord

RANK_TIMEOUT_S = 300  # a collective that waits longer than this ends the run: a rank has died or hung
INTERRUPT_GRACE_S = 60  # after Ctrl-C, how long the ranks get to hand in what they finished
RANK_FAILED_EXIT_CODE = 3  # a rank whose run failed on its own ends with this, its reason in the reason file
ENDS_A_RANK = ("failed", "oom")  # run statuses one rank can reach alone, while the others wait for it


class DistributedError(RuntimeError):
    """A distributed run that could not start or did not finish; the message says which and what to do, and
    `partial` holds every epoch that finished before it failed (status `failed`), if any did."""

    def __init__(self, message: str, partial: Result | None = None) -> None:
        super().__init__(message)
        self.partial = partial


@dataclass(frozen=True)
class Launch:
    """How torchrun starts the ranks: `nproc` per machine, on `nnodes` machines."""

    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None  # host:port every machine can reach; None on one machine: a free local port

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.nnodes < 1:
            raise ValueError(f"--nproc and --nnodes must be at least 1, got {self.nproc} and {self.nnodes}")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank must be 0 to {self.nnodes - 1} for {self.nnodes} machines, got "
                             f"{self.node_rank}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("a run on several machines needs --rdzv-endpoint HOST:PORT of machine 0, "
                             "reachable from every machine")

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def torchrun_command(launch: Launch, config_file: Path, output_file: Path) -> list[str]:
    """The torchrun command line that starts this machine's ranks."""
    if launch.rdzv_endpoint:
        where = ["--nnodes", str(launch.nnodes), "--node-rank", str(launch.node_rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", launch.rdzv_endpoint, "--rdzv-id", "devicebench"]
    else:
        where = ["--standalone"]  # one machine: torchrun picks a free port itself
    return [sys.executable, "-m", "torch.distributed.run", *where, "--nproc-per-node", str(launch.nproc),
            "--max-restarts", "0", "-m", "devicebench.engine.distributed", str(config_file), str(output_file)]


def run_distributed(config_fields: dict, launch: Launch, *, quiet: bool = True) -> Result | None:
    """Start this machine's ranks and return the result, which the machine running global rank 0 holds (the
    rendezvous numbers ranks in the order machines arrive); None on the others. Unless `quiet`, rank 0 shows each
    epoch as it ends."""
    if launch.rdzv_endpoint and launch.node_rank == 0:
        _check_port_free(launch.rdzv_endpoint)
    fetch_datasets(config_fields, progress=not quiet)
    with tempfile.TemporaryDirectory(prefix="devicebench-ranks-") as folder:
        config_file, output_file = Path(folder) / "config.json", Path(folder) / "result.json"
        config_file.write_text(json.dumps({"config": config_fields, "quiet": quiet}))
        ranks = subprocess.Popen(torchrun_command(launch, config_file, output_file), stderr=subprocess.PIPE,
                                 text=True)
        try:
            _, stderr = ranks.communicate()
        except KeyboardInterrupt:  # Ctrl-C reached every rank too: each marks its run interrupted and hands it in
            try:
                ranks.communicate(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                ranks.kill()
                ranks.wait()
            result = _final_result(output_file) or _partial_result(output_file, "interrupted by the user",
                                                                    status="interrupted")
            if result is None:
                raise
            result.interrupted = True
            return result
        if ranks.returncode != 0 and not output_file.exists():
            status, message = _why_the_ranks_ended(output_file, stderr, ranks.returncode)
            raise DistributedError(message, _partial_result(output_file, message, status))
        result = _final_result(output_file)
        if result is not None or launch.nnodes > 1:  # None: the rendezvous made another machine's process rank 0
            return result
        raise DistributedError("the ranks finished but rank 0 wrote no result; run again with fewer processes")


def _final_result(output_file: Path) -> Result | None:
    """Rank 0's result. It exists only once every rank has handed in its last epoch, so a rank that failed after
    that (gloo can abort a process while the group is torn down) cost nothing measured."""
    return Result.read_json(output_file) if output_file.exists() else None


def _partial_result(output_file: Path, message: str, status: str = "failed") -> Result | None:
    """What rank 0 kept of a run that ended early: every epoch merged before it ended, the unfinished runs given
    `status` and `message`."""
    partial_file = _partial_file(output_file)
    if not partial_file.exists():
        return None
    result = Result.read_json(partial_file)
    for record in result.runs:
        if record.status == "running":
            record.status, record.error = status, message
    return result


def _partial_file(output_file: Path) -> Path:
    return output_file.with_name("partial-" + output_file.name)


def _reason_file(output_file: Path) -> Path:
    return output_file.with_name("reason-" + output_file.name)


def _why_the_ranks_ended(output_file: Path, stderr: str, code: int) -> tuple[str, str]:
    """(status, message) of ranks that ended early: the reason a rank gave for its own failure, unless torchrun
    saw a rank killed by a signal, which gives none; then the others' reasons are only its echo (a broken
    connection), and torchrun's report names it."""
    own_reason = None if _killed_rank(_torchrun_failures(stderr)) else _rank_reason(output_file)
    return own_reason or ("failed", _failure_text(stderr, code))


def _rank_reason(output_file: Path) -> tuple[str, str] | None:
    """(status, message) of the rank that failed on its own and said why (RankReporter.run_finished); None when
    no rank did (it was killed, or failed outside a run)."""
    reason_file = _reason_file(output_file)
    if not reason_file.exists():
        return None
    reason = json.loads(reason_file.read_text())
    return reason["status"], f"rank {reason['rank']}: {reason['error']}; the other ranks were stopped"


def config_from_fields(config_fields: dict) -> RunConfig:
    """The RunConfig that `dataclasses.asdict` (and JSON, which makes its tuples lists) turned into `config_fields`."""
    return RunConfig(**{name: tuple(value) if isinstance(value, list) else value
                        for name, value in config_fields.items()})


def fetch_datasets(config_fields: dict, *, progress: bool) -> None:
    """Download into the cache whatever the datasets of the run lack, once per machine and before any rank starts:
    N ranks fetching at once would download N copies side by side. The ranks then read the cache. A dataset that
    cannot be had is left for each rank's own load to report (or, with `--data auto`, to replace by synthetic
    data)."""
    if config_fields["data"] == "synthetic" or config_fields.get("model") is not None:  # generated, or the user's
        return
    config = config_from_fields(config_fields)
    for name in dict.fromkeys(workload.dataset for workload in config.selected_workloads()):
        if name not in known_datasets() or (config.data_dir is not None and _is_own_folder(name, config.data_dir)):
            continue
        folder = dataset_folder(name, config.data_dir)
        try:
            for remote in dataset_spec(name).files:
                fetch(remote, folder, progress=progress)
        except DataUnavailable:
            continue


def _is_own_folder(name: str, data_dir: str) -> bool:
    """Whether `data_dir` holds the user's own images or texts for dataset `name`, rather than being a cache root."""
    kind = dataset_spec(name).kind
    return (kind == "images" and is_image_folder(data_dir)) or (kind == "text" and is_text_folder(data_dir))


def _check_port_free(endpoint: str) -> None:
    """Machine 0 serves the rendezvous at `endpoint`: a port something else already listens on would leave every
    machine waiting on a server that never answers, so it is refused before anything starts."""
    host, _, port = endpoint.rpartition(":")
    if not port.isdigit() or not host:
        raise DistributedError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT, e.g. 10.0.0.1:29400")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise DistributedError(f"port {port} of {host} is already in use; pick a free one with "
                                       f"--rdzv-endpoint {host}:PORT") from None
            # not an address of this machine: the rendezvous is served elsewhere, nothing to check here


def _torchrun_failures(stderr: str) -> list[tuple[str, str]]:
    """(rank, how it ended) of each rank in torchrun's report of failures, the first observed one first."""
    failures, root_cause = stderr.partition("Root Cause")[::2]
    blocks = re.split(r"^\[\d+\]:\s*$", root_cause + "\n" + failures, flags=re.MULTILINE)
    found = [(re.search(r"^\s*rank\s*:\s*(\d+)", block, re.MULTILINE),
              re.search(r"^\s*exitcode\s*:\s*(.+?)\s*$", block, re.MULTILINE)) for block in blocks]
    return [(rank.group(1), ending.group(1)) for rank, ending in found if rank and ending]


def _killed_rank(failures: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The first of torchrun's `failures` ended by a signal (a negative exit code: SIGKILL is -9), if any."""
    return next((failure for failure in failures if failure[1].startswith("-")), None)


def _failure_text(stderr: str, code: int) -> str:
    """torchrun's report boiled down to the rank that failed first, how it ended, and its own error. A rank killed
    by a signal is named even when another was observed first: the others' errors are only its echo."""
    if "address already in use" in stderr.lower():
        return "the rendezvous port is already in use; pick another with --rdzv-endpoint HOST:PORT"
    failures = _torchrun_failures(stderr)
    killed = _killed_rank(failures)
    rank, ending = killed or (failures[0] if failures else (None, None))
    raised = [found.group(1) for line in stderr.splitlines() if "torch.distributed.elastic" not in line
              # a Python exception's last line (torchrun prefixes it with "[rankN]:"), or the C++ one of an abort
              for found in [re.search(r"(\b\w+(?:Error|Exception): .+|what\(\): .+)$", line)] if found]
    who = f"rank {rank}" if rank else "a rank"
    how = f"exit code {ending}" if ending else f"torchrun exit code {code}"
    cause = f": {raised[-1]}" if raised and not killed else ""
    return f"{who} failed ({how}){cause}; the other ranks were stopped"


# --- inside each rank ----------------------------------------------------------------------------------------


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
        merged.append(dataclasses.replace(
            first,
            samples=samples,
            train_time_s=slowest,
            samples_per_s=samples / slowest,
            step_time_ms=slowest / first.steps * 1000,
            train_loss=_of_every_rank([epoch.train_loss for epoch in same_epoch], statistics.fmean),
            train_accuracy=_of_every_rank([epoch.train_accuracy for epoch in same_epoch], statistics.fmean),
            input_wait_s=_of_every_rank([epoch.input_wait_s for epoch in same_epoch], max),
            fastest_rank_train_time_s=min(epoch.train_time_s for epoch in same_epoch),
            process_cpu_percent=_of_every_rank([epoch.process_cpu_percent for epoch in same_epoch], sum),
            device_power_mean_w=_of_every_rank([epoch.device_power_mean_w for epoch in same_epoch], sum),
            device_energy_j=_of_every_rank([epoch.device_energy_j for epoch in same_epoch], sum),
            device_utilization_percent=_of_every_rank(utilizations, statistics.fmean),
            rank_device_utilization_percent=utilizations if any(value is not None for value in utilizations) else None,
        ))
    return merged


def _of_every_rank(values: list[float | None], combine: Callable[[list[float]], float]) -> float | None:
    """`combine(values)`, or None when any rank's value is unknown: a sum or mean that left out a rank would pass
    for the figure of them all."""
    return None if None in values else combine(values)


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
        failed = next(((rank, record) for rank, record in enumerate(same_run) if record.status not in ("ok",)),
                      None)
        if failed is not None and run.status == "ok":
            rank, record = failed
            run.status, run.error = record.status, f"rank {rank}: {record.error}"
        merged.append(run)
    return merged


class RankReporter(Reporter):
    """Every rank hands each finished epoch to rank 0, which merges them (engine/distributed.py: the slowest rank's
    time), shows the merged epoch, and keeps the merged runs in a file, so that a rank dying later loses nothing
    that finished. The hand-over comes after the epoch's clock has stopped, at the same epoch on every rank.

    It also keeps the ranks in step: they start each epoch's clock together, stop together when any one's loss
    is no longer finite, and a rank whose run fails ends (see `run_finished`)."""

    def __init__(self, output_file: Path, screen: Reporter) -> None:
        self.partial_file, self.reason_file = _partial_file(output_file), _reason_file(output_file)
        self.screen = screen
        self.leader = dist.get_rank() == 0
        self.result: Result | None = None

    def session_started(self, result: Result) -> None:
        self.result = dataclasses.replace(result, runs=[])

    def dataset_loaded(self, workload, dataset) -> None:
        if self.leader:
            self.screen.dataset_loaded(workload, dataset)

    def run_started(self, record: RunRecord) -> None:
        self.result.runs.append(dataclasses.replace(record, epochs=[]))
        if self.leader:
            self.screen.run_started(record)

    def epoch_started(self, epoch: int, steps: int) -> None:
        if self.leader:
            self.screen.epoch_started(epoch, steps)
        # the loop starts the epoch's clock right after this: no rank's clock runs while rank 0 is still showing and
        # saving the last epoch, or the slowest rank's time would include it
        _barrier()

    def steps_finished(self, steps_done: int) -> None:
        if self.leader:
            self.screen.steps_finished(steps_done)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        epochs: list = [None] * dist.get_world_size()
        dist.all_gather_object(epochs, epoch)
        if self.leader:
            merged_run = self.result.runs[-1]
            (merged,) = merge_rank_epochs([[rank_epoch] for rank_epoch in epochs])
            merged_run.epochs.append(merged)
            self.result.write_json(self.partial_file)
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
            self.result.runs[-1].status, self.result.runs[-1].error = record.status, record.error
            self.result.write_json(self.partial_file)

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


def _barrier() -> None:
    """Wait for every rank. NCCL's barrier runs on this rank's GPU, named so that it never guesses another."""
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _main(config_file: str, output_file: str) -> None:
    from rich.console import Console

    from devicebench import runner
    from devicebench.report.progress import RichReporter

    request = json.loads(Path(config_file).read_text())
    config = config_from_fields(request["config"])
    devices = take_rank_share(config.devices, config.threads, int(os.environ["LOCAL_RANK"]),
                              int(os.environ["LOCAL_WORLD_SIZE"]))
    dist.init_process_group("gloo" if devices == "cpu" else "nccl", timeout=timedelta(seconds=RANK_TIMEOUT_S))
    try:
        screen = RichReporter(Console(soft_wrap=True), quiet=request["quiet"])  # on stdout, which torchrun passes through
        reporter = RankReporter(Path(output_file), screen)
        try:
            result = runner.run(dataclasses.replace(config, devices=devices, threads=torch.get_num_threads()),
                                reporter)
        finally:
            screen.close()
        runs_by_rank: list = [None] * dist.get_world_size()
        dist.all_gather_object(runs_by_rank, result.runs)
        if dist.get_rank() == 0:
            result.runs = merge_rank_runs(runs_by_rank)
            result.write_json(Path(output_file))
        _barrier()  # no rank tears the group down while another is still in a collective
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _main(*sys.argv[1:3])
