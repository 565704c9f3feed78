"""devicebench seed and tuned mode against the plain PyTorch loops a user would write, on the same device.

Four sides, per workload, at the seed's batch size on the same synthetic data:
- `plain`: what a user writes by hand: the images scaled to float once, a DataLoader over a TensorDataset
  (shuffled), eager fp32 forward, loss, backward, step. Its clock is read (after a device synchronize) only at
  epoch boundaries: it is the independent referee of devicebench's timing, so it reads its own clock.
- `plain-compile`: the same loop with `torch.compile(model)`.
- `seed`, `tuned`: `devicebench run --mode seed|tuned`, as a user runs it, steady-state samples/s from its JSON.

The first epoch of every side is warm-up (compilation, allocation) and is left out. The sides alternate (a
different one first each round) over several rounds; medians over rounds are compared, with the range of the
per-round ratios. Augmentation is turned off (`--set augment=false`) where a workload has it, so that every side
does the same work.

By default `plain`, `plain-compile` and `seed` run in this one process (devicebench through its Python API,
`devicebench.run`), so they share one allocator and one memory layout: their ratios are the harness's overhead
and nothing else. `tuned` always runs in a fresh process (devicebench through its command line): it sets glibc's
allocator thresholds, and glibc cannot be put back to its moving thresholds afterwards, nor made to drop the
freed blocks it kept, so every side measured after it in the same process would run faster than it otherwise
would (on this VM: the plain loop on cifar10-mlp went from 1,050 to 2,170 samples/s). `--fresh-processes` runs
every measurement in a new process: closer to how each is really used, but each process then starts glibc from
a different history, which moves an MLP's step time by ~10% either way.

    python benchmarks/engine_vs_plain.py mnist-cnn2 cifar10-mlp catdog-original --device cpu --rounds 3
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
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import devicebench
from devicebench.data import load_dataset
from devicebench.devices import device_name, synchronize
from devicebench.environment import machine_fingerprint
from devicebench.workloads import get_workload

SIDES = ("plain", "plain-compile", "seed", "tuned")
RESULTS = Path(__file__).resolve().parents[1] / "results"


def plain_samples_per_s(
    name: str, device: torch.device, steps: int, epochs: int, seed: int, compiled: bool
) -> list[float]:
    """Steady-state samples/s of each epoch after the first, for a hand-written loop."""
    entry = get_workload(name)
    dataset = load_dataset(entry.dataset, "synthetic", seed=seed, **entry.data_request(entry.defaults))
    images = torch.from_numpy(dataset.train_images).float() / 255  # scaled once, as a user would
    labels = torch.from_numpy(dataset.train_labels)
    batch_size = entry.defaults["batch_size"]
    loader = DataLoader(
        TensorDataset(images, labels),
        batch_size=batch_size,
        shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    torch.manual_seed(seed)
    model = entry.build_model(entry.defaults).to(device)
    loss_function = entry.build_loss().to(device)
    optimizer = entry.build_optimizer(model, entry.defaults)
    forward = torch.compile(model) if compiled else model
    model.train()
    rates = []
    for epoch in range(epochs):
        synchronize(device)
        start = time.perf_counter()
        for step, (x, y) in enumerate(loader):
            if step == steps:
                break
            x, y = x.to(device), y.to(device)
            loss = loss_function(forward(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        synchronize(device)
        if epoch > 0:  # the first epoch is warm-up, as in devicebench
            rates.append(steps * batch_size / (time.perf_counter() - start))
    return rates


def devicebench_samples_per_s(name: str, device: str, steps: int, epochs: int, seed: int, mode: str) -> list[float]:
    """Steady-state samples/s of each epoch after the first, from devicebench's Python API in this process."""
    config = devicebench.RunConfig(
        workloads=(name,),
        devices=device,
        data="synthetic",
        epochs=epochs,
        max_steps=steps,
        max_eval_steps=1,
        seed=seed,
        mode=mode,
        overrides=tuple(same_work(name)[1::2]),
    )
    (run,) = devicebench.run(config).runs
    if run.status != "ok":
        raise RuntimeError(f"devicebench {mode} run of {name} ended {run.status}: {run.error}")
    return [epoch.samples_per_s for epoch in run.steady_epochs]


def same_work(name: str) -> list[str]:
    """The `--set` flags that make devicebench do what the plain loop does: no augmentation."""
    return ["--set", "augment=false"] if "augment" in get_workload(name).defaults else []


def devicebench_samples_per_s_in_new_process(
    name: str, device: str, steps: int, epochs: int, seed: int, mode: str
) -> list[float]:
    """Steady-state samples/s of each epoch after the first, from `devicebench run` as a user runs it."""
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "result.json"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "devicebench",
                "run",
                name,
                "--mode",
                mode,
                "--devices",
                device,
                "--data",
                "synthetic",
                "--epochs",
                str(epochs),
                "--max-steps",
                str(steps),
                "--max-eval-steps",
                "1",
                "--seed",
                str(seed),
                *same_work(name),
                "--quiet",
                "--json",
                str(output),
                "--db",
                str(Path(folder) / "db.sqlite"),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        result = json.loads(output.read_text())
    run = result["runs"][0]
    if run["status"] != "ok":
        raise RuntimeError(f"devicebench {mode} run of {name} ended {run['status']}: {run['error']}")
    return [epoch["samples_per_s"] for epoch in run["epochs"] if epoch["phase"] == "steady"]


def measure(side: str, name: str, device: str, steps: int, epochs: int, seed: int, fresh: bool) -> list[float]:
    fresh = fresh or side == "tuned"  # its allocator settings would outlive it in this process
    if side in ("seed", "tuned"):
        measure_devicebench = devicebench_samples_per_s_in_new_process if fresh else devicebench_samples_per_s
        return measure_devicebench(name, device, steps, epochs, seed, side)
    if not fresh:
        return plain_samples_per_s(name, torch.device(device), steps, epochs, seed, side == "plain-compile")
    completed = subprocess.run(
        [
            sys.executable,
            __file__,
            name,
            "--plain-worker",
            side,
            "--device",
            device,
            "--steps",
            str(steps),
            "--epochs",
            str(epochs),
            "--seed",
            str(seed),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", help="workload names, e.g. mnist-cnn2 cifar10-mlp catdog-original")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    parser.add_argument("--steps", type=int, default=100, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run, the first being warm-up")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each side runs once per round")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"which of {', '.join(SIDES)} to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fresh-processes",
        action="store_true",
        help="run every measurement in a new process (devicebench through its command line)",
    )
    parser.add_argument("--output", type=Path, help="JSON file (default: results/engine-vs-plain-<hardware>.json)")
    parser.add_argument("--plain-worker", choices=("plain", "plain-compile"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.plain_worker:  # one plain run in this fresh process: its rates on stdout
        rates = plain_samples_per_s(
            arguments.workloads[0],
            torch.device(arguments.device),
            arguments.steps,
            arguments.epochs,
            arguments.seed,
            arguments.plain_worker == "plain-compile",
        )
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
    measured: dict[str, dict[str, list[float]]] = {}
    for name in arguments.workloads:
        rounds: dict[str, list[float]] = {side: [] for side in sides}
        for round_index in range(arguments.rounds):
            order = sides[round_index % len(sides) :] + sides[: round_index % len(sides)]  # each side first in turn
            for side in order:
                rates = measure(
                    side,
                    name,
                    arguments.device,
                    arguments.steps,
                    arguments.epochs,
                    arguments.seed,
                    arguments.fresh_processes,
                )
                rounds[side].append(statistics.median(rates))
        measured[name] = rounds
        print_workload(name, rounds)
    isolation = "fresh-processes" if arguments.fresh_processes else "one-process"
    output = arguments.output or RESULTS / (
        f"engine-vs-plain-{slug(hardware)}-{arguments.device.replace(':', '')}-{isolation}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        json.dumps(
            {
                "benchmark": "engine_vs_plain",
                "command": " ".join(["python", "benchmarks/engine_vs_plain.py", *sys.argv[1:]]),
                "device": arguments.device,
                "device_name": hardware,
                "isolation": isolation,
                "machine": machine_fingerprint(),
                "steps": arguments.steps,
                "epochs": arguments.epochs,
                "rounds": arguments.rounds,
                "samples_per_s": measured,  # workload → side → the median steady samples/s of each round
                "ratio_to_plain": {name: ratios(rounds) for name, rounds in measured.items()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {output}")


def ratios(rounds: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each side against `plain`: the ratio of medians, and the range of the same-round ratios."""
    if "plain" not in rounds:
        return {}
    plain = rounds["plain"]
    return {
        side: {
            "median": statistics.median(rates) / statistics.median(plain),
            "min": min(rate / base for rate, base in zip(rates, plain)),
            "max": max(rate / base for rate, base in zip(rates, plain)),
        }
        for side, rates in rounds.items()
    }


def print_workload(name: str, rounds: dict[str, list[float]]) -> None:
    entry = get_workload(name)
    versus = ratios(rounds)
    print(f"\n{name} (batch {entry.defaults['batch_size']})")
    print(f"  {'side':<14} {'samples/s: median [min–max]':>30}  {'vs plain [range]':>22}")
    for side, rates in rounds.items():
        ratio = versus.get(side)
        against = f"{ratio['median']:.2f}x [{ratio['min']:.2f}–{ratio['max']:.2f}]" if ratio else "—"
        text = f"{statistics.median(rates):,.0f} [{min(rates):,.0f}–{max(rates):,.0f}]"
        print(f"  {side:<14} {text:>30}  {against:>22}")


def slug(text: str) -> str:
    words = "".join(character if character.isalnum() else " " for character in text.lower()).split()
    return "-".join(word for word in words if word not in ("r", "tm", "processor", "cpu")) or platform.machine()


if __name__ == "__main__":
    main()
