"""How long each `devicebench` command takes to start, in fresh processes, and whether it imported torch.

A command that does not train should answer at once: torch takes seconds to import, so only the commands that
need it (run, list, ...) may import it. Each command below runs ROUNDS times as `python -m devicebench ARGS`, as a
user's shell would run it, timed from outside its process; the table shows the median and the spread, and one more
run, watched from inside, says whether torch was imported. Everything it writes (a small results database, the
export) lives in a temporary folder; the user's own folders are never touched.

    python benchmarks/start_time.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devicebench.results.schema import EpochRecord, Result, RunRecord, RunSettings
from devicebench.results.store import DB_ENVIRONMENT_VARIABLE, Store

TARGET_VERSION_S = 1.0  # `devicebench --version` should take less than this here
COMMANDS = (  # the arguments after `devicebench`; the last two may import torch (their workload registry holds models)
    ["--version"],
    ["--help"],
    ["history"],
    ["history", "--help"],
    ["export", "{folder}/export.json"],
    ["compare"],
    ["compare", "--help"],
    ["run", "--help"],
    ["list"],
)
# Runs the CLI as the console script does, then says on stderr's last line whether torch was imported.
WATCHED = """
import sys
from devicebench.__main__ import main
sys.argv = ["devicebench", *sys.argv[1:]]
try:
    main()
finally:
    sys.stderr.write(f"\\ntorch imported: {'torch' in sys.modules}\\n")
"""


def small_database(path: Path) -> None:
    """Two sessions of two runs each (cpu and cuda:0), enough for history and compare to draw real tables."""
    results = []
    for name, cpu_epoch_s, gpu_epoch_s in (("laptop", 2.0, 0.5), ("server", 1.0, 0.1)):
        runs = []
        for device, epoch_s in (("cpu", cpu_epoch_s), ("cuda:0", gpu_epoch_s)):
            epochs = [
                EpochRecord(
                    epoch=index + 1,
                    phase="warmup" if index == 0 else "steady",
                    steps=10,
                    samples=1000,
                    train_time_s=epoch_s,
                    samples_per_s=1000 / epoch_s,
                    step_time_ms=epoch_s * 100,
                    train_loss=1.0,
                    train_accuracy=0.5,
                    eval_time_s=0.1,
                    eval_samples=100,
                    test_loss=1.0,
                    test_accuracy=0.9,
                )
                for index in range(3)
            ]
            settings = RunSettings(
                batch_size=50, epochs=3, max_steps=10, max_eval_steps=1, seed=0, threads=2, data_source="synthetic"
            )
            runs.append(
                RunRecord(
                    "mnist-cnn2",
                    "S1",
                    device,
                    f"{device} model",
                    0,
                    settings,
                    "2026-01-01T00:00:00Z",
                    epochs=epochs,
                    end_to_end_s=3 * epoch_s + 1.0,
                )
            )
        machine = {
            "machine_id": f"{name}-id",
            "machine_name": name,
            "hostname": f"{name}-host",
            "cpu": {"model": "Test CPU"},
            "accelerators": [],
            "torch": "2.13.0",
            "devicebench": "0.1.0",
        }
        results.append(
            Result(
                machine=machine, config={}, created_utc="2026-01-01T00:00:00Z", devicebench_version="0.1.0", runs=runs
            )
        )
    with Store(path) as store:
        store.import_results(results)


def isolated_environment(folder: Path) -> dict[str, str]:
    """The environment of every command: its database, data, calibration and user folders all inside `folder`."""
    home = folder / "home"
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        DB_ENVIRONMENT_VARIABLE: str(folder / "results.sqlite"),
        "DEVICEBENCH_DATA": str(folder / "data"),
        "DEVICEBENCH_CALIBRATION_DIR": str(folder / "calibration"),
        "COLUMNS": "200",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per command; the median is shown")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devicebench-start-") as temporary:
        folder = Path(temporary)
        (folder / "home").mkdir()
        small_database(folder / "results.sqlite")
        environment = isolated_environment(folder)
        medians = {}
        print(f"{'command':<40} {'median s':>9} {'min s':>7} {'max s':>7}  torch imported")
        for command in COMMANDS:
            argv = [part.format(folder=folder) for part in command]
            seconds = []
            for _ in range(arguments.rounds):
                started = time.perf_counter()
                completed = subprocess.run(
                    [sys.executable, "-m", "devicebench", *argv], env=environment, capture_output=True, text=True
                )
                seconds.append(time.perf_counter() - started)
                if completed.returncode != 0:
                    sys.exit(f"devicebench {' '.join(argv)} failed ({completed.returncode}):\n{completed.stderr}")
            watched = subprocess.run(
                [sys.executable, "-c", WATCHED, *argv], env=environment, capture_output=True, text=True
            )
            torch_imported = watched.stderr.strip().splitlines()[-1].removeprefix("torch imported: ")
            shown = " ".join(command).replace("{folder}/", "")
            medians[shown] = statistics.median(seconds)
            print(
                f"devicebench {shown:<28} {medians[shown]:>9.2f} {min(seconds):>7.2f} "
                f"{max(seconds):>7.2f}  {torch_imported}"
            )
    verdict = "met" if medians["--version"] < TARGET_VERSION_S else "missed"
    print(f"target: devicebench --version under {TARGET_VERSION_S:.1f} s: {verdict}")


if __name__ == "__main__":
    main()
