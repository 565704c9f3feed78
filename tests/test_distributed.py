"""Data-parallel training: shards that add up to one process's batches, the slowest rank's time, and 2 processes
over gloo that learn exactly what 1 process learns.

    python -m pytest tests/test_distributed.py -q
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import torch
from result_fixtures import machine, run, session
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench import launch as launcher
from devicebench.cli import app
from devicebench.config import ConfigError
from devicebench.data.pipeline import HostBatches, Shard
from devicebench.data.sources import dataset_spec
from devicebench.engine import distributed
from devicebench.engine.distributed import merge_rank_epochs, merge_rank_runs
from devicebench.launch import (
    DistributedError,
    Launch,
    run_distributed,
    torchrun_command,
)
from devicebench.results.compare import compare
from devicebench.results.schema import EpochRecord
from devicebench.results.store import Store


def epoch(seconds: float, loss: float, samples: int = 100) -> EpochRecord:
    return EpochRecord(
        epoch=2,
        phase="steady",
        steps=4,
        samples=samples,
        train_time_s=seconds,
        samples_per_s=samples / seconds,
        step_time_ms=seconds / 4 * 1000,
        train_loss=loss,
        train_accuracy=0.5,
        input_wait_s=0.1,
        test_accuracy=0.7,
    )


def test_throughput_is_global_samples_over_the_slowest_rank():
    (merged,) = merge_rank_epochs([[epoch(2.0, 1.0)], [epoch(2.5, 3.0)]])
    assert merged.samples == 200 and merged.train_time_s == 2.5
    assert merged.samples_per_s == 80  # not 100/2.0 + 100/2.5 = 90: the ranks wait for each other
    assert merged.step_time_ms == 625 and merged.fastest_rank_train_time_s == 2.0
    assert merged.train_loss == 2.0  # equal batches: the global mean loss is the mean of the ranks'
    assert merged.test_accuracy == 0.7  # rank 0's evaluation


def monitored(
    epoch_record: EpochRecord, cpu: float | None, utilization: float | None, power: float | None, energy: float | None
) -> EpochRecord:
    return dataclasses.replace(
        epoch_record,
        process_cpu_percent=cpu,
        device_utilization_percent=utilization,
        device_power_mean_w=power,
        device_energy_j=energy,
    )


def test_every_rank_s_device_and_process_count_in_the_merged_epoch():
    (merged,) = merge_rank_epochs(
        [
            [monitored(epoch(2.0, 1.0), 95.0, 90.0, 300.0, 600.0)],
            [monitored(epoch(2.5, 1.0), 105.0, 40.0, 200.0, 500.0)],
            [monitored(epoch(2.2, 1.0), 100.0, 83.0, 250.0, 550.0)],
        ]
    )
    assert merged.device_energy_j == 1650.0 and merged.device_power_mean_w == 750.0  # three GPUs' worth
    assert merged.process_cpu_percent == 300.0  # three processes of about one core each
    assert merged.rank_device_utilization_percent == [90.0, 40.0, 83.0]  # in rank order
    assert merged.device_utilization_percent == 71.0  # their mean; the table also shows the lowest, 40%


def test_one_rank_s_unknown_figure_leaves_the_total_unknown():
    (merged,) = merge_rank_epochs(
        [[monitored(epoch(2.0, 1.0), 95.0, 90.0, 300.0, 600.0)], [monitored(epoch(2.0, 1.0), None, None, None, None)]]
    )
    assert merged.device_energy_j is None and merged.device_power_mean_w is None  # not rank 0's alone
    assert merged.process_cpu_percent is None and merged.device_utilization_percent is None
    assert merged.rank_device_utilization_percent == [90.0, None]
    (on_cpus,) = merge_rank_epochs([[epoch(2.0, 1.0)], [epoch(2.0, 1.0)]])
    assert on_cpus.rank_device_utilization_percent is None  # no rank has a utilisation to keep


def test_a_merged_run_holds_every_rank_s_energy_and_the_largest_rank_s_memory():
    ranks = [run("cuda:0", [1.0, 1.0]), run("cuda:1", [1.0, 1.0])]
    for record, energy_j, device_mib, rss_mib in zip(ranks, (100.0, 140.0), (5000.0, 7000.0), (900.0, 800.0)):
        record.epochs = [monitored(entry, 100.0, 90.0, energy_j, energy_j) for entry in record.epochs]
        record.energy_j, record.peak_device_memory_mib, record.peak_rss_mib = 2 * energy_j, device_mib, rss_mib
    (merged,) = merge_rank_runs([[ranks[0]], [ranks[1]]])
    assert merged.energy_j == 480.0  # 2 epochs of (100 + 140) J
    assert merged.peak_device_memory_mib == 7000.0 and merged.peak_rss_mib == 900.0
    unknown = run("cuda:1", [1.0, 1.0])  # no NVML figures and no peak memory on this rank
    (partly_known,) = merge_rank_runs([[run("cuda:0", [1.0, 1.0], energy_j=100.0)], [unknown]])
    assert partly_known.energy_j is None and partly_known.peak_device_memory_mib is None


def test_a_rank_that_failed_fails_the_run_and_is_named():
    healthy, broken = run("cpu", [1.0, 1.0]), run("cpu", [1.0, 1.0])
    broken.status, broken.error = "diverged", "loss became nan at step 7 (epoch 2)"
    (merged,) = merge_rank_runs([[healthy], [broken]])
    assert merged.status == "diverged" and merged.error == "rank 1: loss became nan at step 7 (epoch 2)"


def test_the_ranks_shards_add_up_to_one_process_s_batches():
    images = np.arange(50, dtype=np.uint8).reshape(50, 1, 1, 1)
    labels = np.arange(50, dtype=np.int64)
    whole = HostBatches(images, labels, 8, torch.device("cpu"), seed=3)
    shards = [HostBatches(images, labels, 8, torch.device("cpu"), seed=3, shard=Shard(rank, 2, 8)) for rank in (0, 1)]
    assert [len(shard) for shard in shards] == [6, 6] and len(whole) == 7  # the partial global batch is dropped
    assert shards[0].batch_sizes(6) == [4] * 6
    for step, ((expected, _), (first, _), (second, _)) in enumerate(zip(whole.epoch(2), *(s.epoch(2) for s in shards))):
        assert torch.equal(torch.cat([first, second]), expected), step


def test_what_several_processes_cannot_do_is_refused_before_they_start():
    with pytest.raises(ConfigError, match="global batch of 50 does not split evenly over 3 processes"):
        RunConfig(workloads=("mnist-cnn2",), nproc=3)
    RunConfig(workloads=("mnist-cnn2",), nproc=3, per_device_batch=True)  # 50 each: 150 in all
    with pytest.raises(ConfigError, match="drop --mode tuned"):
        RunConfig(workloads=("mnist-cnn2",), nproc=2, mode="tuned")
    with pytest.raises(ConfigError, match="gbdt-synthetic is not a torch model"):
        RunConfig(workloads=("gbdt-synthetic",), nproc=2)
    with pytest.raises(ValueError, match="needs --rdzv-endpoint"):
        Launch(nproc=2, nnodes=2)
    with pytest.raises(ValueError, match="--node-rank must be 0 to 1"):
        Launch(nproc=1, nnodes=2, node_rank=2, rdzv_endpoint="127.0.0.1:29500")


def test_torchrun_gets_a_free_port_on_one_machine_and_the_rendezvous_on_several(tmp_path):
    single = torchrun_command(Launch(nproc=2), tmp_path / "c", tmp_path / "o")
    assert "--standalone" in single and single[single.index("--nproc-per-node") + 1] == "2"
    several = torchrun_command(
        Launch(nproc=4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400"), tmp_path / "c", tmp_path / "o"
    )
    assert several[several.index("--rdzv-endpoint") + 1] == "10.0.0.1:29400"
    assert several[several.index("--node-rank") + 1] == "1" and "--standalone" not in several


def test_gpu_ranks_get_their_share_of_the_cores_not_torchrun_s_one_thread(monkeypatch):
    chosen: list[int] = []
    monkeypatch.setattr(distributed, "usable_cores", lambda: 16)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: chosen.append(threads))
    assert distributed.take_rank_share("cuda", None, 3, 4) == "cuda:3" and chosen == [3, 4]  # GPU 3; 16 cores / 4
    chosen.clear()
    assert distributed.take_rank_share("cpu", None, 1, 32) == "cpu" and chosen == [1]  # never fewer than one
    chosen.clear()
    assert distributed.take_rank_share("cuda", 2, 0, 4) == "cuda:0" and chosen == [0, 2]  # --threads 2 as asked


def test_the_data_is_fetched_once_before_any_rank_starts(monkeypatch, tmp_path):
    events: list[str] = []
    monkeypatch.setattr(launcher, "fetch", lambda remote, folder, **options: events.append(remote.filename))

    def torchrun(command, **options):
        events.append("torchrun")
        raise OSError("no ranks in this test")

    monkeypatch.setattr(launcher, "subprocess", SimpleNamespace(Popen=torchrun))  # planning runs programs too
    config = RunConfig(
        workloads=("mnist-cnn2", "mnist-cnn4"), devices="cpu", data="auto", nproc=2, data_dir=str(tmp_path)
    )
    with pytest.raises(OSError, match="no ranks"):
        run_distributed(planning.plan(config), Launch(nproc=2))
    assert events == [remote.filename for remote in dataset_spec("mnist").files] + ["torchrun"]  # once for both
    events.clear()
    with pytest.raises(OSError, match="no ranks"):
        run_distributed(planning.plan(dataclasses.replace(config, data="synthetic")), Launch(nproc=2))
    assert events == ["torchrun"]  # nothing to download
    (tmp_path / "own" / "train").mkdir(parents=True)
    events.clear()
    with pytest.raises(OSError, match="no ranks"):
        run_distributed(planning.plan(dataclasses.replace(config, data_dir=str(tmp_path / "own"))), Launch(nproc=2))
    assert events == ["torchrun"]  # the user's own images: nothing to download either


def test_scaling_efficiency_is_n_process_throughput_over_n_times_one():
    one = run("cpu", [2.0, 1.0, 1.0])  # 1,000 samples/s
    two = run("cpu", [2.0, 0.8, 0.8])  # 1,250 samples/s from 2 processes
    two.settings.world_size = 2
    rows = compare([session(machine("box", "m1"), [one, two])])["mnist-cnn2"]
    assert rows[1].baseline is rows[0]
    assert rows[1].scaling_efficiency == pytest.approx(0.625)  # 1.25x of the 2x that would be perfect


@pytest.mark.slow
def test_two_processes_learn_exactly_what_one_process_learns():
    """cifar10-mlp has no dropout, so the only difference is where each half batch's gradient is computed."""
    config = RunConfig(
        workloads=("cifar10-mlp",), devices="cpu", data="synthetic", epochs=2, max_steps=6, max_eval_steps=1
    )
    one = runner.run(planning.plan(config)).runs[0]
    two = run_distributed(planning.plan(dataclasses.replace(config, nproc=2)), Launch(nproc=2)).runs[0]
    assert two.status == "ok" and two.settings.world_size == 2 and two.settings.batch_size == 32
    assert [e.samples for e in two.epochs] == [e.samples for e in one.epochs] == [192, 192]
    assert [e.train_loss for e in two.epochs] == pytest.approx([e.train_loss for e in one.epochs], rel=1e-5)
    assert [e.test_loss for e in two.epochs] == pytest.approx([e.test_loss for e in one.epochs], rel=1e-5)
    assert all(e.fastest_rank_train_time_s <= e.train_time_s for e in two.epochs)


@pytest.mark.slow
def test_the_cli_trains_in_two_processes_as_a_new_user_would(tmp_path):
    output = tmp_path / "result.json"
    completed = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--nproc",
            "2",
            "--epochs",
            "2",
            "--max-steps",
            "4",
            "--max-eval-steps",
            "1",
            "--data",
            "synthetic",
            "--db",
            str(tmp_path / "db.sqlite"),
            "--json",
            str(output),
        ],
    )
    assert completed.exit_code == 0, completed.output
    assert "Training on 2 cpu processes" in completed.output and "cpu (2 processes)" in completed.output
    assert '"world_size": 2' in output.read_text()
    with Store(tmp_path / "db.sqlite") as store:  # committed epoch by epoch, then closed as the ranks ended it
        (stored,) = store.results()
    assert [(record.status, len(record.epochs)) for record in stored.runs] == [("ok", 2)]


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_at_once_naming_it_and_keeps_the_finished_epochs():
    config = RunConfig(
        workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=200, max_steps=5, max_eval_steps=1
    )
    outcome: dict[str, DistributedError] = {}

    def train() -> None:
        try:
            run_distributed(planning.plan(dataclasses.replace(config, nproc=2)), Launch(nproc=2))
        except DistributedError as error:
            outcome["error"] = error

    thread = threading.Thread(target=train)
    thread.start()
    victim = _wait_for_rank(1)
    _wait_for(_partial_file_of(victim).exists)
    victim.kill()  # mid-run: an epoch has finished, many have not
    thread.join(timeout=90)
    assert not thread.is_alive()  # no hang: the other rank was stopped
    error = outcome["error"]
    assert str(error).startswith("rank 1 failed (exit code -9")
    assert str(error).endswith("(SIGKILL)); the other ranks were stopped")
    (partial,) = error.partial.runs
    assert partial.status == "failed" and partial.error == str(error)
    assert 1 <= len(partial.epochs) < 200 and partial.epochs[0].samples == 250  # 5 global batches of 50


RANK_FAULTS = """\
\"\"\"A user's model, one of whose ranks misbehaves as DEVICEBENCH_TEST_FAULT says (tests/test_distributed.py).\"\"\"
import os
import time

import torch
from torch import nn

import devicebench
from devicebench.report.progress import RichReporter

FAULT = os.environ.get("DEVICEBENCH_TEST_FAULT", "")
RANK = int(os.environ.get("RANK", "-1"))  # -1: the test's own process, which only checks the configuration
STEPS_PER_EPOCH = 4  # 128 training samples in global batches of 32
SLOW_REPORTING_S = 1.0
trained_steps = 0


def build():
    return nn.Linear(8, 2)


def data():
    inputs = torch.randn(160, 8, generator=torch.Generator().manual_seed(0))
    labels = (inputs[:, 0] > 0).long()
    return devicebench.TensorData(inputs[:128], labels[:128], inputs[128:], labels[128:])


def loss(outputs, labels):
    global trained_steps
    value = nn.functional.cross_entropy(outputs, labels)
    if torch.is_grad_enabled() and not outputs.is_meta:  # a training step: not evaluation, nor counting FLOPs
        trained_steps += 1
        if RANK == 1 and trained_steps >= STEPS_PER_EPOCH + 2:  # from the 2nd step of epoch 2 on
            if FAULT == "nan":
                return value + float("nan")  # this rank's loss is NaN; the gradients stay finite
            if FAULT == "oom":
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return value


if RANK == 0 and FAULT == "slow-reporting":
    def show_slowly(self, record, epoch, show=RichReporter.epoch_finished):
        time.sleep(SLOW_REPORTING_S)
        show(self, record, epoch)

    RichReporter.epoch_finished = show_slowly
"""


@pytest.fixture
def faulty_rank(tmp_path, monkeypatch):
    """Two ranks training a user's model (RANK_FAULTS) for up to 4 epochs of 4 steps; `faulty_rank(fault)` runs them
    with that fault and returns (the run's record or its DistributedError, seconds it took)."""
    (tmp_path / "rankfaults.py").write_text(RANK_FAULTS)
    monkeypatch.chdir(tmp_path)  # the ranks import it from the folder they start in, as they would a user's module
    monkeypatch.syspath_prepend(tmp_path)
    config = RunConfig(
        model="rankfaults:build",
        data="rankfaults:data",
        loss="rankfaults:loss",
        optimizer="sgd",
        devices="cpu",
        epochs=4,
        max_steps=4,
        max_eval_steps=1,
        nproc=2,
    )

    def run_with(fault: str):
        monkeypatch.setenv("DEVICEBENCH_TEST_FAULT", fault)
        started = time.monotonic()
        try:
            outcome = run_distributed(planning.plan(config), Launch(nproc=2)).runs[0]
        except DistributedError as error:
            outcome = error
        return outcome, time.monotonic() - started

    yield run_with
    sys.modules.pop("rankfaults", None)


@pytest.mark.slow
def test_no_rank_s_epoch_clock_runs_while_rank_0_is_still_reporting(faulty_rank):
    record, _ = faulty_rank("slow-reporting")  # rank 0 takes 1 s to show each epoch
    assert record.status == "ok" and len(record.epochs) == 4
    times_s = [epoch.train_time_s for epoch in record.steady_epochs]
    assert max(times_s) < 0.5, times_s  # 4 tiny steps each, without the 1 s rank 0 spent reporting


@pytest.mark.slow
def test_one_rank_s_nan_loss_stops_every_rank_at_once_as_diverged(faulty_rank):
    record, seconds = faulty_rank("nan")
    assert seconds < 60  # not the 300 s collective timeout of a rank left waiting
    assert record.status == "diverged" and record.error == "rank 1: loss became nan at step 6 (epoch 2)"
    assert record.diverged_at_step == 6 and len(record.epochs) == 2
    assert record.epochs[0].test_loss is not None and record.epochs[1].test_loss is None  # no rank evaluated alone


@pytest.mark.slow
def test_a_rank_out_of_memory_mid_epoch_ends_every_rank_with_its_reason(faulty_rank):
    error, seconds = faulty_rank("oom")
    assert seconds < 60
    assert str(error) == (
        "rank 1: out of memory at batch size 32 on cpu: try a smaller --batch-size (CUDA out of "
        "memory. Tried to allocate 2.00 GiB); the other ranks were stopped"
    )
    (partial,) = error.partial.runs
    assert partial.status == "oom" and partial.error == str(error)
    assert [epoch.epoch for epoch in partial.epochs] == [1]  # the epoch both ranks finished, merged by rank 0


def _wait_for(condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("waited in vain")
        time.sleep(0.1)


def _wait_for_rank(rank: int, timeout_s: float = 60) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in psutil.Process().children(recursive=True):
            try:
                if process.environ().get("RANK") == str(rank) and "devicebench.launch" in " ".join(process.cmdline()):
                    return process
            except psutil.Error:  # gone, or not ours to read
                continue
        time.sleep(0.2)
    raise AssertionError(f"rank {rank} never started")


def _partial_file_of(rank: psutil.Process) -> Path:
    """Where rank 0 of `rank`'s run keeps the epochs merged so far: beside the result file its command line names
    (not any run's in the temporary folder: other runs may be going on beside this test's)."""
    return Path(rank.cmdline()[-1]).with_name("partial-result.json")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_machines_meet_at_a_rendezvous_on_loopback():
    """Two torchrun launches, one "machine" each, sharing a rendezvous on 127.0.0.1: one run of world size 2."""
    endpoint = f"127.0.0.1:{_free_port()}"
    config = RunConfig(
        workloads=("cifar10-mlp",), devices="cpu", data="synthetic", epochs=2, max_steps=4, max_eval_steps=1, nnodes=2
    )
    results: dict[int, object] = {}

    def machine_number(node_rank: int) -> None:
        launch = Launch(nproc=1, nnodes=2, node_rank=node_rank, rdzv_endpoint=endpoint)
        results[node_rank] = run_distributed(planning.plan(config), launch)

    machines = [threading.Thread(target=machine_number, args=(node_rank,)) for node_rank in (0, 1)]
    machines[0].start()
    time.sleep(1)  # machine 0 serves the rendezvous
    machines[1].start()
    for thread in machines:
        thread.join(timeout=120)
    held = [result for result in results.values() if result is not None]
    assert len(results) == 2 and len(held) == 1  # exactly one machine ran rank 0 and holds the result
    (record,) = held[0].runs
    assert record.status == "ok" and record.settings.world_size == 2
    assert [epoch.samples for epoch in record.epochs] == [128, 128]  # 4 global batches of 32 an epoch


def test_a_rendezvous_port_in_use_is_refused_with_the_flag_to_change_it():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = RunConfig(workloads=("cifar10-mlp",), devices="cpu", data="synthetic", nproc=2)
        with pytest.raises(
            DistributedError,
            match=f"port {port} of 127.0.0.1 is already in use; pick a free one with --rdzv-endpoint 127.0.0.1:PORT",
        ):
            run_distributed(planning.plan(config), Launch(nproc=2, rdzv_endpoint=f"127.0.0.1:{port}"))


def test_the_cli_refuses_what_it_cannot_start(tmp_path):
    database = ["--db", str(tmp_path / "db.sqlite")]
    mixed = CliRunner().invoke(app, ["run", "mnist-cnn2", "--nproc", "2", "--devices", "cpu,cuda", *database])
    assert mixed.exit_code == 2 and "--nproc needs one kind of device for every process" in mixed.output
    if not torch.cuda.is_available():
        no_gpus = CliRunner().invoke(app, ["run", "mnist-cnn2", "--devices", "all-gpus", *database])
        assert no_gpus.exit_code == 2 and "this machine has no GPU that torch can use" in no_gpus.output
        too_many = CliRunner().invoke(app, ["run", "mnist-cnn2", "--nproc", "2", "--devices", "cuda", *database])
        assert too_many.exit_code == 2 and "--nproc 2 needs 2 GPUs, but this machine has 0" in too_many.output


TORCHRUN_REPORT = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "distributed.py", line 300, in _main
[rank1]: ValueError: mnist has 10 classes but the model tells 2 apart
E1122 01:22:30 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: 1) local_rank: 1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_01:22:30
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 30305)
  error_file: <N/A>
=======================================================
"""


def test_torchrun_s_report_becomes_the_failed_rank_and_its_own_error():
    from devicebench.launch import _failure_text

    assert _failure_text(TORCHRUN_REPORT, 1) == (
        "rank 1 failed (exit code 1 (pid: 30305)): ValueError: mnist has 10 "
        "classes but the model tells 2 apart; the other ranks were stopped"
    )
    aborted = TORCHRUN_REPORT.replace(
        "[rank1]: ValueError: mnist has 10 classes but the model tells 2 apart",
        "  what():  [gloo/transport/tcp/pair.cc:534] Connection closed by peer",
    )
    assert "what():  [gloo/transport/tcp/pair.cc:534] Connection closed by peer" in _failure_text(aborted, 1)


KILLED_REPORT = """\
[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:5: Connection reset by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
Failures:
[1]:
  time      : 2026-11-24_17:00:01
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 30306)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 30306
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_17:00:01
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 3 (pid: 30305)
  error_file: <N/A>
=======================================================
"""


def test_a_rank_killed_by_a_signal_is_named_and_another_rank_s_reason_is_only_its_echo(tmp_path):
    """Rank 1 killed: rank 0 then fails on the broken connection and leaves its reason, and torchrun, which notes
    exits to the second, may even observe rank 0 first. Seen under load, it blamed rank 0."""
    from devicebench.launch import _why_the_ranks_ended

    output_file = tmp_path / "result.json"
    (tmp_path / "reason-result.json").write_text(
        json.dumps(
            {"rank": 0, "status": "failed", "error": "RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error"}
        )
    )
    assert _why_the_ranks_ended(output_file, KILLED_REPORT, 1) == (
        "failed",
        "rank 1 failed (exit code -9 (pid: 30306)); the other ranks were stopped",
    )
    alone = KILLED_REPORT.replace("-9 (pid: 30306)", "3 (pid: 30306)")  # no signal: rank 0 failed on its own
    assert _why_the_ranks_ended(output_file, alone, 1) == (
        "failed",
        "rank 0: RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error; the other ranks were stopped",
    )


def test_a_run_that_torchrun_stopped_for_another_rank_s_failure_is_that_failure_not_an_interruption(tmp_path):
    """Rank 1 killed: torchrun stops rank 0, which may mark its run interrupted before it exits (between steps) or
    not (inside a collective). Either way the run failed, for rank 1's reason; a finished run keeps its own end.
    Seen in CI: the killed-rank test read "interrupted"."""
    from devicebench.launch import _partial_result

    output_file = tmp_path / "result.json"
    finished, stopped = run("cpu", [2.0, 1.0]), run("cpu", [2.0], status="interrupted", workload="cifar10-mlp")
    session(machine("box", "m1"), [finished, stopped]).write_json(distributed.partial_path(output_file))
    reason = "rank 1 failed (exit code -9 (pid: 1) (SIGKILL)); the other ranks were stopped"
    failed = _partial_result(output_file, reason, "failed")
    assert failed is not None
    assert [(record.status, record.error) for record in failed.runs] == [("ok", None), ("failed", reason)]
    interrupted = _partial_result(output_file, "interrupted by the user", "interrupted")  # the user's Ctrl-C
    assert interrupted is not None
    assert [record.status for record in interrupted.runs] == ["ok", "interrupted"]


def test_the_report_draws_throughput_against_the_number_of_processes():
    from devicebench.report.workload_plots import scaling_series, workload_charts

    one, two = run("cpu", [2.0, 1.0, 1.0], threads=2), run("cpu", [2.0, 0.8, 0.8], threads=1)
    two.settings.world_size = 2
    other_batch = run("cpu", [2.0, 0.5, 0.5], batch_size=64)  # different work: not on the same line
    rows = compare([session(machine("box", "m1"), [one, two, other_batch])])["mnist-cnn2"]
    assert scaling_series(rows) == {"box/cpu": [(1, 1000.0), (2, 1250.0)]}
    charts = workload_charts("mnist-cnn2", rows, None)
    assert [chart.slug for chart in charts][-1] == "mnist-cnn2-scaling"
    assert charts[-1].png.startswith(b"\x89PNG")
    single = compare([session(machine("box", "m1"), [run("cpu", [2.0, 1.0, 1.0])])])["mnist-cnn2"]
    assert scaling_series(single) == {}  # one process count: nothing to draw


def test_what_one_process_alone_can_do_is_refused_with_nproc(tmp_path):
    completed = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--nproc",
            "2",
            "--save",
            str(tmp_path / "model.pt"),
            "--db",
            str(tmp_path / "db.sqlite"),
        ],
    )
    assert completed.exit_code == 2
    assert "--save and --tensorboard do not work with --nproc yet" in completed.output
