"""devicebench against a plain PyTorch training loop over the same model, batch size and data.

The plain loop is what a user would write by hand: gather a batch of uint8 images, scale it, forward, loss,
backward, step; its clock is read (after a device synchronize) only at epoch boundaries, and its first epoch
is warm-up. It reads its own clock on purpose: it is the independent referee of devicebench's timing. Then
the same workload runs through `devicebench run` as a user would run it. Shared machines drift, and one process
can run several percent faster or slower than the next (memory placement), so each side runs in a fresh process
every round, the two alternate for several rounds (each going first in turn), and the medians over rounds are
compared, with their ranges. A ratio near 1.00 means devicebench adds no overhead of its own.

    python benchmarks/plain_loop.py cifar10-mlp mnist-cnn2 --device cpu --steps 150 --epochs 3 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from devicebench.data import load_dataset
from devicebench.devices import synchronize
from devicebench.workloads import get_workload


def plain_samples_per_s(name: str, device: torch.device, steps: int, epochs: int, seed: int) -> list[float]:
    """Steady-state samples/s of each epoch after the first, for a hand-written loop."""
    entry = get_workload(name)
    dataset = load_dataset(entry.dataset, "synthetic", seed=seed)
    images, labels = torch.from_numpy(dataset.train_images), torch.from_numpy(dataset.train_labels)
    batch_size = entry.defaults["batch_size"]
    torch.manual_seed(seed)
    model = entry.build_model(entry.defaults).to(device)
    loss_function = entry.build_loss().to(device)
    optimizer = entry.build_optimizer(model, entry.defaults)
    model.train()
    rates = []
    for epoch in range(epochs):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        synchronize(device)
        start = time.perf_counter()
        for step in range(steps):
            index = order[step * batch_size : (step + 1) * batch_size]
            x = (images[index].float() / 255).to(device)
            y = labels[index].to(device)
            loss = loss_function(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        synchronize(device)
        if epoch > 0:  # the first epoch is warm-up, as in devicebench
            rates.append(steps * batch_size / (time.perf_counter() - start))
    return rates


def plain_samples_per_s_in_new_process(name: str, device: str, steps: int, epochs: int, seed: int) -> list[float]:
    completed = subprocess.run(
        [sys.executable, __file__, name, "--plain-worker", "--device", device, "--steps", str(steps),
         "--epochs", str(epochs), "--seed", str(seed)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(completed.stdout)


def devicebench_samples_per_s(name: str, device: str, steps: int, epochs: int, seed: int) -> list[float]:
    """Steady-state samples/s of each epoch after the first, from `devicebench run` as a user runs it."""
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "result.json"
        subprocess.run(
            [sys.executable, "-m", "devicebench", "run", name, "--devices", device, "--data", "synthetic",
             "--epochs", str(epochs), "--max-steps", str(steps), "--max-eval-steps", "1", "--seed", str(seed),
             "--quiet", "--json", str(output)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        result = json.loads(output.read_text())
    return [epoch["samples_per_s"] for run in result["runs"] for epoch in run["epochs"] if epoch["phase"] == "steady"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", help="workload names, e.g. cifar10-mlp mnist-cnn2")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    parser.add_argument("--steps", type=int, default=150, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run, the first being warm-up")
    parser.add_argument("--rounds", type=int, default=5, help="alternating plain/devicebench rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain-worker", action="store_true", help=argparse.SUPPRESS)  # one plain run, JSON out
    arguments = parser.parse_args()
    if arguments.plain_worker:
        rates = plain_samples_per_s(arguments.workloads[0], torch.device(arguments.device), arguments.steps,
                                    arguments.epochs, arguments.seed)
        print(json.dumps(rates))
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {arguments.device}, "
          f"{arguments.rounds} rounds of {arguments.epochs} epochs x {arguments.steps} steps")
    print(f"{'workload':<13} {'batch':>5}  {'plain samples/s':>24}  {'devicebench samples/s':>24}  {'ratio':>5}")
    for name in arguments.workloads:
        measure = {"plain": plain_samples_per_s_in_new_process, "devicebench": devicebench_samples_per_s}
        rounds: dict[str, list[float]] = {"plain": [], "devicebench": []}
        for round_index in range(arguments.rounds):
            order = ["plain", "devicebench"] if round_index % 2 == 0 else ["devicebench", "plain"]  # each first in turn
            for side in order:
                rates = measure[side](name, arguments.device, arguments.steps, arguments.epochs, arguments.seed)
                rounds[side].append(statistics.median(rates))
        plain, measured = rounds["plain"], rounds["devicebench"]
        batch_size = get_workload(name).defaults["batch_size"]
        print(f"{name:<13} {batch_size:>5}  {_median_range(plain):>24}  {_median_range(measured):>24}  "
              f"{statistics.median(measured) / statistics.median(plain):>5.3f}")


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}–{max(values):,.0f}]"


if __name__ == "__main__":
    main()
