"""How long `devicebench import` takes, and how much memory it holds, for a large export file.

Writes an export of about --megabytes MB (sessions of 10 runs of 20 epochs, every field filled in, as real runs
store them) into a temporary folder, then imports it into a new database there with `python -m devicebench import`,
timed from outside its process by /usr/bin/time -v: wall seconds and peak resident memory. Nothing outside the
temporary folder is touched.

    python benchmarks/large_import.py --megabytes 200
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from devicebench.results.schema import EpochRecord, Result, RunRecord, RunSettings
from devicebench.results.transfer import export_document

RUNS_PER_SESSION = 10
EPOCHS_PER_RUN = 20


def session(number: int) -> dict:
    """One session of RUNS_PER_SESSION runs with every field filled in, as a dict of the export."""
    runs = []
    for repeat in range(RUNS_PER_SESSION):
        epochs = [
            EpochRecord(
                epoch=epoch,
                phase="warmup" if epoch == 1 else "steady",
                steps=1200,
                samples=60_000,
                train_time_s=4.25 + epoch / 100,
                samples_per_s=14_117.6,
                step_time_ms=3.54,
                train_loss=0.31 / epoch,
                train_accuracy=0.9 + epoch / 1000,
                input_wait_s=0.12,
                eval_time_s=0.4,
                eval_samples=10_000,
                test_loss=0.29 / epoch,
                test_accuracy=0.91,
                process_cpu_percent=180.5,
                device_utilization_percent=87.5,
                device_power_mean_w=250.1,
                device_energy_j=1062.9,
            )
            for epoch in range(1, EPOCHS_PER_RUN + 1)
        ]
        settings = RunSettings(
            batch_size=50,
            epochs=EPOCHS_PER_RUN,
            max_steps=None,
            max_eval_steps=None,
            seed=0,
            threads=16,
            data_source="real",
            hyperparameters={"learning_rate": 0.001},
        )
        runs.append(
            RunRecord(
                "mnist-cnn2",
                "S1",
                "cuda:0",
                "NVIDIA H100",
                repeat,
                settings,
                "2026-03-01T10:00:00Z",
                run_id=uuid.uuid4().hex,
                status="ok",
                epochs=epochs,
                parameter_count=3_274_634,
                end_to_end_s=90.5,
                peak_rss_mib=2048.0,
            )
        )
    machine = {
        "machine_id": f"machine-{number}",
        "machine_name": f"box-{number}",
        "hostname": f"box-{number}",
        "cpu": {"model": "Test CPU"},
        "accelerators": [],
        "memory_total_mib": 65536,
    }
    return Result(
        machine=machine, config={}, created_utc="2026-03-01T09:59:00Z", devicebench_version="0.1.0", runs=runs
    ).to_dict()


def write_export(path: Path, megabytes: float) -> int:
    """An export of about `megabytes` MB at `path`, written one session at a time; the number of sessions."""
    one = json.dumps(session(0), indent=2)
    count = max(1, round(megabytes * 1e6 / len(one)))
    head, tail = json.dumps(export_document([]), indent=2).split("[]")
    with path.open("w") as file:
        file.write(head + "[\n")
        for number in range(count):
            file.write((",\n" if number else "") + json.dumps(session(number), indent=2))
        file.write("\n]" + tail)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=200.0, help="size of the export file, in MB")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "export.json"
        sessions = write_export(export, arguments.megabytes)
        command = [
            "/usr/bin/time",
            "-v",
            sys.executable,
            "-m",
            "devicebench",
            "import",
            str(export),
            "--db",
            str(Path(folder) / "results.sqlite"),
        ]
        completed = subprocess.run(command, capture_output=True, text=True)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", completed.stderr).group(1)
        peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", completed.stderr).group(1))
        print(completed.stdout.strip() or completed.stderr.strip().splitlines()[0])
        print(
            f"{export.stat().st_size / 1e6:.0f} MB export ({sessions} sessions, {sessions * RUNS_PER_SESSION} runs): "
            f"import took {wall} (m:ss) wall, peak RSS {peak_kib / 1024:.0f} MiB, exit {completed.returncode}"
        )


if __name__ == "__main__":
    main()
