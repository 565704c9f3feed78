"""devicebench against a plain PyTorch training loop over the same model, batch size and data.

The plain loop is what a user would write by hand: gather a batch of uint8 images, scale it, forward, loss,
backward, step; its clock is read (after a device synchronize) only at epoch boundaries, and its first epoch
is warm-up. It reads its own clock on purpose: it is the independent referee of devicebench's timing. Then
the same workload runs through `devicebench run` as a user would run it, and the two steady-state throughputs
are printed side by side. A ratio near 1.00 means devicebench adds no overhead of its own.

    python benchmarks/plain_loop.py cifar10-mlp mnist-cnn2 --device cpu --steps 200 --epochs 4
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
    optimizer = entry.build_optimizer(model.parameters(), entry.defaults)
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
        )
        result = json.loads(output.read_text())
    return [epoch["samples_per_s"] for run in result["runs"] for epoch in run["epochs"] if epoch["phase"] == "steady"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", help="workload names, e.g. cifar10-mlp mnist-cnn2")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    parser.add_argument("--steps", type=int, default=200, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="epochs, the first being warm-up")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {arguments.device}")
    print(f"{'workload':<14} {'batch':>5} {'plain samples/s':>16} {'devicebench samples/s':>22} {'ratio':>6}")
    for name in arguments.workloads:
        plain = plain_samples_per_s(name, torch.device(arguments.device), arguments.steps, arguments.epochs,
                                    arguments.seed)
        measured = devicebench_samples_per_s(name, arguments.device, arguments.steps, arguments.epochs,
                                             arguments.seed)
        plain_median, measured_median = statistics.median(plain), statistics.median(measured)
        batch_size = get_workload(name).defaults["batch_size"]
        print(f"{name:<14} {batch_size:>5} {plain_median:>16,.0f} {measured_median:>22,.0f} "
              f"{measured_median / plain_median:>6.3f}")


if __name__ == "__main__":
    main()
