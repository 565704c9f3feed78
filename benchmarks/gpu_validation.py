"""Validate a GPU machine in one command: every GPU path of devicebench, run for real, within 8 minutes.

GPU machines come to this project rarely and briefly (an H200 or H100, 16 cores, torch 2.11, no network, at most 10
minutes a command). This script turns one such command into what we most need to know, the most needed first:
whether devicebench's loop holds a GPU back (engine-vs-plain), how a large model's step compares with the estimate,
the calibrated ceilings, the GPU tests, the seed and tuned paths, torch.compile, XGBoost on CUDA and data-parallel
training, each a subprocess with its own time budget. It writes, into `--out`, `gpu-validation-<hardware>.json`
(the machine's fingerprint; each part's command, status, seconds, exit code, the tail of its output and the JSON
devicebench wrote) and `gpu-validation-<hardware>.md` (a table: part | status | seconds | key figures), prints that
table and what failed, and exits 1 when a part failed or timed out (a skipped part is listed, and is no failure).

    python benchmarks/gpu_validation.py --out results/gpu-validation-h200        # on the GPU machine
    python benchmarks/gpu_validation.py --only tuned,compile --out /tmp/again    # a second command: some parts
    python benchmarks/gpu_validation.py --cpu-smoke --out /tmp/smoke             # anywhere, in under a minute
    python benchmarks/gpu_validation.py --plan                                   # the plan and its costs, not run

What a part costs is mostly not its steps. The first GPU run (an H200, 2026-11-27, `results/gpu-validation-h200/`)
measured, besides them: about 8 s to start each process (python, torch, CUDA); 15-30 s in every GPU `devicebench
run` process to fit the estimate's roofline for its "estimated beforehand" line, which is now cached on disk, so the
plan budgets the first fit once (30 s, in engine-vs-plain's first tuned process) and a second for each later one;
about 5 s of each workload's run besides its steps (its synthetic data, model, FLOP count, evaluation); and tuned
mode's trial on a GPU, now four options (fp32 and bf16, each eager and as one CUDA graph), about 10 s. Every budget
below is those costs plus the steps at the seed step times the H200 measured (`--plan` shows each sum): 466 s in all
of the 480 s limit (`--time-limit`), nproc's 24 included though one GPU skips it; 14 s are left for starting this
script and writing its files, and the command has two minutes to spare of its ten.

| part | what | budget |
|---|---|---|
| devices | `devicebench devices --json`: the machine's fingerprint, and how many GPUs it has | 8 |
| engine-vs-plain | benchmarks/engine_vs_plain.py: mnist-cnn2, cifar10-mlp; plain-resident, plain-graph, seed, tuned | 110 |
| resnet50 | seed mode at batch 256 (synthetic): its samples/s beside its "estimated beforehand" line | 24 |
| calibrate | `devicebench calibrate --json`: every device's ceilings (the H200's took 55 s), for every run's MFU | 55 |
| pytest-gpu | `python -m pytest -m gpu`: tests/test_gpu.py, test_step_graph.py and the GPU tests of others | 110 |
| list | `devicebench list --json`: the workloads, and which of them cannot run here (and why) | 11 |
| seed | seed mode on cuda: cifar10-cnn, catdog-deep, imdb-bilstm | 34 |
| tuned | tuned mode on cuda (`--compile off`): cifar10-cnn, imdb-bilstm (cuDNN's LSTM in a graph) | 44 |
| compile | imdb-transformer, tuned, `--compile on --precision bf16`: compiled, its step eager or one graph | 46 |
| nproc | cifar10-mlp, `--devices all-gpus`: DDP over every GPU; skipped with fewer than 2 | 24 |

Every training part runs 3 epochs (one warm-up, two steady) on `--data synthetic`, at most 100 steps and 3
evaluation batches an epoch: enough to see that every path runs and what it measures, not a benchmark (the summary
marks a steady epoch under a second). mnist-cnn2 and cifar10-mlp train in seed and tuned mode inside
engine-vs-plain, beside the plainest loops, so the seed and tuned parts leave them out; the other seeds are the same
code as those the plan keeps, and each ran on the H200 before (LEFT_OUT says which and why). The GPU tests train
mnist-cnn2 on the CPU too (the other side of the speedup) and XGBoost on CUDA where it is installed, so neither has
a part of its own any more; `devicebench check` passed all 28 of its checks on the H200 and repeats what calibrate
and the runs do, so it is left to a command of its own. Tuned mode runs with `--compile off` because its default on
a GPU, auto, compiles every candidate with inductor; the compile part compiles one workload in one precision, eager
and as a CUDA graph.

| workload | batch | seed step on the H200, measured | steps an epoch here |
|---|---|---|---|
| mnist-cnn2 | 50 | 2.1 ms | 200 (engine-vs-plain) |
| cifar10-mlp | 32 | 1.7 ms | 200 (engine-vs-plain) |
| cifar10-cnn | 128 | 9.0 ms: input-bound, its batches augmented on the host | 100 |
| catdog-deep | 32 | 18 ms: ~7 GFLOP a training image in strict fp32 | 100 |
| imdb-bilstm, imdb-transformer | 32 | 4.4 ms, 4.3 ms | 100 |
| resnet50 | 256 | unmeasured; 250 ms budgeted: ~25 GFLOP an image at half the 51 fp32 TFLOP/s calibrated | 5 (all) |

Calibration runs before the GPU tests and the seed parts, into `calibration/` of the output folder, and every later
part gets `DEVICEBENCH_CALIBRATION_DIR` pointing there: runs take their MFU against the ceilings just measured, and
nothing is read from, or written to, the calibration of whoever runs this. Every devicebench run writes its runs to
a throwaway database in `work/` (`--db`), and its JSON to `parts/PART.json`; each part's output goes to `logs/`.

Time: the script keeps a deadline (`--time-limit`, 480 s). A part runs only when its budget fits in the time left
(else it is "skipped: not enough time left"), and may run until only the budgets of the parts after it are left:
its own budget, plus whatever the parts before it left unused. One that runs past that is stopped (SIGTERM to its
process group, so that devicebench writes the epochs it finished; SIGKILL 5 s later) and recorded "timed out".

`--cpu-smoke` runs the same machinery end to end on any machine in well under a minute, so that it cannot rot
between GPU runs: tiny settings (2 epochs x 3 steps) on `--devices cpu`, `calibrate --quick`, and `pytest -m gpu`,
which skips everything there; each part that makes no sense on a CPU is recorded as skipped, with the reason
(`SMOKE` below). tests/test_gpu_validation.py runs it.
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
TIME_LIMIT_S = 480  # eight minutes: a GPU command may run ten, and this one runs alone
GRACE_S = 5.0  # between SIGTERM and SIGKILL: devicebench writes the epochs it finished
TAIL_CHARS = 3000  # of each part's output, kept in the JSON
EPOCHS = 3  # one warm-up epoch and two steady ones
STEPS = 100  # training steps an epoch at most
EVAL_STEPS = 3  # evaluation batches an epoch: timed apart from training, it only has to run
STEADY_EPOCH_S = 1.0  # the summary marks a steady epoch shorter than this: its step count wants raising
STATUSES = ("pass", "fail", "skipped", "timed out")
WORKLOADS = "{workloads}"  # in a command: the part's workloads that this machine can run

# What a part costs besides its steps, as the H200's host measured it (the docstring says where each comes from)
PROCESS_START_S = 8.0  # python, torch and CUDA up: every process
FIRST_FIT_S = 30.0  # the estimate's roofline fitted for a GPU run's "estimated beforehand" line, the first time
CACHED_FIT_S = 1.0  # ... read back from its cache in each later GPU `devicebench run` process
SETUP_S = 5.0  # each workload's run besides its steps: synthetic data, model, FLOP count, evaluation
TRIAL_S = 10.0  # tuned mode's trial on a GPU: fp32 and bf16, each eager and as one CUDA graph
COMPILE_S = 10.0  # inductor compiling a small model's training and evaluation graphs, each time it is asked
PLAIN_SIDE_S = 2.0  # engine-vs-plain's plain loops: a model and its data on the device, besides their steps
STEP_MS = {  # seed mode's step on the H200 (on its host's CPU for "cpu:"), measured; resnet50's is estimated
    "mnist-cnn2": 2.1,
    "cifar10-mlp": 1.7,
    "cifar10-cnn": 9.0,
    "catdog-original": 4.1,
    "catdog-deep": 18.0,
    "imdb-bilstm": 4.4,
    "imdb-transformer": 4.3,
    "gbdt-synthetic": 4.3,  # a boosting round
    "resnet50": 250.0,
    "cpu:mnist-cnn2": 13.5,  # 3,700 samples/s at batch 50 on 16 cores
}
EPOCH_STEPS = {"cifar10-cnn": 390, "resnet50": 5, "gbdt-synthetic": 200}  # where an epoch has fewer than asked

ENGINE_VS_PLAIN = ("mnist-cnn2", "cifar10-mlp")
ENGINE_VS_PLAIN_STEPS = 200
ENGINE_VS_PLAIN_SIDES = ("plain-resident", "plain-graph", "seed", "tuned")
SEED = ("cifar10-cnn", "catdog-deep", "imdb-bilstm")  # augmented batches; the largest conv net; cuDNN's LSTM
TUNED = ("cifar10-cnn", "imdb-bilstm")  # a conv net on augmented batches; cuDNN's LSTM, captured in a graph
SAME_CODE = "the same code as {}, which the plan trains; it ran on the H200 in seed and tuned mode"
LEFT_OUT = {
    "mnist-cnn4": SAME_CODE.format("mnist-cnn2, deeper"),
    "cifar100-mlp": SAME_CODE.format("cifar10-mlp, another size"),
    "catdog-original": SAME_CODE.format("catdog-deep, shallower"),
    "catdog-improved": SAME_CODE.format("catdog-deep, shallower"),
    "catdog-hires": SAME_CODE.format("catdog-deep at 128x128, shallower"),
    "gbdt-synthetic": "tests/test_gpu.py boosts it on CUDA (pytest-gpu) where xgboost is installed",
    "gbdt-covertype": "the same booster as gbdt-synthetic on another table",
    **{
        name: "a reference model, run only when named: resnet50 stands for them beside its estimate "
        "(issue 30's GPU runs are their own)"
        for name in ("resnet152", "vgg16", "bert-base", "bert-large", "gpt2-small", "gnmt")
    },
}

Costs = tuple[tuple[str, float], ...]  # (what, seconds): what a part's budget is made of, as --plan shows it


@dataclass(frozen=True)
class Part:
    """One subprocess of the validation, and what it takes to run it."""

    name: str
    kind: str  # how its result is read and summed up: devices, list, calibrate, pytest, run, compile, ...
    command: tuple[str, ...]  # {python}, {json} (its result file), {db} and WORKLOADS are filled in when it runs
    budget_s: float
    workloads: tuple[str, ...] = ()  # what WORKLOADS stands for; those this machine cannot run are left out
    gpus: int = 0  # CUDA GPUs it needs; with fewer it is skipped, saying so
    costs: Costs = ()  # what budget_s adds up, rounded up

    @property
    def result_on_stdout(self) -> bool:
        return self.kind in ("devices", "list", "calibrate")


def costed(name: str, kind: str, command: tuple[str, ...], costs: Costs, **fields: Any) -> Part:
    """A part whose budget is its costs' sum, rounded up to a second."""
    return Part(name, kind, command, math.ceil(sum(seconds for _, seconds in costs)), costs=costs, **fields)


def steps_s(workloads: Sequence[str], steps: float, epochs: int = EPOCHS, device: str = "cuda") -> float:
    """Seconds of training steps of `workloads`, `steps` an epoch at most, at the measured seed steps."""
    prefix = "cpu:" if device == "cpu" else ""
    return sum(epochs * min(steps, EPOCH_STEPS.get(name, steps)) * STEP_MS[prefix + name] / 1000 for name in workloads)


def devicebench(*arguments: str) -> tuple[str, ...]:
    return ("{python}", "-m", "devicebench", *arguments)


def training(
    name: str,
    workloads: Sequence[str],
    *,
    mode: str = "seed",
    devices: str = "cuda",
    steps: int | None = STEPS,
    epochs: int = EPOCHS,
    flags: Sequence[str] = (),
    kind: str = "run",
    gpus: int = 1,
    compiles: int = 0,
    extra: Costs = (),
    budget_s: float | None = None,
) -> Part:
    """A part that trains `workloads` with `devicebench run` on synthetic data, its JSON and database its own. Its
    budget: the process's start, the fit (on a GPU), each workload's setup, trial (tuned) and `compiles`, its steps
    (at most `steps` an epoch; None: whole epochs) and any `extra`; or `budget_s` (the smoke run's)."""
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
    if budget_s is not None:
        return Part(name, kind, command, budget_s, tuple(workloads), gpus)
    count = len(workloads)
    costs: Costs = (
        ("start", PROCESS_START_S),
        ("fit", 0.0 if devices == "cpu" else CACHED_FIT_S),
        ("setup", count * SETUP_S),
        ("trial", count * TRIAL_S if mode == "tuned" else 0.0),
        ("compile", count * compiles * COMPILE_S),
        ("steps", steps_s(workloads, steps or math.inf, epochs, devices)),
        *extra,
    )
    return costed(name, kind, command, tuple(cost for cost in costs if cost[1]), workloads=tuple(workloads), gpus=gpus)


def benchmark(name: str, script: str, costs: Costs, workloads: Sequence[str], *arguments: str) -> Part:
    command = ("{python}", str(BENCHMARKS / script), WORKLOADS, *arguments, "--output", "{json}")
    return costed(name, name, command, costs, workloads=tuple(workloads), gpus=1)


def engine_vs_plain_costs(workloads: Sequence[str], steps: int, epochs: int) -> Costs:
    """engine_vs_plain.py in one process: per workload the two plain loops and seed mode in it (through the Python
    API: no fit), and tuned mode in a fresh `devicebench run`, the plan's first GPU run: it pays the first fit."""
    count = len(workloads)
    seed_steps = steps_s(workloads, steps, epochs)
    return (
        ("start", PROCESS_START_S * (1 + count)),
        ("fit", FIRST_FIT_S + CACHED_FIT_S * (count - 1)),
        ("setup", count * (2 * PLAIN_SIDE_S + 2 * SETUP_S)),
        ("trial", count * TRIAL_S),
        ("steps", 4 * seed_steps),  # the plain loops' at most a seed step's each: the plainest is the fastest
    )


PYTEST_GPU = ("{python}", "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider")
# a test module that cannot be imported on the GPU machine's torch or packages must not keep the others from running
PYTEST_GPU_KEEP_GOING = ("--continue-on-collection-errors",)
NO_COMPILE = ("--compile", "off")  # tuned mode on a GPU would otherwise compile every candidate

PARTS = (
    costed("devices", "devices", devicebench("devices", "--json"), (("start", PROCESS_START_S),)),
    benchmark(
        "engine-vs-plain",
        "engine_vs_plain.py",
        engine_vs_plain_costs(ENGINE_VS_PLAIN, ENGINE_VS_PLAIN_STEPS, 2),
        ENGINE_VS_PLAIN,
        "--device",
        "cuda",
        "--rounds",
        "1",
        "--steps",
        str(ENGINE_VS_PLAIN_STEPS),
        "--epochs",
        "2",
        "--sides",
        ",".join(ENGINE_VS_PLAIN_SIDES),
    ),
    training(
        "resnet50",
        ("resnet50",),
        kind="estimate",
        steps=None,  # 5 an epoch: 1,280 synthetic images
        flags=("--batch-size", "256"),
        extra=(("its 231 MB of images, its FLOP count", 6.0),),
    ),
    costed(
        "calibrate",
        "calibrate",
        devicebench("calibrate", "--json"),
        (("start", PROCESS_START_S), ("ceilings", 47.0)),  # the H200's took 55 s in all
    ),
    costed(
        "pytest-gpu",
        "pytest",
        (*PYTEST_GPU, *PYTEST_GPU_KEEP_GOING, "--durations=10"),
        (("start", PROCESS_START_S), ("collection", 6.0), ("tests", 96.0)),  # 6.5 s to collect on the H200's host
    ),
    costed("list", "list", devicebench("list", "--json"), (("start", PROCESS_START_S), ("registry", 3.0))),
    training("seed", SEED),
    training("tuned", TUNED, mode="tuned", flags=NO_COMPILE),
    training(
        "compile",
        ("imdb-transformer",),
        mode="tuned",
        kind="compile",
        flags=("--compile", "on", "--precision", "bf16"),
        compiles=2,  # the trial's two options, eager and as a graph; the run's own reads inductor's cache
    ),
    training("nproc", ("cifar10-mlp",), devices="all-gpus", gpus=2, extra=(("torchrun and its second rank", 9.0),)),
)

SMOKE_STEPS, SMOKE_EPOCHS = 3, 2
# --cpu-smoke: each part's tiny CPU version, or why it makes no sense on a CPU. Budgets are generous: CI is slow.
SMOKE: dict[str, Part | str] = {
    "devices": dataclasses.replace(PARTS[0], budget_s=30, costs=()),
    "engine-vs-plain": "its plain loops, seed run and tuned process take 10 s on 2 cores even for 3 steps",
    "resnet50": "a step at batch 256 takes minutes on 2 cores; tests/test_imagenet.py builds it at small sizes",
    "calibrate": Part("calibrate", "calibrate", devicebench("calibrate", "--devices", "cpu", "--quick", "--json"), 40),
    "pytest-gpu": Part("pytest-gpu", "pytest", (*PYTEST_GPU, *PYTEST_GPU_KEEP_GOING), 90),
    "list": dataclasses.replace(PARTS[5], budget_s=30, costs=()),
    "seed": training(
        "seed", ("mnist-cnn2",), devices="cpu", steps=SMOKE_STEPS, epochs=SMOKE_EPOCHS, gpus=0, budget_s=60
    ),
    "tuned": training(
        "tuned",
        ("cifar10-mlp",),
        mode="tuned",
        devices="cpu",
        steps=SMOKE_STEPS,
        epochs=SMOKE_EPOCHS,
        gpus=0,
        budget_s=60,
    ),
    "compile": "inductor takes 10-30 s to compile on a CPU, and tuned mode tries torch.compile on GPUs only",
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
    """What the part left to read: the JSON it wrote or printed (with, for a run set beside its estimate, the line
    it printed of that), or pytest's counts; None when there is none."""
    if part.kind == "pytest":
        return pytest_counts(output)
    try:
        result = json.loads(result_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if part.kind == "estimate" and isinstance(result, dict):
        result[ESTIMATED] = estimated_beforehand(output)
    return result


ESTIMATED = "estimated_beforehand"  # the key read_result adds to a run's JSON: the line `run` printed of it
ESTIMATE_LINE = re.compile(
    r"\S+ on cuda:\d+ \(.+?\): measured [\d,.]+ samples/s; estimated beforehand .+?: "
    r"(?:inside the interval|(?:outside: )?[\d,.]+x (?:faster|slower) than estimated)"
)


def estimated_beforehand(output: str) -> str | None:
    """The line `devicebench run` prints of a GPU run: its samples/s beside the estimate's (estimate/against_measured
    .py), rejoined where the terminal's width wrapped it; None when there is none."""
    found = ESTIMATE_LINE.search(" ".join(output.split()))
    return found.group(0) if found else None


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
    if kind in ("devices", "list", "calibrate", "run", "estimate", "compile", "engine-vs-plain") and result is None:
        problems.append("no result JSON")
    if kind in ("run", "estimate", "compile") and isinstance(result, dict):
        try:
            problems += run_problems(result.get("runs") or [], compiled=kind == "compile")
        except (KeyError, TypeError) as error:  # devicebench's schema moved on: say so, and go on with the parts
            problems.append(f"its JSON is not shaped as expected ({type(error).__name__} {error})")
    if kind == "estimate" and isinstance(result, dict) and not result.get(ESTIMATED):
        problems.append("its output has no line of what the estimate said beforehand")
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
            parts.append(settings["precision"] + (", CUDA graph" if settings.get("step_graph") else ""))
        if run.get("compile_recompiles") is not None:
            parts.append(
                f"{'compiled' if settings['compiled'] else 'NOT compiled'}, recompiles "
                f"{run['compile_recompiles']}, graph breaks {run['compile_graph_breaks']}"
            )
        shown.append(", ".join(parts))
    return "; ".join(shown)


def _estimate_figures(result: dict) -> str:
    """The run's figures, and the line it printed of what the estimate said beforehand."""
    return f"{run_figures(result)}; {result[ESTIMATED]}"


def _engine_vs_plain_figures(benchmark_result: dict) -> str:
    """Per workload the plainest loop's median samples/s, and each other side's as a multiple of it."""
    shown = []
    for workload, sides in benchmark_result["samples_per_s"].items():
        medians = {side: statistics.median(rates) for side, rates in sides.items() if rates}
        reference = next(side for side in ("plain-resident", "plain") if side in medians)
        ratios = ", ".join(
            f"{side} {rate / medians[reference]:.2f}x" for side, rate in medians.items() if side != reference
        )
        shown.append(f"{workload}: {reference} {_number(medians[reference])} samples/s; {ratios}")
    return "; ".join(shown)


FIGURES: dict[str, Callable[[Any], str]] = {
    "devices": _devices_figures,
    "list": _list_figures,
    "calibrate": _calibrate_figures,
    "pytest": _pytest_figures,
    "run": run_figures,
    "compile": run_figures,
    "estimate": _estimate_figures,
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
            if part.costs:
                print(f"{'':<16}         = " + " + ".join(f"{what} {seconds:.0f} s" for what, seconds in part.costs))
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
