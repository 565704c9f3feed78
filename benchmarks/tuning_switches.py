"""Does tuned mode's layout switch (`channels_last`) or its fused optimizer step ever make a step slower on a device?

On a CPU tuned mode trials both, off and on, and keeps one only where it beats the plainest beyond the spread
(engine/tuning.py, issue 33). On a GPU it keeps both on without a trial. This benchmark runs tuned mode's trial
with both switches offered, off and on, on any device, as a real `devicebench run --mode tuned --compile off`
(synthetic data, augmentation off so that the loader cannot hide the step), and prints, for each workload and
precision, each option's median samples/s with its range over the trial's rounds, and which option the trial kept.
Its JSON is the evidence for keeping the switches untried on a device kind, or for trialling them there too.

    python benchmarks/tuning_switches.py catdog-original cifar10-cnn mnist-cnn2 --device cuda --precisions fp32,bf16
    python benchmarks/tuning_switches.py mnist-cnn2 --device cpu --precisions fp32 --output /tmp/switches.json
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
from pathlib import Path
from unittest import mock

import devicebench
from devicebench import session_choices
from devicebench.config import ConfigError, RunConfig
from devicebench.engine.tuning import candidates
from devicebench.environment import machine_fingerprint
from devicebench.workloads import get_workload

DEFAULT_WORKLOADS = ("catdog-original", "cifar10-cnn", "mnist-cnn2", "cifar10-mlp")


def trial(name: str, device: str, precision: str, steps: int, seed: int) -> dict[str, object]:
    """One tuned run of `name` whose trial offers both switches off and on; what the trial measured and kept."""
    config = RunConfig(
        workloads=(name,),
        devices=device,
        data="synthetic",
        epochs=1,
        max_steps=steps,
        max_eval_steps=1,
        seed=seed,
        mode="tuned",
        precision=precision,
        compile="off",
        overrides=("augment=false",) if "augment" in get_workload(name).defaults else (),
    )
    every_switch = functools.partial(candidates, trial_switches=True)
    with mock.patch.object(session_choices, "candidates", every_switch):  # the one seam: what the trial offers
        (run,) = devicebench.run(config, progress=False).runs
    return {
        "workload": name,
        "precision": precision,
        "status": run.status,
        "error": run.error,
        "kept": {"channels_last": run.settings.channels_last, "fused_optimizer": run.settings.fused_optimizer},
        "trial": run.tuning_note,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=list(DEFAULT_WORKLOADS))
    parser.add_argument("--device", default="cuda", help="one device: cuda, cuda:1, cpu (default: cuda)")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated: fp32, bf16 (default: both)")
    parser.add_argument("--steps", type=int, default=20, help="training steps after the trial (default: 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, help="write the results here as JSON")
    arguments = parser.parse_args(argv)
    try:  # names or patterns, as `devicebench run` takes them, refused in its words
        named = [entry.name for entry in RunConfig(workloads=tuple(arguments.workloads)).selected_workloads()]
    except ConfigError as error:
        parser.error(str(error))
    if unknown := set(arguments.precisions.split(",")) - {"fp32", "bf16"}:
        parser.error(f"tuned mode trains fp32 or bf16, not {', '.join(sorted(unknown))}")
    results = []
    for name in named:
        for precision in arguments.precisions.split(","):
            result = trial(name, arguments.device, precision, arguments.steps, arguments.seed)
            results.append(result)
            kept = result["kept"]
            print(f"{name} {precision} ({result['status']}): {result['trial'] or result['error']}", flush=True)
            print(f"    kept channels_last={kept['channels_last']} fused_optimizer={kept['fused_optimizer']}")  # type: ignore[index]
    if arguments.output:
        machine = {"machine": machine_fingerprint(), "python": platform.python_version()}
        arguments.output.write_text(json.dumps({**machine, "device": arguments.device, "results": results}, indent=2))
    return 0 if all(result["status"] == "ok" for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
