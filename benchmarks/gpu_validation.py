"""Validate a GPU machine in one command: every GPU path of devicebench, run for real, within 590 seconds.

GPU machines come to this project rarely and briefly (one H100, 16 cores, torch 2.11, no network, at most 10
minutes a command). This script turns one such command into everything we need to know: the GPU tests, the
machine's own check, its calibrated ceilings, every workload in seed and in tuned mode, torch.compile, XGBoost on
CUDA, data-parallel training over every GPU, and the two benchmarks, each a subprocess with its own time budget.
It writes, into `--out`, `gpu-validation-<hardware>.json` (the machine's fingerprint; each part's command, status,
seconds, exit code, the tail of its output and the JSON devicebench wrote) and `gpu-validation-<hardware>.md` (a
table: part | status | seconds | key figures), prints that table and what failed, and exits 1 when a part failed or
timed out (a skipped part is listed, and is no failure).

    python benchmarks/gpu_validation.py --out results/gpu-validation-h100        # on the GPU machine
    python benchmarks/gpu_validation.py --only nproc,compile --out /tmp/again    # a second command: some parts
    python benchmarks/gpu_validation.py --cpu-smoke --out /tmp/smoke             # anywhere, in under a minute
    python benchmarks/gpu_validation.py --plan                                   # the plan, without running it

The plan, in the order it runs (the most needed first), with each part's budget in seconds (572 in all, of a
590 s limit: 10 s are left for starting this script and writing its files, and the command its ten minutes). The
budgets come from the first GPU run's measured times (an H200, 2026-11-27, `results/gpu-validation-h200/`): about
5 s for each workload's run besides its epochs (15 s for an imdb model), 3 s for each process, and the steps below:

| part | what | budget |
|---|---|---|
| devices | `devicebench devices --json`: the machine's fingerprint, and how many GPUs it has | 8 |
| list | `devicebench list --json`: the workloads, and which of them cannot run here (and why) | 12 |
| calibrate | `devicebench calibrate --json`: every device's ceilings (the H200's took 55 s), for every run's MFU | 55 |
| check | `devicebench check --json`: the machine's own doctor (drivers, a short run, timing, short ceilings) | 25 |
| seed-small | seed mode on cuda: mnist-cnn2, mnist-cnn4, cifar10-mlp, cifar100-mlp, cifar10-cnn (400 steps) | 50 |
| engine-vs-plain | benchmarks/engine_vs_plain.py on cuda: mnist-cnn2, plain, seed and tuned, 1 round of 2 x 300 | 30 |
| pytest-gpu | `python -m pytest -m gpu`: tests/test_gpu.py, the GPU tests of test_compile.py and test_calibrate.py | 118 |
| seed-catdog | seed mode on cuda: the four catdog networks (100 steps) | 38 |
| seed-imdb | seed mode on cuda: imdb-bilstm, imdb-transformer (150 steps) | 30 |
| tuned-small | tuned mode on cuda (`--compile off`): mnist-cnn2, cifar10-mlp, cifar10-cnn (400 steps) | 45 |
| tuned-catdog | tuned mode on cuda (`--compile off`): catdog-deep, the largest network (100 steps) | 28 |
| tuned-imdb | tuned mode on cuda (`--compile off`): imdb-bilstm, bf16 around cuDNN's LSTMs (150 steps) | 28 |
| compile | imdb-transformer, tuned, `--compile on --precision bf16`: recompiles and graph breaks recorded | 40 |
| seed-cpu | seed mode on the CPU: mnist-cnn2 and cifar10-mlp (100 steps), the other side of the speedup | 20 |
| gbdt | gbdt-synthetic on cuda, 200 boosting rounds an epoch: XGBoost's `device="cuda"` | 10 |
| wall-clock | benchmarks/wall_clock_check.py on cuda: 2 and 6 epochs of 600 steps of mnist-cnn2, 1 round | 25 |
| nproc | cifar10-mlp, `--devices all-gpus`: DDP over every GPU (skipped with fewer than 2) | 10 |

Every training part runs 3 epochs (one warm-up, two steady) on `--data synthetic`, with at most 3 evaluation
batches an epoch (evaluation is timed apart from training; it only has to run). What a part costs is mostly not its
epochs: each workload's run took about 5 s besides them on the H200 (the synthetic set, the model, the evaluation,
the definition), and each process about 3 s to start. The first run's budgets (1,500 steps of the small seeds, whole
catdog epochs) assumed a 1 ms step and fitted nothing: seed-small took 68 s of its 27, and six parts were stopped.
The steps now keep the whole plan within the limit, and a steady epoch lasts under a second for most workloads
(the summary marks each): enough to see that every path runs and what it measures, not a benchmark.

| workload | batch | seed step on the H200, measured | steps | steady epoch |
|---|---|---|---|---|
| mnist-cnn2, mnist-cnn4 | 50 | 2.1 ms, 2.5 ms | 400 | ~0.9 s |
| cifar10-mlp, cifar100-mlp | 32 | 1.7 ms | 400 | ~0.7 s |
| cifar10-cnn | 128 | 9.0 ms | 390 (all) | ~3.5 s |
| catdog-original, -improved | 32 | 4.1 ms | 100 | ~0.4 s |
| catdog-hires | 32 | 7.5 ms: input-bound, 128x128 augmentation | 100 | ~0.75 s |
| catdog-deep | 32 | 18 ms: ~7 GFLOP a training image in strict fp32 | 100 | ~1.8 s |
| imdb-bilstm, imdb-transformer | 32 | 4.4 ms, 4.3 ms | 150 | ~0.65 s |

A 2 ms step for a network as small as mnist-cnn2 on an H200 is slow: it is about what the host takes to launch
its kernels (the steps of the tuned trial varied ±15% from round to round). engine-vs-plain now runs early, so that
the next GPU run says whether devicebench's loop adds to it. Runs with the same steps share a part (one process: its
start is paid once). Tuned mode trains a subset on the GPU (the first run's tuned parts were stopped): the same
code as the seeds it leaves out, and channels_last and the fused step were measured there on their own
(benchmarks/tuning_switches.py, `results/gpu-validation-h200/`). Tuned mode runs with `--compile off` because its
default on a GPU, auto, compiles every candidate precision with inductor (20-40 s each); the compile part compiles
one workload in the one precision that an H100 would keep. The CPU is slow: it trains two cheap workloads only, at 100 steps (the H200 machine's 16 cores
trained mnist-cnn2 at 3,700 samples/s). gbdt-covertype is left out: the same booster on another table;
gbdt-synthetic validates XGBoost on CUDA.

Calibration comes first, into `calibration/` of the output folder, and every later part gets
`DEVICEBENCH_CALIBRATION_DIR` pointing there: runs take their MFU against the ceilings just measured, and nothing is
read from, or written to, the calibration of whoever runs this. Every devicebench run writes its runs to a
throwaway database in `work/` (`--db`), and its JSON to `parts/PART.json`; each part's output goes to `logs/`.

Time: the script keeps a deadline (`--time-limit`, 590 s). A part runs only when its budget fits in the time left
(else it is "skipped: not enough time left"), and may run until only the budgets of the parts after it are left:
its own budget, plus whatever the parts before it left unused. One that runs past that is stopped (SIGTERM to its
process group, so that devicebench writes the epochs it finished; SIGKILL 5 s later) and recorded "timed out".

`--cpu-smoke` runs the same machinery end to end on any machine in well under a minute, so that it cannot rot
between GPU runs: tiny settings (2 epochs x 3 steps) on `--devices cpu`, `calibrate --quick`, `check --devices
cpu`, and `pytest -m gpu`, which skips everything there; each part that makes no sense on a CPU is recorded as
skipped, with the reason (`SMOKE` below). tests/test_gpu_validation.py runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_vs_plain import RESULTS, slug

# RESULTS and slug come from the other benchmark, so that every benchmark names its results by hardware alike.
REPOSITORY = Path(__file__).resolve().parents[1]
BENCHMARKS = REPOSITORY / "benchmarks"
TIME_LIMIT_S = 590  # nine minutes and 50 s: a GPU command may run ten, and this one runs alone
GRACE_S = 5.0  # between SIGTERM and SIGKILL: devicebench writes the epochs it finished
TAIL_CHARS = 3000  # of each part's output, kept in the JSON
EPOCHS = 3  # one warm-up epoch and two steady ones
EVAL_STEPS = 3  # evaluation batches an epoch: timed apart from training, it only has to run
STEADY_EPOCH_S = 1.0  # the summary marks a steady epoch shorter than this: its step count wants raising
STATUSES = ("pass", "fail", "skipped", "timed out")
WORKLOADS = "{workloads}"  # in a command: the part's workloads that this machine can run

SMALL = ("mnist-cnn2", "mnist-cnn4", "cifar10-mlp", "cifar100-mlp", "cifar10-cnn")
CATDOG = ("catdog-original", "catdog-improved", "catdog-hires", "catdog-deep")
IMDB = ("imdb-bilstm", "imdb-transformer")
TUNED_SMALL = ("mnist-cnn2", "cifar10-mlp", "cifar10-cnn")  # mnist-cnn4 and cifar100-mlp: the same code, bigger
LEFT_OUT = {
    "gbdt-covertype": "the same booster as gbdt-synthetic on another table; one XGBoost workload suffices",
    **{
        name: "a reference model, run only when named: the parts' budgets already fill the time limit "
        "less 10 s, so it gets a part only in place of another (issue 30's GPU runs are their own)"
        for name in ("resnet50", "resnet152", "vgg16", "bert-base", "bert-large", "gpt2-small", "gnmt")
    },
}


@dataclass(frozen=True)
class Part:
    """One subprocess of the validation, and what it takes to run it."""

    name: str
    kind: str  # how its result is read and summed up: devices, list, calibrate, check, pytest, run, compile, ...
    command: tuple[str, ...]  # {python}, {json} (its result file), {db} and WORKLOADS are filled in when it runs
    budget_s: float
    workloads: tuple[str, ...] = ()  # what WORKLOADS stands for; those this machine cannot run are left out
    gpus: int = 0  # CUDA GPUs it needs; with fewer it is skipped, saying so

    @property
    def result_on_stdout(self) -> bool:
        return self.kind in ("devices", "list", "calibrate", "check")


def devicebench(*arguments: str) -> tuple[str, ...]:
    return ("{python}", "-m", "devicebench", *arguments)


def training(
    name: str,
    workloads: Sequence[str],
    budget_s: float,
    *,
    mode: str = "seed",
    devices: str = "cuda",
    steps: int | None = None,
    epochs: int = EPOCHS,
    flags: Sequence[str] = (),
    kind: str = "run",
    gpus: int = 1,
) -> Part:
    """A part that trains `workloads` with `devicebench run` on synthetic data, its JSON and database its own."""
    command = devicebench(
        "run",
        WORKLOADS,
        "--mode",
        mode,
        "--devices",
        devices,
        "--data",
        "synthetic",
        "--epochs",
        str(epochs),
        *(("--max-steps", str(steps)) if steps else ()),
        "--max-eval-steps",
        str(EVAL_STEPS),
        *flags,
        "--quiet",
        "--json",
        "{json}",
        "--db",
        "{db}",
    )
    return Part(name, kind, command, budget_s, tuple(workloads), gpus)


def benchmark(name: str, script: str, budget_s: float, *arguments: str) -> Part:
    return Part(name, name, ("{python}", str(BENCHMARKS / script), *arguments, "--output", "{json}"), budget_s, gpus=1)


PYTEST_GPU = ("{python}", "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider")
TUNED = ("--compile", "off")  # tuned mode on a GPU would otherwise compile every candidate precision

PARTS = (
    Part("devices", "devices", devicebench("devices", "--json"), 8),
    Part("list", "list", devicebench("list", "--json"), 12),
    Part("calibrate", "calibrate", devicebench("calibrate", "--json"), 55),
    Part("check", "check", devicebench("check", "--json"), 25),
    training("seed-small", SMALL, 50, steps=400),
    benchmark(
        "engine-vs-plain",
        "engine_vs_plain.py",
        30,
        "mnist-cnn2",
        "--device",
        "cuda",
        "--rounds",
        "1",
        "--steps",
        "300",
        "--epochs",
        "2",
        "--sides",
        "plain,seed,tuned",
    ),
    Part("pytest-gpu", "pytest", (*PYTEST_GPU, "--durations=10"), 118),
    training("seed-catdog", CATDOG, 38, steps=100),
    training("seed-imdb", IMDB, 30, steps=150),
    training("tuned-small", TUNED_SMALL, 45, mode="tuned", steps=400, flags=TUNED),
    training("tuned-catdog", ("catdog-deep",), 28, mode="tuned", steps=100, flags=TUNED),
    training("tuned-imdb", ("imdb-bilstm",), 28, mode="tuned", steps=150, flags=TUNED),
    training(
        "compile",
        ("imdb-transformer",),
        40,
        mode="tuned",
        steps=150,
        kind="compile",
        flags=("--compile", "on", "--precision", "bf16"),
    ),
    training("seed-cpu", ("mnist-cnn2", "cifar10-mlp"), 20, devices="cpu", steps=100, gpus=0),
    training("gbdt", ("gbdt-synthetic",), 10, flags=("--set", "rounds_per_epoch=200")),
    benchmark(
        "wall-clock",
        "wall_clock_check.py",
        25,
        "--workload",
        "mnist-cnn2",
        "--device",
        "cuda",
        "--epochs",
        "2",
        "--multiplier",
        "3",
        "--steps",
        "600",
        "--eval-steps",
        "1",
        "--rounds",
        "1",
    ),
    training("nproc", ("cifar10-mlp",), 10, devices="all-gpus", steps=400, gpus=2),
)

SMOKE_STEPS, SMOKE_EPOCHS = 3, 2
LEFT_TO_THE_GPU = "left out of the smoke run to keep it under a minute: seed-small and tuned-small run the same command"
# --cpu-smoke: each part's tiny CPU version, or why it makes no sense on a CPU. Budgets are generous: CI is slow.
SMOKE: dict[str, Part | str] = {
    "devices": dataclasses.replace(PARTS[0], budget_s=30),
    "list": dataclasses.replace(PARTS[1], budget_s=30),
    "calibrate": Part("calibrate", "calibrate", devicebench("calibrate", "--devices", "cpu", "--quick", "--json"), 40),
    "check": Part("check", "check", devicebench("check", "--devices", "cpu", "--json"), 60),
    "seed-small": training(
        "seed-small", ("mnist-cnn2",), 60, devices="cpu", steps=SMOKE_STEPS, epochs=SMOKE_EPOCHS, gpus=0
    ),
    "engine-vs-plain": "its plain loop, seed run and tuned process take 10 s on 2 cores even for 3 steps",
    "pytest-gpu": Part("pytest-gpu", "pytest", PYTEST_GPU, 90),
    "seed-catdog": LEFT_TO_THE_GPU,
    "seed-imdb": LEFT_TO_THE_GPU,
    "tuned-small": training(
        "tuned-small", ("cifar10-mlp",), 60, mode="tuned", devices="cpu", steps=SMOKE_STEPS, epochs=SMOKE_EPOCHS, gpus=0
    ),
    "tuned-catdog": LEFT_TO_THE_GPU,
    "tuned-imdb": LEFT_TO_THE_GPU,
    "compile": "inductor takes 10-30 s to compile on a CPU, and tuned mode tries torch.compile on GPUs only",
    "seed-cpu": "the whole smoke run is on the CPU: seed-small trains there",
    "gbdt": "XGBoost on CUDA; tests/test_gbdt.py trains XGBoost on the CPU",
    "wall-clock": "its 2% tolerance needs 20-40 s between the two run lengths: minutes, not a smoke run",
    "nproc": "DDP over every GPU needs at least 2; tests/test_distributed.py trains 2 processes on the CPU",
}


@dataclass
class Outcome:
    """What became of one part."""

    name: str
    kind: str
    budget_s: float
    status: str = "skipped"  # one of STATUSES
    reason: str | None = None  # why it was skipped, failed or timed out
    command: list[str] = field(default_factory=list)
    allowed_s: float | None = None  # how long it was allowed to run: its budget and what earlier parts left
    wall_s: float | None = None
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)  # workloads left out, and why
    output_tail: str = ""
    result: Any = None  # the JSON it wrote (or printed), parsed; pytest's counts
    key_figures: str = ""


@dataclass
class Machine:
    """What the parts before learned that the parts after need: the fingerprint and the workload list."""

    fingerprint: dict | None = None
    workloads: list[dict] | None = None

    @property
    def gpus(self) -> int:
        return sum(entry.get("kind") == "cuda" for entry in (self.fingerprint or {}).get("accelerators", []))

    def unavailable(self) -> dict[str, str]:
        return {entry["name"]: entry["unavailable"] for entry in self.workloads or [] if entry.get("unavailable")}

    def learn(self, outcome: Outcome) -> None:
        if outcome.kind == "devices" and isinstance(outcome.result, dict):
            self.fingerprint = outcome.result
        elif outcome.kind == "list" and isinstance(outcome.result, list):
            self.workloads = outcome.result


# --- running the parts ----------------------------------------------------------------------------------------


def run_parts(
    parts: Sequence[Part | tuple[str, str]],
    out: Path,
    *,
    time_limit_s: float = TIME_LIMIT_S,
    only: set[str] | None = None,
    env: dict[str, str] | None = None,
    machine: Machine | None = None,
    after_each: Callable[[list[Outcome]], None] = lambda outcomes: None,
) -> list[Outcome]:
    """Run `parts` in order within `time_limit_s`, each in its own process group, and say what became of each.

    A (name, reason) pair in `parts` is a part that is skipped for that reason. `only` runs those parts (and
    devices and list, which the others need). `after_each` sees the outcomes so far after every part, so that a
    command stopped from outside still leaves what had finished on disk."""
    deadline = time.monotonic() + time_limit_s
    machine = machine or Machine()
    outcomes: list[Outcome] = []
    for index, part in enumerate(parts):
        if isinstance(part, tuple):
            name, reason = part
            outcome = Outcome(name, "", 0.0, reason=reason)
        else:
            outcome = Outcome(part.name, part.kind, part.budget_s)
            outcome.reason = why_not(part, machine, only)
            if outcome.reason is None:
                left_s = deadline - time.monotonic()
                reserved_s = sum(
                    later.budget_s
                    for later in parts[index + 1 :]
                    if isinstance(later, Part) and why_not(later, machine, only) is None
                )
                if left_s < part.budget_s:
                    outcome.reason = f"not enough time left: {left_s:.0f} s left, its budget is {part.budget_s:.0f} s"
                else:
                    try:
                        run_part(part, outcome, out, min(left_s, max(part.budget_s, left_s - reserved_s)), machine, env)
                    except OSError as error:  # a command that cannot start: the other parts still run
                        outcome.status, outcome.reason = "fail", f"could not run it: {error}"
                    machine.learn(outcome)
        outcomes.append(outcome)
        after_each(outcomes)
    return outcomes


def why_not(part: Part, machine: Machine, only: set[str] | None) -> str | None:
    """Why `part` will not run here (not selected, too few GPUs, no workload it names can run), or None."""
    if only is not None and part.name not in only and part.kind not in ("devices", "list"):
        return "not selected (--only)"
    if machine.gpus < part.gpus:
        found = f"{machine.gpus} CUDA GPU{'' if machine.gpus == 1 else 's'} here"
        return f"{found}: it needs {part.gpus}" + (" (--nproc over every GPU)" if part.gpus > 1 else "")
    unavailable = machine.unavailable()
    if part.workloads and all(name in unavailable for name in part.workloads):
        return "; ".join(f"{name} cannot run here: {unavailable[name]}" for name in part.workloads)
    return None


def run_part(
    part: Part, outcome: Outcome, out: Path, allowed_s: float, machine: Machine, env: dict[str, str] | None
) -> None:
    """Run one part for at most `allowed_s`, then read and judge what it left."""
    unavailable = machine.unavailable()
    workloads = [name for name in part.workloads if name not in unavailable]
    outcome.notes = [f"{name} left out: {unavailable[name]}" for name in part.workloads if name in unavailable]
    paths = {
        "python": sys.executable,
        "json": str(out / "parts" / f"{part.name}.json"),
        "db": str(out / "work" / f"{part.name}.sqlite"),
    }
    outcome.command = [
        expanded
        for argument in part.command
        for expanded in (workloads if argument == WORKLOADS else [argument.format(**paths)])
    ]
    result_file = Path(paths["json"])
    log_file = out / "logs" / f"{part.name}.log"
    for folder in (result_file.parent, log_file.parent, out / "work"):
        folder.mkdir(parents=True, exist_ok=True)
    result_file.unlink(missing_ok=True)  # a stale result must not pass for this run's
    outcome.allowed_s = allowed_s
    with open(log_file, "wb") as log, open(result_file if part.result_on_stdout else os.devnull, "wb") as stdout:
        outcome.exit_code, outcome.wall_s, timed_out = run_process(
            outcome.command, allowed_s, stdout=stdout if part.result_on_stdout else log, stderr=log, env=env
        )
    outcome.output_tail = tail(log_file)
    outcome.result = read_result(part, result_file, outcome.output_tail)
    if timed_out:
        outcome.status = "timed out"
        outcome.reason = f"stopped after {outcome.wall_s:.0f} s (allowed {allowed_s:.0f} s)"
    else:
        problems = judge(part.kind, outcome.exit_code, outcome.result, last_words(outcome.output_tail))
        outcome.status = "fail" if problems else "pass"
        outcome.reason = "; ".join(problems) or None
        if problems and part.result_on_stdout and outcome.result is None:  # what it printed instead of JSON
            outcome.output_tail = (outcome.output_tail + "\n[stdout]\n" + tail(result_file))[-TAIL_CHARS:]
    outcome.key_figures = key_figures(part.kind, outcome.result)


def run_process(
    command: list[str], allowed_s: float, *, stdout: Any, stderr: Any, env: dict[str, str] | None
) -> tuple[int, float, bool]:
    """Run `command` in a process group of its own for at most `allowed_s`: (exit code, seconds, timed out).

    Past its time the whole group gets SIGTERM (devicebench then writes what it finished) and, if anything is
    left after the grace, SIGKILL; whatever the group left running (loader workers, ranks) is killed at the end."""
    grace_s = min(GRACE_S, allowed_s / 4)
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, cwd=REPOSITORY, env=env, start_new_session=True
    )
    timed_out = False
    try:
        process.wait(timeout=allowed_s - grace_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
    finally:
        _signal_group(process.pid, signal.SIGKILL)  # its leftovers; never anything outside its own group
    return process.returncode, time.monotonic() - started, timed_out


def _signal_group(group: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(group, number)


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        return path.read_bytes().decode("utf-8", errors="replace")[-chars:]
    except OSError:
        return ""


def read_result(part: Part, result_file: Path, output: str) -> Any:
    """What the part left to read: the JSON it wrote or printed, or pytest's counts; None when there is none."""
    if part.kind == "pytest":
        return pytest_counts(output)
    try:
        return json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def pytest_counts(output: str) -> dict[str, int] | None:
    """pytest's last summary line ("3 passed, 2 skipped, 1 deselected in 4.2s") as numbers."""
    for line in reversed(output.splitlines()):
        if re.search(r"\d+ \w+.* in [\d.]+s", line):
            counts = {
                word.rstrip("s") if word in ("errors", "warnings") else word: int(number)
                for number, word in re.findall(
                    r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|"
                    r"xpassed|warnings?)",
                    line,
                )
            }
            if counts:
                return counts
    return None


def last_words(output: str) -> str:
    """The last line of `output` that says something, without the box a rich error is drawn in."""
    for line in reversed(output.splitlines()):
        words = line.strip().strip("\u2500\u2502\u256d\u256e\u256f\u2570 ").strip()
        if any(character.isalpha() for character in words):
            return words[:200]
    return ""


def judge(kind: str, exit_code: int | None, result: Any, last_line: str = "") -> list[str]:
    """What is wrong with a part that ended by itself: its exit code (with the last line it wrote), a result it
    should have left and did not, a run that did not end "ok" or has no steady throughput, a compiled run that ran
    eagerly, two clocks that disagree."""
    problems = [f"exit code {exit_code}" + (f": {last_line}" if last_line else "")] if exit_code != 0 else []
    if (
        kind in ("devices", "list", "calibrate", "check", "run", "compile", "wall-clock", "engine-vs-plain")
        and result is None
    ):
        problems.append("no result JSON")
    if kind in ("run", "compile") and isinstance(result, dict):
        try:
            problems += run_problems(result.get("runs") or [], compiled=kind == "compile")
        except (KeyError, TypeError) as error:  # devicebench's schema moved on: say so, and go on with the parts
            problems.append(f"its JSON is not shaped as expected ({type(error).__name__} {error})")
    if kind == "wall-clock" and isinstance(result, dict) and result.get("passed") is False:
        problems.append(f"the two clocks disagree by {result['mismatch']:+.1%} (tolerance ±{result['tolerance']:.0%})")
    if kind == "pytest" and result is None:
        problems.append("no pytest summary line")
    return problems


def run_problems(runs: list[dict], *, compiled: bool) -> list[str]:
    """Each run that did not end "ok", has no steady throughput, was flagged as implausible, or (`compiled`) ran
    eagerly after all."""
    problems = [] if runs else ["no runs in its JSON"]
    for run in runs:
        where = f"{run['workload']} on {run['device']}"
        if run["status"] != "ok":
            problems.append(f"{where}: {run['status']}: {run.get('error')}")
        elif not (run["summary"]["steady_samples_per_s"] or 0) > 0:
            problems.append(f"{where}: no steady samples/s")
        if compiled and not run["settings"]["compiled"]:
            problems.append(f"{where}: not compiled: {run.get('tuning_note')}")
        if run.get("plausibility_flags"):  # a figure that breaks physics (results/plausibility.py)
            problems.append(f"{where}: flagged {run['plausibility_flags']}: {run.get('plausibility_note')}")
    return problems


def exit_status(outcomes: Sequence[Outcome]) -> int:
    """1 when a part failed or timed out; skipped parts are listed, and are no failure."""
    return 1 if any(outcome.status in ("fail", "timed out") for outcome in outcomes) else 0


# --- what the figures say --------------------------------------------------------------------------------------


def key_figures(kind: str, result: Any) -> str:
    """The few numbers a person wants from a part, in one line."""
    if result is None:
        return ""
    try:
        return FIGURES.get(kind, lambda _: "")(result)
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError) as error:  # a result of a new shape
        return f"(figures unreadable: {type(error).__name__} {error})"


def _number(value: float) -> str:
    """Three significant figures, thousands separated."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def _devices_figures(fingerprint: dict) -> str:
    gpus = [entry for entry in fingerprint["accelerators"] if entry.get("kind") == "cuda"]
    software = f"torch {fingerprint['torch']}, {fingerprint['cpu']['logical_cores']} cores"
    if not gpus:
        return f"no GPU ({fingerprint.get('no_accelerator_reason')}); {software}"
    first = gpus[0]
    return (
        f"{len(gpus)} x {first['name']} (driver {first.get('driver')}, CUDA {first.get('cuda_runtime')}, "
        f"power limit {first.get('power_limit_w')} W); {software}"
    )


def _list_figures(workloads: list[dict]) -> str:
    unavailable = [entry["name"] for entry in workloads if entry.get("unavailable")]
    return f"{len(workloads)} workloads" + (f"; cannot run here: {', '.join(unavailable)}" if unavailable else "")


def _calibrate_figures(calibration: dict) -> str:
    shown = []
    for device, ceilings in calibration["devices"].items():
        matmul = ", ".join(f"{precision} {_number(figure['rate'])}" for precision, figure in ceilings["matmul"].items())
        shown.append(f"{device}: {matmul} TFLOP/s, copy {_number(ceilings['memory_copy']['rate'])} GB/s")
    return "; ".join(shown)


def _check_figures(check: dict) -> str:
    """The counts, and the checks that failed or warned by name (and device)."""

    def named(status: str) -> str:
        names = [
            entry["name"] + (f" ({entry['device']})" if entry.get("device") else "")
            for entry in check["checks"]
            if entry["status"] == status
        ]
        return f" ({', '.join(names)})" if names else ""

    return f"failed {check['failed']}{named('fail')}, warned {check['warned']}{named('warn')}, passed {check['passed']}"


def _pytest_figures(counts: dict[str, int]) -> str:
    return ", ".join(f"{number} {word}" for word, number in counts.items())


def run_figures(result: dict) -> str:
    """Per run: steady samples/s, the steady epoch (marked when under a second), MFU where calibrated, what tuned
    mode chose and what torch.compile did."""
    shown = []
    for run in result["runs"]:
        summary, settings = run["summary"], run["settings"]
        if not summary["steady_samples_per_s"]:
            shown.append(f"{run['workload']} {run['device']}: {run['status']}")
            continue
        epoch_s = summary["steady_epoch_time_s"]
        parts = [
            f"{run['workload']} {run['device']}"
            + (f" x{settings['world_size']}" if settings.get("world_size", 1) > 1 else "")
            + f": {_number(summary['steady_samples_per_s'])} samples/s",
            f"epoch {epoch_s:.2f} s" + (f" (<{STEADY_EPOCH_S:g} s)" if epoch_s < STEADY_EPOCH_S else ""),
        ]
        if run.get("flops_per_sample") and run.get("peak_tflops"):
            utilization = statistics.median(
                run["flops_per_sample"] * epoch["samples_per_s"] / 1e12 / (run["peak_tflops"] * settings["world_size"])
                for epoch in run["epochs"]
                if epoch["phase"] == "steady"
            )
            parts.append(f"MFU {utilization:.1%}")
        if settings["mode"] == "tuned":
            parts.append(settings["precision"])
        if run.get("compile_recompiles") is not None:
            parts.append(
                f"{'compiled' if settings['compiled'] else 'NOT compiled'}, recompiles "
                f"{run['compile_recompiles']}, graph breaks {run['compile_graph_breaks']}"
            )
        shown.append(", ".join(parts))
    return "; ".join(shown)


def _wall_clock_figures(check: dict) -> str:
    return (
        f"wall {check['wall_difference_s']:.2f} s vs end-to-end {check['end_to_end_difference_s']:.2f} s: "
        f"{check['mismatch']:+.1%} (tolerance ±{check['tolerance']:.0%})"
    )


def _engine_vs_plain_figures(benchmark_result: dict) -> str:
    shown = []
    for workload, sides in benchmark_result["ratio_to_plain"].items():
        plain = statistics.median(benchmark_result["samples_per_s"][workload]["plain"])
        ratios = ", ".join(f"{side} {ratio['median']:.2f}x" for side, ratio in sides.items() if side != "plain")
        shown.append(f"{workload}: plain {_number(plain)} samples/s; {ratios}")
    return "; ".join(shown)


FIGURES: dict[str, Callable[[Any], str]] = {
    "devices": _devices_figures,
    "list": _list_figures,
    "calibrate": _calibrate_figures,
    "check": _check_figures,
    "pytest": _pytest_figures,
    "run": run_figures,
    "compile": run_figures,
    "wall-clock": _wall_clock_figures,
    "engine-vs-plain": _engine_vs_plain_figures,
}


# --- the report ------------------------------------------------------------------------------------------------


def hardware_name(fingerprint: dict | None) -> str:
    """What the files are named after: the GPU (with their count when several), else the CPU."""
    if not fingerprint:
        return ""
    gpus = [entry["name"] for entry in fingerprint.get("accelerators", []) if entry.get("kind") == "cuda"]
    if gpus:
        return gpus[0] + (f" x{len(gpus)}" if len(gpus) > 1 else "")
    return fingerprint.get("cpu", {}).get("model", "")


def coverage(machine: Machine) -> dict[str, Any]:
    """Which of devicebench's own workloads the GPU plan trains, leaves out (and why), or does not know of."""
    listed = [entry["name"] for entry in machine.workloads or [] if entry.get("origin", "devicebench") == "devicebench"]
    planned = {name for part in PARTS for name in part.workloads}
    return {
        "listed": listed,
        "unavailable": machine.unavailable(),
        "left_out": LEFT_OUT,
        "not_in_plan": [name for name in listed if name not in planned and name not in LEFT_OUT],
    }


def report(
    outcomes: Sequence[Outcome], machine: Machine, *, mode: str, command: str, time_limit_s: float, wall_s: float
) -> dict[str, Any]:
    return {
        "benchmark": "gpu_validation",
        "mode": mode,
        "command": command,
        "hardware": hardware_name(machine.fingerprint),
        "time_limit_s": time_limit_s,
        "wall_s": wall_s,
        "machine": machine.fingerprint,
        "workloads": coverage(machine),
        "failed": [outcome.name for outcome in outcomes if outcome.status in ("fail", "timed out")],
        "skipped": [outcome.name for outcome in outcomes if outcome.status == "skipped"],
        "parts": [dataclasses.asdict(outcome) for outcome in outcomes],
    }


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(document: dict[str, Any]) -> str:
    """The summary: a row per part (status, seconds of its budget, key figures), then what failed and why."""
    parts = document["parts"]
    counts = {status: sum(part["status"] == status for part in parts) for status in STATUSES}
    lines = [
        f"# GPU validation: {document['hardware'] or 'unknown machine'} ({document['mode']})",
        "",
        f"`{document['command']}`: {document['wall_s']:.0f} s of a {document['time_limit_s']:.0f} s limit; "
        + ", ".join(f"{number} {status}" for status, number in counts.items())
        + ".",
        "",
        "| part | status | seconds (budget) | key figures |",
        "|---|---|---|---|",
    ]
    for part in parts:
        seconds = "—" if part["wall_s"] is None else f"{part['wall_s']:.1f} ({part['budget_s']:.0f})"
        figures = part["key_figures"] or part["reason"] or ""
        if part["key_figures"] and part["status"] != "pass" and part["reason"]:
            figures = f"{part['reason']}; {figures}"
        lines.append(f"| {part['name']} | {part['status']} | {seconds} | {_cell(figures)} |")
    workloads = document["workloads"]
    lines += ["", f"Workloads listed: {len(workloads['listed'])}."]
    for name, reason in {**workloads["unavailable"], **workloads["left_out"]}.items():
        lines.append(f"- {name}: {reason}")
    if workloads["not_in_plan"]:
        lines.append(f"- not in the plan (add them to PARTS): {', '.join(workloads['not_in_plan'])}")
    failed = [part for part in parts if part["status"] in ("fail", "timed out")]
    if failed:
        lines += ["", "## What failed", ""]
        lines += [f"- {part['name']} ({part['status']}): {_cell(part['reason'])}" for part in failed]
    return "\n".join(lines) + "\n"


def write_report(out: Path, document: dict[str, Any]) -> tuple[Path, Path]:
    name = f"gpu-validation-{slug(document['hardware'])}"
    json_file, markdown_file = out / f"{name}.json", out / f"{name}.md"
    json_file.write_text(json.dumps(document, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    markdown_file.write_text(markdown(document), encoding="utf-8")
    return json_file, markdown_file


# --- the command -----------------------------------------------------------------------------------------------


def plan(smoke: bool) -> list[Part | tuple[str, str]]:
    """The parts to run: PARTS, or their --cpu-smoke versions (a (name, reason) pair for those skipped there)."""
    if not smoke:
        return list(PARTS)
    return [
        SMOKE[part.name] if isinstance(SMOKE[part.name], Part) else (part.name, f"GPU plan only: {SMOKE[part.name]}")
        for part in PARTS
    ]


def new_folder(smoke: bool) -> Path:
    """A fresh output folder: results/gpu-validation[-N] on a GPU machine, a temporary one for a smoke run."""
    if smoke:
        return Path(tempfile.mkdtemp(prefix="gpu-validation-smoke-"))
    for number in range(1, 1000):
        folder = RESULTS / ("gpu-validation" + (f"-{number}" if number > 1 else ""))
        if not folder.exists() or not any(folder.iterdir()):
            return folder
    raise SystemExit(f"no free folder name under {RESULTS}: give --out")


def part_environment(out: Path) -> dict[str, str]:
    """Every part's environment: the calibration measured here, a throwaway default database, unbuffered output
    (a part stopped mid-way still leaves its last lines) and tables wide enough to read in a log."""
    return {
        **os.environ,
        "DEVICEBENCH_CALIBRATION_DIR": str(out / "calibration"),
        "DEVICEBENCH_DB": str(out / "work" / "results.sqlite"),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "160",
    }


def print_plan(parts: Sequence[Part | tuple[str, str]]) -> None:
    total = sum(part.budget_s for part in parts if isinstance(part, Part))
    for part in parts:
        if isinstance(part, Part):
            words = " ".join(
                " ".join(part.workloads) if argument == WORKLOADS else argument for argument in part.command
            ).replace("{python}", "python")
            print(f"{part.name:<16} {part.budget_s:>4.0f} s  {words}")
        else:
            print(f"{part[0]:<16}    —    skipped: {part[1]}")
    print(f"{'':<16} {total:>4.0f} s  in all")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out",
        type=Path,
        help="output folder (default: a new results/gpu-validation[-N]; a temporary folder with --cpu-smoke)",
    )
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="tiny settings on the CPU, in under a minute: the machinery, end to end",
    )
    parser.add_argument("--only", help="PART[,PART]: run only these parts (devices and list always run)")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT_S, help="seconds for every part together")
    parser.add_argument("--plan", action="store_true", help="print the parts, their budgets and commands, and stop")
    arguments = parser.parse_args(argv)
    parts = plan(arguments.cpu_smoke)
    only = None
    if arguments.only:
        only = {name.strip() for name in arguments.only.split(",") if name.strip()}
        if unknown := only - {part.name for part in PARTS}:
            parser.error(f"unknown parts {sorted(unknown)}; the parts are {', '.join(part.name for part in PARTS)}")
    if arguments.plan:
        print_plan(parts)
        return 0
    out = (arguments.out or new_folder(arguments.cpu_smoke)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    mode = "cpu-smoke" if arguments.cpu_smoke else "gpu"
    command = " ".join(["python", "benchmarks/gpu_validation.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"GPU validation ({mode}) into {out}: {len(parts)} parts within {arguments.time_limit:.0f} s", flush=True)
    machine = Machine()
    started = time.monotonic()

    def save(outcomes: list[Outcome]) -> tuple[Path, Path]:
        document = report(
            outcomes,
            machine,
            mode=mode,
            command=command,
            time_limit_s=arguments.time_limit,
            wall_s=time.monotonic() - started,
        )
        return write_report(out, document)

    def show_and_save(outcomes: list[Outcome]) -> None:
        latest = outcomes[-1]
        seconds = "" if latest.wall_s is None else f" in {latest.wall_s:.1f} s"
        why = f": {latest.reason}" if latest.reason else ""
        print(f"[{len(outcomes):>2}/{len(parts)}] {latest.name:<16} {latest.status}{seconds}{why}", flush=True)
        save(outcomes)

    outcomes = run_parts(
        parts,
        out,
        time_limit_s=arguments.time_limit,
        only=only,
        env=part_environment(out),
        machine=machine,
        after_each=show_and_save,
    )
    json_file, markdown_file = save(outcomes)
    print(f"\n{markdown_file.read_text(encoding='utf-8')}\nwritten to {json_file} and {markdown_file}")
    return exit_status(outcomes)


if __name__ == "__main__":
    sys.exit(main())
