"""Does devicebench's own end-to-end time agree with the wall clock, read from outside its process?

`devicebench run` reports `end_to_end_s`: model creation to the end of the last epoch, on its own Stopwatch. This
script runs that command as a user would, a fresh process each time, and times every process from outside: with
GNU `/usr/bin/time` (elapsed real time, to 10 ms), or, where that is missing, `time.perf_counter` around
`subprocess.run` (the JSON names which). A process's wall time is its end-to-end time plus fixed costs that
`end_to_end_s` rightly leaves out: starting Python, imports, making the data, the table, the JSON, the database.
Those are the same whatever the number of epochs, so runs of N and of MULTIPLIER x N epochs cancel them:

    mean wall(kN) - mean wall(N)   must equal   mean end_to_end_s(kN) - mean end_to_end_s(N), within 2%

Means, not medians: the difference of two means is the mean of the per-run differences, so a fixed cost cancels
exactly and whatever remains is what the two clocks disagree on (or the fixed costs' noise, which the table shows
per run). The two lengths alternate, so a change in the machine's load falls on both. Choose N and the steps so that
the difference is 20-40 s: 2% of it is then well above /usr/bin/time's 10 ms.

    python benchmarks/wall_clock_check.py --epochs 3 --steps 100 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from engine_vs_plain import RESULTS, slug

from devicebench.devices import device_name
from devicebench.environment import machine_fingerprint

# RESULTS and slug come from the other benchmark, so that both name results by hardware the same way.
GNU_TIME = "/usr/bin/time"
TOLERANCE = 0.02  # the largest relative disagreement between the two differences that still passes


def timed_run(workload: str, device: str, epochs: int, steps: int, eval_steps: int, folder: Path) -> dict:
    """One `devicebench run` in a fresh process: its wall time from outside, and its own end-to-end time."""
    output, elapsed_file = folder / f"run-{epochs}.json", folder / "elapsed.txt"
    command = [
        sys.executable,
        "-m",
        "devicebench",
        "run",
        workload,
        "--devices",
        device,
        "--data",
        "synthetic",
        "--max-steps",
        str(steps),
        "--max-eval-steps",
        str(eval_steps),
        "--epochs",
        str(epochs),
        "--quiet",
        "--json",
        str(output),
        "--db",
        str(folder / "results.sqlite"),
    ]
    use_gnu_time = Path(GNU_TIME).exists()
    if use_gnu_time:
        command = [GNU_TIME, "--format", "%e", "--output", str(elapsed_file), *command]
    started = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    perf_counter_s = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"devicebench exited {completed.returncode}: {completed.stderr[-2000:]}")
    run = json.loads(output.read_text())["runs"][0]
    if run["status"] != "ok":
        raise RuntimeError(f"the {epochs}-epoch run ended {run['status']}: {run['error']}")
    wall_s = float(elapsed_file.read_text().split()[-1]) if use_gnu_time else perf_counter_s
    return {
        "epochs": epochs,
        "wall_s": wall_s,
        "perf_counter_s": perf_counter_s,
        "end_to_end_s": run["end_to_end_s"],
        "outside_end_to_end_s": wall_s - run["end_to_end_s"],
        "model_build_s": run["model_build_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", default="mnist-cnn2")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    parser.add_argument("--epochs", type=int, default=3, help="N: epochs of the short runs")
    parser.add_argument("--multiplier", type=int, default=2, help="the long runs train MULTIPLIER x N epochs")
    parser.add_argument("--steps", type=int, default=100, help="training steps per epoch (--max-steps)")
    parser.add_argument("--eval-steps", type=int, default=5, help="evaluation batches per epoch (--max-eval-steps)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each length")
    parser.add_argument("--output", type=Path, help="JSON file (default: results/wall-clock-check-<hardware>.json)")
    arguments = parser.parse_args()
    if arguments.multiplier < 2:
        parser.error("--multiplier must be at least 2: the check needs two different lengths")
    lengths = (arguments.epochs, arguments.epochs * arguments.multiplier)
    timer = GNU_TIME if Path(GNU_TIME).exists() else "time.perf_counter around subprocess.run"
    hardware = device_name(torch.device(arguments.device))
    print(
        f"{hardware}: {arguments.workload}, {arguments.steps} steps an epoch, {lengths[0]} and {lengths[1]} epochs, "
        f"{arguments.rounds} rounds; wall time from {timer}; load average {os.getloadavg()[0]:.1f}"
    )
    load_before = os.getloadavg()
    runs: list[dict] = []
    folder = Path(tempfile.mkdtemp(prefix="wall-clock-check-"))
    try:
        for round_index in range(arguments.rounds):
            order = lengths if round_index % 2 == 0 else lengths[::-1]  # each length first in turn
            for epochs in order:
                runs.append(
                    {
                        "round": round_index + 1,
                        **timed_run(
                            arguments.workload, arguments.device, epochs, arguments.steps, arguments.eval_steps, folder
                        ),
                    }
                )
                print_run(runs[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary = compare_differences(runs, lengths)
    print_summary(summary, lengths)
    output = arguments.output or RESULTS / f"wall-clock-check-{slug(hardware)}-{arguments.device.replace(':', '')}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "wall_clock_check",
                "command": " ".join(["python", "benchmarks/wall_clock_check.py", *sys.argv[1:]]),
                "timer": timer,
                "workload": arguments.workload,
                "device": arguments.device,
                "device_name": hardware,
                "steps": arguments.steps,
                "eval_steps": arguments.eval_steps,
                "epochs": list(lengths),
                "rounds": arguments.rounds,
                "load_average_before": load_before,  # 1, 5, 15 minutes: other programs on the machine move every number
                "load_average_after": os.getloadavg(),
                "machine": machine_fingerprint(),
                "runs": runs,
                **summary,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {output}")
    sys.exit(0 if summary["passed"] else 1)


def compare_differences(runs: list[dict], lengths: tuple[int, int]) -> dict:
    """The two clocks' differences between the long and the short runs, and whether they agree within 2%."""

    def mean_of(field: str, epochs: int) -> float:
        return statistics.fmean(run[field] for run in runs if run["epochs"] == epochs)

    short, long = lengths
    wall_difference_s = mean_of("wall_s", long) - mean_of("wall_s", short)
    end_to_end_difference_s = mean_of("end_to_end_s", long) - mean_of("end_to_end_s", short)
    mismatch = (wall_difference_s - end_to_end_difference_s) / end_to_end_difference_s
    return {
        "wall_difference_s": wall_difference_s,
        "end_to_end_difference_s": end_to_end_difference_s,
        "mismatch": mismatch,
        "tolerance": TOLERANCE,
        "passed": abs(mismatch) <= TOLERANCE,
    }


def print_run(run: dict) -> None:
    print(
        f"  round {run['round']}  {run['epochs']:>3} epochs  wall {run['wall_s']:8.2f} s  "
        f"end-to-end {run['end_to_end_s']:8.2f} s  outside end-to-end {run['outside_end_to_end_s']:6.2f} s"
    )


def print_summary(summary: dict, lengths: tuple[int, int]) -> None:
    verdict = "PASS" if summary["passed"] else "FAIL"
    print(f"\n{lengths[1]} epochs minus {lengths[0]} epochs, means over rounds:")
    print(f"  wall clock, from outside  {summary['wall_difference_s']:8.2f} s")
    print(f"  devicebench end_to_end_s  {summary['end_to_end_difference_s']:8.2f} s")
    print(f"  disagreement              {summary['mismatch']:+8.2%}  (tolerance ±{TOLERANCE:.0%}): {verdict}")


if __name__ == "__main__":
    main()
