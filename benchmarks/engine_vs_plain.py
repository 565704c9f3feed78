"""devicebench seed and tuned mode against the plain PyTorch loops a user would write, on the same device.

Sides, per subject (a workload at the seed's batch size on synthetic data, or `linear-16-16-4`: a Linear 16-16-4
trained with Adam at batch 8 on random features, a model whose compute is negligible beside its dispatches):
- `plain`: what a user writes first: the inputs scaled to float once, a shuffled DataLoader over a TensorDataset
  on the host, each batch copied to the device, eager fp32 forward, loss, backward, step.
- `plain-compile`: the same loop with `torch.compile(model)`.
- `plain-resident`: the plainest honest loop: the float inputs and labels on the device, a permutation made there
  each epoch, and per step its slice and a gather by index of inputs and labels; nothing else.
- `plain-graph`: `plain-resident`'s step captured once as a CUDA graph (static input and target buffers, the
  optimizer capturable) and replayed; the gathers write into the static buffers. On a GPU only: elsewhere it is
  skipped, saying why.
- `seed`, `tuned`: `devicebench run --mode seed|tuned`, as a user runs it, steady-state samples/s from its JSON.
Each side's host work is in HOST_WORK, printed with its figures and written to the output.

The plain loops read their own clock (after a device synchronize) only at epoch boundaries: they are the
independent referee of devicebench's timing. The first epoch of every side is warm-up (compilation, capture,
allocation) and is left out. The sides alternate (a different one first each round) over several rounds; medians
over rounds are compared with `plain-resident` (or `plain` when it was not run), with the range of the per-round
ratios. Augmentation is turned off (`--set augment=false`) where a workload has it, so every side does the same
work. The output file is written again after every measurement: a run stopped part way keeps what it measured.

By default every side but `tuned` runs in this one process (devicebench through its Python API, `devicebench.run`),
so they share one allocator and one memory layout: their ratios are the harness's overhead and nothing else.
`tuned` always runs in a fresh process (devicebench through its command line): it sets glibc's allocator
thresholds, and glibc cannot be put back to its moving thresholds afterwards, nor made to drop the freed blocks it
kept, so every side measured after it in the same process would run faster than it otherwise would (on this VM:
the plain loop on cifar10-mlp went from 1,050 to 2,170 samples/s). `--fresh-processes` runs every measurement in a
new process: closer to how each is really used, but each process then starts glibc from a different history,
which moves an MLP's step time by ~10% either way.

    python benchmarks/engine_vs_plain.py mnist-cnn2 cifar10-mlp catdog-original --device cpu --rounds 3
    python benchmarks/engine_vs_plain.py linear-16-16-4 --sides plain-resident,seed --threads 1 --steps 2000
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import devicebench
from devicebench.data import load_dataset
from devicebench.devices import device_name, synchronize
from devicebench.environment import machine_fingerprint
from devicebench.workloads import get_workload

PLAIN_SIDES = ("plain", "plain-compile", "plain-resident", "plain-graph")
SIDES = (*PLAIN_SIDES, "seed", "tuned")
REFERENCES = ("plain-resident", "plain")  # the side the others are compared with: the first of these measured
HOST_WORK = {
    "plain": "per step: a DataLoader indexes the batch's samples one by one on the host, collates them and the "
    "batch is copied to the device",
    "plain-compile": "as plain; the model through torch.compile",
    "plain-resident": "per epoch: a permutation made on the device; per step: its slice and two gathers by index "
    "(inputs, labels) on the device; nothing else",
    "plain-graph": "as plain-resident, the gathers written into the static buffers of the step captured once as a "
    "CUDA graph, then one replay",
    "seed": "devicebench seed mode: its loop and batches (in-memory data on the device where it fits, gathered a "
    "chunk of batches at a time; else gathered on one host thread and copied a batch ahead)",
    "tuned": "devicebench tuned mode, in a fresh process: as seed, with the tuning it chose",
}
RESULTS = Path(__file__).resolve().parents[1] / "results"
LINEAR = "linear-16-16-4"
LINEAR_BATCH = 8  # samples per step
LINEAR_SAMPLES = 8 * 4096  # 4,096 steps an epoch at most
LINEAR_CLASSES = 4


def linear_16_16_4() -> nn.Module:
    """The model of `linear-16-16-4` (importable by `devicebench run --model engine_vs_plain:linear_16_16_4`)."""
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, LINEAR_CLASSES))


def linear_data() -> tuple[torch.Tensor, torch.Tensor]:
    """Random features and classes for `linear-16-16-4`, the same for every side and seed."""
    generator = torch.Generator().manual_seed(0)
    features = torch.rand(LINEAR_SAMPLES, 16, generator=generator)
    return features, torch.randint(0, LINEAR_CLASSES, (LINEAR_SAMPLES,), generator=generator)


@dataclass(frozen=True)
class Subject:
    """What every side trains: a model, its loss and optimizer, the data as float inputs and labels, a batch size."""

    name: str
    batch_size: int
    build_model: Callable[[], nn.Module]
    build_loss: Callable[[], nn.Module]
    build_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    load: Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # seed → (float inputs scaled once, labels)


def subject(name: str) -> Subject:
    if name == LINEAR:
        return Subject(
            LINEAR,
            LINEAR_BATCH,
            linear_16_16_4,
            nn.CrossEntropyLoss,
            lambda model: torch.optim.Adam(model.parameters(), lr=1e-3),  # devicebench's own-model default
            lambda seed: linear_data(),
        )
    entry = get_workload(name)

    def load(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        dataset = load_dataset(entry.dataset, "synthetic", seed=seed, **entry.data_request(entry.defaults))
        return torch.from_numpy(dataset.train_images).float() / 255, torch.from_numpy(dataset.train_labels)

    return Subject(
        name,
        entry.defaults["batch_size"],
        lambda: entry.build_model(entry.defaults),
        entry.build_loss,
        lambda model: entry.build_optimizer(model, entry.defaults),
        load,
    )


class Skipped(Exception):
    """A side that cannot run here; the message says why."""


Epoch = Callable[[], None]  # trains one epoch of the benchmark's steps


def eager_step(forward: Callable, loss_function: nn.Module, optimizer: torch.optim.Optimizer, inputs, labels) -> None:
    loss = loss_function(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def loader_epochs(model, loss_function, optimizer, inputs, labels, batch_size, device, steps, seed, compiled) -> Epoch:
    """`plain` and `plain-compile`: a shuffled DataLoader over the host's tensors."""
    loader = DataLoader(
        TensorDataset(inputs, labels),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    forward = torch.compile(model) if compiled else model

    def epoch() -> None:
        for _, (batch_inputs, batch_labels) in zip(range(steps), loader):
            eager_step(forward, loss_function, optimizer, batch_inputs.to(device), batch_labels.to(device))

    return epoch


def resident_epochs(model, loss_function, optimizer, inputs, labels, batch_size, device, steps, seed) -> Epoch:
    """`plain-resident`: the data on the device, a batch sliced from each epoch's permutation and gathered there."""
    inputs, labels = inputs.to(device), labels.to(device)
    generator = torch.Generator(device).manual_seed(seed)

    def epoch() -> None:
        order = torch.randperm(len(labels), device=device, generator=generator)
        for step in range(steps):
            index = order[step * batch_size : (step + 1) * batch_size]
            eager_step(model, loss_function, optimizer, inputs[index], labels[index])

    return epoch


GRAPH_WARMUP_STEPS = 3  # eager steps on a side stream before capture: the optimizer's state, the libraries' workspaces


def graph_epochs(model, loss_function, optimizer, inputs, labels, batch_size, device, steps, seed) -> Epoch:
    """`plain-graph`: the whole step captured once as a CUDA graph over static buffers, replayed every step (the
    pattern of torch.cuda.graphs' documentation, "whole network capture")."""
    if device.type != "cuda":
        raise Skipped(f"a CUDA graph captures CUDA work only; {device} has none")
    for group in optimizer.param_groups:
        if "capturable" in group:  # Adam's and RMSprop's step counts kept on the device, as capture needs
            group["capturable"] = True
    inputs, labels = inputs.to(device), labels.to(device)
    static_inputs, static_labels = inputs[:batch_size].clone(), labels[:batch_size].clone()
    side_stream = torch.cuda.Stream(device)
    side_stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side_stream):
        for _ in range(GRAPH_WARMUP_STEPS):
            eager_step(model, loss_function, optimizer, static_inputs, static_labels)
    torch.cuda.current_stream(device).wait_stream(side_stream)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the gradients in the graph's pool
    with torch.cuda.graph(graph):
        loss = loss_function(model(static_inputs), static_labels)
        loss.backward()
        optimizer.step()
    generator = torch.Generator(device).manual_seed(seed)

    def epoch() -> None:
        order = torch.randperm(len(labels), device=device, generator=generator)
        for step in range(steps):
            index = order[step * batch_size : (step + 1) * batch_size]
            torch.index_select(inputs, 0, index, out=static_inputs)
            torch.index_select(labels, 0, index, out=static_labels)
            graph.replay()

    return epoch


def plain_samples_per_s(name: str, side: str, device: torch.device, steps: int, epochs: int, seed: int) -> list[float]:
    """Steady-state samples/s of each epoch after the first, for a hand-written loop."""
    chosen = subject(name)
    inputs, labels = chosen.load(seed)
    steps = min(steps, len(labels) // chosen.batch_size)  # whole batches only: every step has batch_size samples
    torch.manual_seed(seed)
    model = chosen.build_model().to(device)
    loss_function = chosen.build_loss().to(device)
    optimizer = chosen.build_optimizer(model)
    model.train()
    common = (model, loss_function, optimizer, inputs, labels, chosen.batch_size, device, steps, seed)
    if side in ("plain", "plain-compile"):
        epoch = loader_epochs(*common, compiled=side == "plain-compile")
    else:
        epoch = (resident_epochs if side == "plain-resident" else graph_epochs)(*common)
    rates = []
    for index in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        epoch()
        synchronize(device)
        if index > 0:  # the first epoch is warm-up, as in devicebench
            rates.append(steps * chosen.batch_size / (time.perf_counter() - start))
    return rates


def same_work(name: str) -> list[str]:
    """The `--set` flags that make devicebench do what the plain loop does: no augmentation."""
    if name == LINEAR:
        return []
    return ["--set", "augment=false"] if "augment" in get_workload(name).defaults else []


def devicebench_samples_per_s(
    name: str, device: str, steps: int, epochs: int, seed: int, mode: str, threads: int | None
) -> list[float]:
    """Steady-state samples/s of each epoch after the first, from devicebench's Python API in this process."""
    common: dict[str, Any] = dict(
        devices=device, epochs=epochs, max_steps=steps, max_eval_steps=1, seed=seed, mode=mode, threads=threads
    )
    if name == LINEAR:
        result = devicebench.run(
            model=linear_16_16_4, data=linear_data(), batch_size=LINEAR_BATCH, progress=False, **common
        )
    else:
        config = devicebench.RunConfig(
            workloads=(name,), data="synthetic", overrides=tuple(same_work(name)[1::2]), **common
        )
        result = devicebench.run(config)
    (run,) = result.runs
    if run.status != "ok":
        raise RuntimeError(f"devicebench {mode} run of {name} ended {run.status}: {run.error}")
    return [epoch.samples_per_s for epoch in run.steady_epochs]


def devicebench_samples_per_s_in_new_process(
    name: str, device: str, steps: int, epochs: int, seed: int, mode: str, threads: int | None
) -> list[float]:
    """Steady-state samples/s of each epoch after the first, from `devicebench run` as a user runs it."""
    if name == LINEAR:  # the model and data by MODULE:FUNCTION, imported from this folder (the command's)
        what = ["--model", "engine_vs_plain:linear_16_16_4", "--data", "engine_vs_plain:linear_data"]
        what += ["--batch-size", str(LINEAR_BATCH)]
    else:
        what = [name, "--data", "synthetic", *same_work(name)]
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "result.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "devicebench",
                "run",
                *what,
                "--mode",
                mode,
                # tuned mode's default on a GPU compiles every candidate with inductor (20-40 s each): the graph and
                # the precisions are what this benchmark asks of it
                *(["--compile", "off"] if mode == "tuned" else []),
                "--devices",
                device,
                "--epochs",
                str(epochs),
                "--max-steps",
                str(steps),
                "--max-eval-steps",
                "1",
                "--seed",
                str(seed),
                *(["--threads", str(threads)] if threads else []),
                "--quiet",
                "--json",
                str(output),
                "--db",
                str(Path(folder) / "db.sqlite"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=Path(__file__).parent,
        )
        result = json.loads(output.read_text())
    run = result["runs"][0]
    if run["status"] != "ok":
        raise RuntimeError(f"devicebench {mode} run of {name} ended {run['status']}: {run['error']}")
    return [epoch["samples_per_s"] for epoch in run["epochs"] if epoch["phase"] == "steady"]


def measure(side: str, name: str, arguments: argparse.Namespace) -> list[float]:
    fresh = arguments.fresh_processes or side == "tuned"  # its allocator settings would outlive it in this process
    common = (name, arguments.device, arguments.steps, arguments.epochs, arguments.seed)
    if side in ("seed", "tuned"):
        measure_devicebench = devicebench_samples_per_s_in_new_process if fresh else devicebench_samples_per_s
        return measure_devicebench(*common, side, arguments.threads)
    if not fresh:
        return plain_samples_per_s(name, side, torch.device(arguments.device), *common[2:])
    completed = subprocess.run(
        [
            sys.executable,
            __file__,
            name,
            "--plain-worker",
            side,
            "--device",
            arguments.device,
            "--steps",
            str(arguments.steps),
            "--epochs",
            str(arguments.epochs),
            "--seed",
            str(arguments.seed),
            *(["--threads", str(arguments.threads)] if arguments.threads else []),
        ],
        capture_output=True,
        text=True,
    )
    if completed.returncode == SKIPPED_EXIT:
        raise Skipped(completed.stdout.strip())
    completed.check_returncode()
    return json.loads(completed.stdout)


SKIPPED_EXIT = 3  # a plain worker's exit status for a side that cannot run on its device


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", help=f"workload names, e.g. mnist-cnn2 cifar10-mlp, or {LINEAR}")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run, the first being warm-up")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each side runs once per round")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"which of {', '.join(SIDES)} to run")
    parser.add_argument("--threads", type=int, help="torch intra-op threads of every side (default: torch's own)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fresh-processes",
        action="store_true",
        help="run every measurement in a new process (devicebench through its command line)",
    )
    parser.add_argument("--output", type=Path, help="JSON file (default: results/engine-vs-plain-<hardware>.json)")
    parser.add_argument("--plain-worker", choices=PLAIN_SIDES, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    if arguments.plain_worker:  # one plain run in this fresh process: its rates on stdout
        try:
            rates = plain_samples_per_s(
                arguments.workloads[0],
                arguments.plain_worker,
                torch.device(arguments.device),
                arguments.steps,
                arguments.epochs,
                arguments.seed,
            )
        except Skipped as skipped:
            print(skipped)
            sys.exit(SKIPPED_EXIT)
        print(json.dumps(rates))
        return
    sides = [side.strip() for side in arguments.sides.split(",") if side.strip()]
    if unknown := set(sides) - set(SIDES):
        parser.error(f"unknown sides {sorted(unknown)}; choose from {', '.join(SIDES)}")
    hardware = device_name(torch.device(arguments.device))
    where = (
        "a fresh process per measurement" if arguments.fresh_processes else "tuned in a fresh process, the rest here"
    )
    print(
        f"{hardware}: torch {torch.__version__}, {torch.get_num_threads()} threads; {arguments.rounds} rounds of "
        f"{arguments.epochs} epochs x {arguments.steps} steps, {where}"
    )
    for side in sides:
        print(f"  {side}: {HOST_WORK[side]}")
    isolation = "fresh-processes" if arguments.fresh_processes else "one-process"
    output = arguments.output or RESULTS / (
        f"engine-vs-plain-{slug(hardware)}-{arguments.device.replace(':', '')}-{isolation}.json"
    )
    machine = machine_fingerprint()
    measured: dict[str, dict[str, list[float]]] = {}
    skipped: dict[str, str] = {}
    for name in arguments.workloads:
        rounds: dict[str, list[float]] = measured.setdefault(name, {})
        for round_index in range(arguments.rounds):
            order = sides[round_index % len(sides) :] + sides[: round_index % len(sides)]  # each side first in turn
            for side in order:
                if side in skipped:
                    continue
                try:
                    rates = measure(side, name, arguments)
                except Skipped as reason:
                    skipped[side] = str(reason)
                    print(f"  {side} skipped: {reason}")
                    continue
                rounds.setdefault(side, []).append(statistics.median(rates))
                write(output, arguments, machine, hardware, isolation, sides, measured, skipped)  # kept if stopped
        print_workload(name, subject(name).batch_size, rounds)
    write(output, arguments, machine, hardware, isolation, sides, measured, skipped)
    print(f"written to {output}")


def write(
    output: Path,
    arguments: argparse.Namespace,
    machine: dict[str, Any],
    hardware: str,
    isolation: str,
    sides: list[str],
    measured: dict[str, dict[str, list[float]]],
    skipped: dict[str, str],
) -> None:
    """The results so far, as JSON: written after every measurement, whole or not at all (a stop mid-write leaves
    the last whole file)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    partial.write_text(
        json.dumps(
            {
                "benchmark": "engine_vs_plain",
                "command": " ".join(["python", "benchmarks/engine_vs_plain.py", *sys.argv[1:]]),
                "device": arguments.device,
                "device_name": hardware,
                "isolation": isolation,
                "machine": machine,
                "threads": torch.get_num_threads(),
                "steps": arguments.steps,
                "epochs": arguments.epochs,
                "rounds": arguments.rounds,
                "host_work": {side: HOST_WORK[side] for side in sides},
                "skipped": skipped,  # side → why it could not run here
                "samples_per_s": measured,  # workload → side → the median steady samples/s of each round
                "reference": {name: reference(rounds) for name, rounds in measured.items()},
                "ratio_to_reference": {name: ratios(rounds, reference(rounds)) for name, rounds in measured.items()},
                "ratio_to_plain": {name: ratios(rounds, "plain") for name, rounds in measured.items()},
            },
            indent=2,
        )
        + "\n"
    )
    partial.replace(output)


def reference(rounds: dict[str, list[float]]) -> str | None:
    """The side the others are compared with: `plain-resident`, else `plain`, whichever was measured first."""
    return next((side for side in REFERENCES if side in rounds), None)


def ratios(rounds: dict[str, list[float]], base_side: str | None) -> dict[str, dict[str, float]]:
    """Each side against `base_side`: the ratio of medians, and the range of the same-round ratios."""
    if base_side not in rounds:
        return {}
    base = rounds[base_side]
    return {
        side: {
            "median": statistics.median(rates) / statistics.median(base),
            "min": min(rate / against for rate, against in zip(rates, base)),
            "max": max(rate / against for rate, against in zip(rates, base)),
        }
        for side, rates in rounds.items()
    }


def print_workload(name: str, batch_size: int, rounds: dict[str, list[float]]) -> None:
    base_side = reference(rounds)
    versus = ratios(rounds, base_side)
    print(f"\n{name} (batch {batch_size})")
    print(f"  {'side':<15} {'samples/s: median [min–max]':>30}  {f'vs {base_side} [range]':>26}")
    for side, rates in rounds.items():
        ratio = versus.get(side)
        against = f"{ratio['median']:.2f}x [{ratio['min']:.2f}–{ratio['max']:.2f}]" if ratio else "—"
        text = f"{statistics.median(rates):,.0f} [{min(rates):,.0f}–{max(rates):,.0f}]"
        step_us = 1e6 * batch_size / statistics.median(rates)
        print(f"  {side:<15} {text:>30}  {against:>26}  {step_us:,.0f} µs a step")


def slug(text: str) -> str:
    words = "".join(character if character.isalnum() else " " for character in text.lower()).split()
    return "-".join(word for word in words if word not in ("r", "tm", "processor", "cpu")) or platform.machine()


if __name__ == "__main__":
    main()
