"""Training in several processes at once: the launcher that starts them through torchrun and reads back what they
measured, and the program each of them runs; and each repeat after the first in a fresh process of its own.

`run_distributed` writes the plan to a file and starts `python -m torch.distributed.run ... -m devicebench.launch
PLAN OUT`. Each rank joins the process group (gloo on CPUs, NCCL on GPUs), takes its share of the machine and runs
the same plan on its own device with the runner; the DDP mechanics (the slices of each batch, the merging of the
ranks' epochs, keeping them in step) are engine/distributed.py's. Only rank 0 writes the result. A rank that fails
on its own leaves its reason beside the result file; torchrun then stops the others, and the launcher reports the
reason, with every epoch that finished before.

Stopping from outside: torchrun runs in a session of its own, so a signal (Ctrl-C, SIGTERM, SIGHUP) reaches the
ranks once, forwarded by the launcher, and each marks its run interrupted as on Ctrl-C. The launcher hands on each
epoch rank 0 merges as it ends (`on_partial`), so the caller can keep it at once; and a rank whose launcher was
killed outright (kill -9), which can forward nothing, stops by itself.

Repeats: each process has its own memory layout, allocator history, thread placement and clock state, and its
epochs share that luck, so a repeat is a fresh process (as pyperf spawns workers): `repeat_in_fresh_process` runs
one repeat of a job as `python -m devicebench.launch --repeat PLAN OUT` (its own warm-up epoch included) and hands
its record back to the runner, which stores and shows it as its own. The child runs in a session of its own: a
stop signal reaches it once, forwarded, and it hands in its run marked interrupted; one whose parent was killed
outright stops by itself.

    devicebench run mnist-cnn2 --devices cpu --nproc 2 --max-steps 50
    devicebench run mnist-cnn2 --devices cpu --repeats 3 --max-steps 50
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
from rich.console import Console

from devicebench import runner, stopping
from devicebench.data import DataUnavailable, known_datasets
from devicebench.data.download import fetch
from devicebench.data.images import is_image_folder
from devicebench.data.sources import dataset_folder, dataset_spec
from devicebench.data.text import is_text_folder
from devicebench.engine.distributed import (
    RANK_TIMEOUT_S,
    RankReporter,
    barrier,
    merge_rank_runs,
    partial_path,
    reason_path,
    take_rank_share,
)
from devicebench.engine.timing import process_age_s
from devicebench.planning import Job, Plan
from devicebench.report.progress import RichReporter
from devicebench.results.schema import Result, RunRecord, RunStatus

INTERRUPT_GRACE_S = 60  # after Ctrl-C, how long the ranks get to hand in what they finished (torchrun kills at 30)
POLL_S = 1.0  # how often the launcher looks for newly merged epochs, and a rank for its launcher
ORPHAN_GRACE_S = 10  # how long a rank whose launcher died gets to stop by itself before it exits at once
PARENT_PID_VARIABLE = "DEVICEBENCH_PARENT_PID"  # the launcher's process id, which each rank watches
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each stops a rank as Ctrl-C does


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
            raise ValueError(
                f"--node-rank must be 0 to {self.nnodes - 1} for {self.nnodes} machines, got {self.node_rank}"
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(
                "a run on several machines needs --rdzv-endpoint HOST:PORT of machine 0, reachable from every machine"
            )

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def torchrun_command(launch: Launch, plan_file: Path, output_file: Path) -> list[str]:
    """The torchrun command line that starts this machine's ranks."""
    if launch.rdzv_endpoint:
        where = [
            "--nnodes",
            str(launch.nnodes),
            "--node-rank",
            str(launch.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            launch.rdzv_endpoint,
            "--rdzv-id",
            "devicebench",
        ]
    else:
        where = ["--standalone"]  # one machine: torchrun picks a free port itself
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        "--nproc-per-node",
        str(launch.nproc),
        "--max-restarts",
        "0",
        "-m",
        "devicebench.launch",
        str(plan_file),
        str(output_file),
    ]


def run_distributed(
    plan: Plan,
    launch: Launch,
    *,
    quiet: bool = True,
    on_partial: Callable[[Result], None] | None = None,
    signals: Sequence[int] = (),
) -> Result | None:
    """Start this machine's ranks and return the result, which the machine running global rank 0 holds (the
    rendezvous numbers ranks in the order machines arrive); None on the others. Unless `quiet`, rank 0 shows each
    epoch as it ends; `on_partial` gets the merged runs so far each time an epoch or a run ends, so that the caller
    can keep them before the ranks finish.

    torchrun starts in a session of its own, so that a signal reaches the ranks once, through this process: on a
    KeyboardInterrupt it forwards the first of `signals` (the ones that stopped this process; none: Ctrl-C) and waits
    for the ranks to hand in what they finished. `result.interrupted` says whether any planned run was cut short."""
    if launch.rdzv_endpoint and launch.node_rank == 0:
        _check_port_free(launch.rdzv_endpoint)
    fetch_datasets(plan, progress=not quiet)
    with tempfile.TemporaryDirectory(prefix="devicebench-ranks-") as folder:
        plan_file, output_file = Path(folder) / "plan.json", Path(folder) / "result.json"
        plan_file.write_text(json.dumps({"plan": plan.to_dict(), "quiet": quiet}))
        log_file = Path(folder) / "torchrun.log"  # a file, not a pipe: nobody reads a pipe while we wait
        with log_file.open("w") as log:
            ranks = subprocess.Popen(
                torchrun_command(launch, plan_file, output_file),
                stderr=log,
                text=True,
                start_new_session=True,
                env={**os.environ, PARENT_PID_VARIABLE: str(os.getpid())},
            )
            try:
                _wait_reporting(ranks, partial_path(output_file), on_partial)
            except KeyboardInterrupt:
                _stop_ranks(ranks, signals[0] if signals else signal.SIGINT)
                result = _final_result(output_file) or _partial_result(
                    output_file, "interrupted by the user", status="interrupted"
                )
                if result is None:
                    raise
                planned = sum(job.repeats for job in plan.jobs)
                result.interrupted = len(result.runs) < planned or any(
                    record.status == "interrupted" for record in result.runs
                )  # else every epoch had finished
                return result
        stderr = log_file.read_text()
        if ranks.returncode != 0 and not output_file.exists():
            status, message = _why_the_ranks_ended(output_file, stderr, ranks.returncode)
            raise DistributedError(message, _partial_result(output_file, message, status))
        result = _final_result(output_file)
        if result is not None or launch.nnodes > 1:  # None: the rendezvous made another machine's process rank 0
            return result
        raise DistributedError("the ranks finished but rank 0 wrote no result; run again with fewer processes")


def _wait_reporting(ranks: subprocess.Popen, partial_file: Path, on_partial: Callable[[Result], None] | None) -> None:
    """Wait for torchrun to end, handing `on_partial` rank 0's merged runs each time its file changes."""
    seen = None
    while True:
        try:
            ranks.wait(timeout=POLL_S)
            ended = True
        except subprocess.TimeoutExpired:
            ended = False
        if on_partial is not None:
            try:
                state = partial_file.stat()
            except FileNotFoundError:
                state = None
            if state is not None and (state.st_mtime_ns, state.st_size) != seen:
                seen = state.st_mtime_ns, state.st_size
                on_partial(Result.read_json(partial_file))  # written atomically: never half a file
        if ended:
            return


def _stop_ranks(ranks: subprocess.Popen, number: int) -> None:
    """Forward signal `number` to torchrun, which passes it on to every rank (each marks its run interrupted and
    rank 0 hands in the result), and wait for them; a second signal, or ranks that outlast INTERRUPT_GRACE_S, ends
    them all at once. The ranks are torchrun's children, each in a session of its own."""
    try:
        os.killpg(ranks.pid, number)
        ranks.wait(timeout=INTERRUPT_GRACE_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, ProcessLookupError):
        try:
            processes = [psutil.Process(ranks.pid), *psutil.Process(ranks.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            processes = []
        for process in reversed(processes):  # the ranks first: torchrun must not start its own shutdown meanwhile
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        ranks.wait()


def _final_result(output_file: Path) -> Result | None:
    """Rank 0's result. It exists only once every rank has handed in its last epoch, so a rank that failed after
    that (gloo can abort a process while the group is torn down) cost nothing measured."""
    return Result.read_json(output_file) if output_file.exists() else None


def _partial_result(output_file: Path, message: str, status: RunStatus = "failed") -> Result | None:
    """What rank 0 kept of a run that ended early: every epoch merged before it ended, the unfinished runs given
    `status` and `message`. When a rank failed (`status` is not "interrupted"), a run that rank 0 marked
    interrupted was stopped by torchrun because of that failure, not by the user: it takes the failure's reason too
    (whether rank 0 still marks it depends on where the stop finds it: inside a collective or between steps)."""
    partial_file = partial_path(output_file)
    if not partial_file.exists():
        return None
    result = Result.read_json(partial_file)
    unfinished = ("running",) if status == "interrupted" else ("running", "interrupted")
    for record in result.runs:
        if record.status in unfinished:
            record.status, record.error = status, message
    return result


def _why_the_ranks_ended(output_file: Path, stderr: str, code: int) -> tuple[RunStatus, str]:
    """(status, message) of ranks that ended early: the reason a rank gave for its own failure, unless torchrun
    saw a rank killed by a signal, which gives none; then the others' reasons are only its echo (a broken
    connection), and torchrun's report names it."""
    own_reason = None if _killed_rank(_torchrun_failures(stderr)) else _rank_reason(output_file)
    return own_reason or ("failed", _failure_text(stderr, code))


def _rank_reason(output_file: Path) -> tuple[RunStatus, str] | None:
    """(status, message) of the rank that failed on its own and said why (RankReporter.run_finished); None when
    no rank did (it was killed, or failed outside a run)."""
    reason_file = reason_path(output_file)
    if not reason_file.exists():
        return None
    reason = json.loads(reason_file.read_text())
    return reason["status"], f"rank {reason['rank']}: {reason['error']}; the other ranks were stopped"


def fetch_datasets(plan: Plan, *, progress: bool) -> None:
    """Download into the cache whatever the datasets of the plan lack, once per machine and before any rank starts:
    N ranks fetching at once would download N copies side by side. The ranks then read the cache. A dataset that
    cannot be had is left for each rank's own load to report (or, with `--data auto`, to replace by synthetic
    data)."""
    downloadable = [
        job.data
        for job in plan.jobs
        if job.workload.load_data is None  # not data of your own
        and job.data.source != "synthetic"
        and job.data.dataset in known_datasets()
    ]
    for name, data_dir in dict.fromkeys((request.dataset, request.data_dir) for request in downloadable):
        if data_dir is not None and _is_own_folder(name, data_dir):
            continue
        folder = dataset_folder(name, data_dir)
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
                raise DistributedError(
                    f"port {port} of {host} is already in use; pick a free one with --rdzv-endpoint {host}:PORT"
                ) from None
            # not an address of this machine: the rendezvous is served elsewhere, nothing to check here


def _torchrun_failures(stderr: str) -> list[tuple[str, str]]:
    """(rank, how it ended) of each rank in torchrun's report of failures, the first observed one first."""
    failures, root_cause = stderr.partition("Root Cause")[::2]
    blocks = re.split(r"^\[\d+\]:\s*$", root_cause + "\n" + failures, flags=re.MULTILINE)
    found = [
        (
            re.search(r"^\s*rank\s*:\s*(\d+)", block, re.MULTILINE),
            re.search(r"^\s*exitcode\s*:\s*(.+?)\s*$", block, re.MULTILINE),
        )
        for block in blocks
    ]
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
    raised = [
        found.group(1)
        for line in stderr.splitlines()
        if "torch.distributed.elastic" not in line
        # a Python exception's last line (torchrun prefixes it with "[rankN]:"), or the C++ one of an abort
        for found in [re.search(r"(\b\w+(?:Error|Exception): .+|what\(\): .+)$", line)]
        if found
    ]
    who = f"rank {rank}" if rank else "a rank"
    how = f"exit code {ending}" if ending else f"torchrun exit code {code}"
    cause = f": {raised[-1]}" if raised and not killed else ""
    return f"{who} failed ({how}){cause}; the other ranks were stopped"


def repeat_in_fresh_process(
    plan: Plan,
    job: Job,
    placeholder: RunRecord,
    budget_s: float | None,
    environment: dict[str, str] | None = None,
    *,
    start_up_counts: bool = True,
) -> RunRecord:
    """Train one repeat of `job` (of `plan`, whose threads and model it shares) in a new interpreter and return its
    record, or `placeholder` failed with the reason where no process started or handed one in. `budget_s`: its
    share of the time budget (None: none), its process's start counted against it where `start_up_counts`.
    `environment`: variables of the child's only. A KeyboardInterrupt (or the signal devicebench.stopping caught)
    is forwarded, and the record comes back interrupted with every epoch it finished."""
    # the threads named: a fresh interpreter would take torch's default, and the repeats would no longer pool
    threads = plan.threads or torch.get_num_threads()
    one = dataclasses.replace(plan, jobs=(dataclasses.replace(job, repeats=1),), budget_s=budget_s, threads=threads)
    with tempfile.TemporaryDirectory(prefix="devicebench-repeat-") as folder:
        plan_file, output_file = Path(folder) / "plan.json", Path(folder) / "result.json"
        plan_file.write_text(json.dumps({"plan": one.to_dict(), "quiet": True, "start_up_counts": start_up_counts}))
        log_file = Path(folder) / "repeat.log"
        with log_file.open("w") as log:
            try:
                child = subprocess.Popen(
                    [sys.executable, "-m", "devicebench.launch", "--repeat", str(plan_file), str(output_file)],
                    stderr=log,
                    start_new_session=True,
                    env={**os.environ, **(environment or {}), PARENT_PID_VARIABLE: str(os.getpid())},
                )
            except OSError as error:  # no memory or processes left to start one, an interpreter gone
                return dataclasses.replace(placeholder, status="failed", error=f"no process could start: {error}")
            try:
                child.wait()
            except KeyboardInterrupt:
                _stop_ranks(child, stopping.received() or signal.SIGINT)
        if not output_file.exists():
            (reason,) = log_file.read_text().strip().splitlines()[-1:] or [f"exit code {child.returncode}"]
            why, ended = f"the repeat's process ended without a result: {reason}", stopping.received()
            return dataclasses.replace(placeholder, status="interrupted" if ended else "failed", error=why)
        (record,) = Result.read_json(output_file).runs
        record.repeat = placeholder.repeat
        return record


def _repeat_main(plan_file: str, output_file: str) -> None:
    """One repeat in a fresh process: run the one-job plan, and hand in its record, interrupted or not."""
    request = json.loads(Path(plan_file).read_text())
    plan = Plan.from_dict(request["plan"])
    launcher_pid = int(os.environ.get(PARENT_PID_VARIABLE, "0")) or None
    _stop_when_orphaned(launcher_pid, Path(output_file).parent)
    for number in STOPPING_SIGNALS:  # whichever signal the parent forwards, the run is kept as on Ctrl-C
        signal.signal(number, signal.default_int_handler)
    result = runner.run(plan, spent_before_s=process_age_s() if request.get("start_up_counts", True) else 0.0)
    for number in STOPPING_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    result.write_json(Path(output_file))


def _rank_main(plan_file: str, output_file: str) -> None:
    """One rank, as torchrun starts it: join the group, run the plan on this rank's device, and merge at rank 0."""
    request = json.loads(Path(plan_file).read_text())
    plan = Plan.from_dict(request["plan"])
    device = take_rank_share(
        plan.jobs[0].device.type, plan.threads, int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    )
    dist.init_process_group("gloo" if device == "cpu" else "nccl", timeout=timedelta(seconds=RANK_TIMEOUT_S))
    launcher_pid = int(os.environ.get(PARENT_PID_VARIABLE, "0")) or None
    _stop_when_orphaned(launcher_pid, Path(output_file).parent)
    try:
        screen = RichReporter(
            Console(soft_wrap=True), quiet=request["quiet"]
        )  # on stdout, which torchrun passes through
        try:
            for number in STOPPING_SIGNALS:  # whichever signal the launcher forwards, the run is kept as on Ctrl-C
                signal.signal(number, signal.default_int_handler)
            result = runner.run(
                plan.for_rank(torch.device(device), torch.get_num_threads()), RankReporter(Path(output_file), screen)
            )
        finally:
            screen.close()
        for number in STOPPING_SIGNALS:  # what finished is merged and written whatever comes now
            signal.signal(number, signal.SIG_IGN)
        runs_by_rank: list = [None] * dist.get_world_size()
        dist.all_gather_object(runs_by_rank, result.runs)
        if dist.get_rank() == 0:
            result.runs = merge_rank_runs(runs_by_rank)
            result.write_json(Path(output_file))
        barrier()  # no rank tears the group down while another is still in a collective
    finally:
        dist.destroy_process_group()
        _remove_if_abandoned(Path(output_file).parent, launcher_pid)


def _stop_when_orphaned(launcher_pid: int | None, folder: Path) -> None:
    """Stop this rank, as a forwarded signal would, once the launcher (`launcher_pid`) or torchrun is gone: killed
    outright, neither can pass a signal on, and the ranks would train to the end for nobody. A rank still running
    ORPHAN_GRACE_S later (blocked in a collective with a rank already gone) exits at once."""
    torchrun = os.getppid()

    def watch() -> None:
        while os.getppid() == torchrun and (launcher_pid is None or _alive(launcher_pid)):
            time.sleep(POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE_S)
        _remove_if_abandoned(folder, launcher_pid)
        os._exit(1)

    threading.Thread(target=watch, name="devicebench-launcher-watch", daemon=True).start()


def _remove_if_abandoned(folder: Path, launcher_pid: int | None) -> None:
    """Remove the ranks' `folder` (plan, result, log) once the launcher that made it, and would have removed it, is
    dead: nobody will read it. Whichever rank gets there first does it: torchrun may kill any one of them before."""
    if launcher_pid is not None and not _alive(launcher_pid):
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    if sys.argv[1] == "--repeat":
        _repeat_main(*sys.argv[2:4])
    else:
        _rank_main(*sys.argv[1:3])
