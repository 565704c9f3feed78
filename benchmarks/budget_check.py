"""Does a budgeted command end within its budget, on a machine loaded as it is plus `--busy` processes of our own?

Runs a devicebench command as a user would (a fresh process, a throwaway database and cache folder), times it from
outside with GNU `/usr/bin/time` where there is one (else time.perf_counter around subprocess.run), and compares
that wall time with the budget: it passes within +10%, the tolerance the budget promises on a loaded machine. Each
busy process is a Python loop that spins for the whole run: the load of one other busy program.

    python benchmarks/budget_check.py --busy 1 -- run mnist-cnn2 --budget 30s
    python benchmarks/budget_check.py --busy 1 --budget 2m -- reproduce S2 --quick
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from engine_vs_plain import RESULTS, slug
from wall_clock_check import GNU_TIME

from devicebench.cli.session import duration_seconds
from devicebench.devices import device_name
from devicebench.environment import machine_fingerprint

TOLERANCE = 0.10  # how far past its budget a command may end on a loaded machine
SPIN = "while True: pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, default=1, help="busy processes of our own beside the command")
    parser.add_argument("--budget", help="the command's budget when it sets none itself (reproduce --quick: 2m)")
    parser.add_argument("--output", type=Path, help="JSON file (default: results/budget-check-<hardware>.json)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: devicebench's arguments")
    arguments = parser.parse_args()
    command = [part for part in arguments.command if part != "--"]
    budget_text = arguments.budget or _flag(command, "--budget")
    if not command or budget_text is None:
        parser.error("give the devicebench command after --, with --budget in it or given here")
    budget_s = duration_seconds("--budget", budget_text)
    with tempfile.TemporaryDirectory(prefix="budget-check-") as folder:
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(arguments.busy)]
        try:
            load_before = os.getloadavg()
            wall_s, budget_line = timed(command, Path(folder))
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    ratio = wall_s / budget_s
    passed = ratio <= 1 + TOLERANCE
    print(
        f"{' '.join(command)}: {wall_s:.1f} s wall against a {budget_s:.0f} s budget ({ratio:.2f}x), "
        f"{arguments.busy} busy processes, load average {load_before[0]:.1f}: {'PASS' if passed else 'FAIL'}"
    )
    print(f"  {budget_line}")
    output = arguments.output or RESULTS / f"budget-check-{slug(device_name(torch.device('cpu')))}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "budget_check",
                "command": ["devicebench", *command],
                "busy_processes": arguments.busy,
                "budget_s": budget_s,
                "wall_s": wall_s,
                "ratio": ratio,
                "tolerance": TOLERANCE,
                "passed": passed,
                "budget_line": budget_line,
                "load_average_before": load_before,
                "load_average_after": os.getloadavg(),
                "machine": machine_fingerprint(),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {output}")
    sys.exit(0 if passed else 1)


def timed(command: list[str], folder: Path) -> tuple[float, str]:
    """The command's wall time from outside, and its budget line ('Trained in …')."""
    environment = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache")}  # the user's datasets stay untouched
    full = [sys.executable, "-m", "devicebench", *command, "--db", str(folder / "runs.sqlite")]
    elapsed_file = folder / "elapsed.txt"
    if Path(GNU_TIME).exists():
        full = [GNU_TIME, "--format", "%e", "--output", str(elapsed_file), *full]
    started = time.perf_counter()
    completed = subprocess.run(full, capture_output=True, text=True, env=environment)
    wall_s = time.perf_counter() - started
    if elapsed_file.exists():
        wall_s = float(elapsed_file.read_text().split()[-1])
    said = " ".join(completed.stderr.split())
    found = re.search(r"Trained in .*? budget(?:\.|: .*? fits it\.)", said)
    if completed.returncode not in (0, 1):  # 1: a run failed, which the budget still bounds
        raise SystemExit(f"devicebench exited {completed.returncode}: {completed.stderr[-2000:]}")
    return wall_s, found.group(0) if found else "(no budget line)"


def _flag(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command[:-1] else None


if __name__ == "__main__":
    main()
