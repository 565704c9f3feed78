"""Each workload's definition fingerprint on this machine, and what it hashes: run it on two machines (or two torch
versions) and compare, to see whether their runs would pool (results/pooling.py) or split on the definition.

A run records its workload's definition fingerprint (workloads/definition.py): the module tree and each module's
plain settings, how the weights were initialised (each nn.init call and in-place write, with its arguments), the
loss, the optimizer and a preprocessing probe. Runs pool only where it matches, so it must depend on the workload's
code alone, not on the torch version or the CPU's kernels. Measured: the first kind (which hashed the initial
weights' statistics) differed for 5 of the 13 seed workloads between torch 2.11 (an H200, and a venv here) and
2.13; this kind differs for none, and is the same under ATEN_CPU_CAPABILITY=avx2 as with AVX-512.

    python benchmarks/definitions.py --output /tmp/here.json
    python benchmarks/definitions.py --compare /tmp/here.json /tmp/there.json    # which differ, and in what
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from devicebench.config import ConfigError, RunConfig
from devicebench.workloads import get_workload, list_workloads
from devicebench.workloads.definition import describe_definition, fingerprint_of


def definitions(names: list[str]) -> dict[str, object]:
    """Each workload's fingerprint and the data it hashes, and the torch they were made with."""
    described = {}
    for name in names:
        made = describe_definition(get_workload(name))  # each model built once: bert-large takes seconds
        described[name] = {
            "fingerprint": fingerprint_of(made),
            "described": json.loads(json.dumps(made, sort_keys=True, default=repr)),
        }
    return {"torch": torch.__version__, "workloads": described}


def differences(here: dict, there: dict) -> list[str]:
    """One line per workload whose fingerprint differs, naming the first parts of its definition that do."""
    lines = []
    for name in sorted(set(here["workloads"]) & set(there["workloads"])):
        ours, theirs = here["workloads"][name], there["workloads"][name]
        if ours["fingerprint"] != theirs["fingerprint"]:
            parts = [key for key in ours["described"] if ours["described"][key] != theirs["described"].get(key)]
            lines.append(f"{name}: {ours['fingerprint']} != {theirs['fingerprint']}; differs in {', '.join(parts)}")
    return lines


def _written(path: Path, parser: argparse.ArgumentParser) -> dict:
    """A file this script wrote with --output; a usage error for one it cannot read."""
    try:
        made = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        parser.error(f"{path} cannot be read ({error}): give two files written with --output")
    if not isinstance(made, dict) or "workloads" not in made or "torch" not in made:
        parser.error(f"{path} is not a file written with --output")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help="default: every workload of the suites (no reference model)")
    parser.add_argument("--output", type=Path, help="write the fingerprints and what they hash here as JSON")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("HERE", "THERE"), help="two files it wrote")
    arguments = parser.parse_args(argv)
    try:  # names or patterns, as `devicebench run` takes them, refused in its words
        named = [entry.name for entry in RunConfig(workloads=tuple(arguments.workloads)).selected_workloads()]
    except ConfigError as error:
        parser.error(str(error))
    if arguments.compare:
        here, there = (_written(path, parser) for path in arguments.compare)
        lines = differences(here, there)
        print(f"torch {here['torch']} against {there['torch']}: {len(lines)} definitions differ")
        print("\n".join(lines))
        return 1 if lines else 0
    names = named if arguments.workloads else [entry.name for entry in list_workloads() if entry.in_suites]
    made = definitions(names)
    for name, entry in made["workloads"].items():  # type: ignore[attr-defined]
        print(f"{name:20} {entry['fingerprint']}")
    if arguments.output:
        arguments.output.write_text(json.dumps(made, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
