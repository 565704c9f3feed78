"""Which runs share a row: what keeps them apart (the machine, its id and name; speed settings, the software that
ran them, the workload's definition), the words a row's label gives what sets it apart from its neighbours (and the
digits of its id that tell machines of one name apart), and what a row says when it pools runs whose definition was
never recorded.

The policy (docs/measurement.md, "Which runs share a row"): runs under different software (torch, its CUDA or
ROCm build, cuDNN, devicebench) or of different workload definitions are never pooled. Each gets a row of its own,
whose label names what sets it apart (`laptop/cpu (torch 2.11.0)`), as a setting does. A run stored before
definitions were recorded has none; it is not kept apart from the recorded ones, which would split one experiment
in two without a word, but joins the row of the same settings and software whose definition was recorded first
(the closest to it in time), and that row says so in its notes.

    python -c "from devicebench.results.pooling import software; print(software({'torch': '2.13.0'}, '0.4.0'))"
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from devicebench.results.schema import Result, RunRecord
from devicebench.results.speed_settings import (
    POOLED_APART,
    SAME_WORK_SETTINGS,
    SOFTWARE,
    SPEED_SETTINGS,
    TUNED_CHOICES,
    setting_text,
)


class Pooled(Protocol):
    """What `name_differences` reads and sets of a row (results/compare.py's Row)."""

    device: str
    settings: dict[str, Any]  # the speed settings, software and definition its runs share (POOLED_APART)
    differs_in: tuple[str, ...]
    machine: dict[str, Any]  # the fingerprint of the machine its runs came from
    id_digits: int  # of its machine id its label shows (id_digits_shown)

    @property
    def machine_id(self) -> str: ...

    @property
    def machine_name(self) -> str: ...  # as tables show it


ID_DIGITS_SHOWN = 6  # of a machine id, at least, after a name that two compared machines share
ID_MARK = "@"  # what a label puts between a machine's name and its id: a name holding it could pass for another's label


def machine_identity(machine: dict[str, Any]) -> tuple[str, str]:
    """A machine's id and its name ($DEVICEBENCH_MACHINE where it ran, else its hostname): two machines that claim
    one id under two names (a forged import) are two machines, never pooled."""
    return machine["machine_id"], machine.get("machine_name") or machine["hostname"]


def machine_label(machine: dict[str, Any], id_digits: int) -> str:
    """A machine's name as tables show it, with `id_digits` of its id where it must show (`vm@3f2a1b`)."""
    machine_id, name = machine_identity(machine)
    return f"{name}{ID_MARK}{machine_id[:id_digits]}" if id_digits else name


def same_machine(first: Pooled, second: Pooled) -> bool:
    return machine_identity(first.machine) == machine_identity(second.machine)


def id_digits_shown(name: str, ids: set[str]) -> int:
    """How many digits of its id a machine called `name` shows after it, among the compared machines of that name,
    whose ids are `ids`: none where it is the only one, else the fewest, ID_DIGITS_SHOWN or more, that tell the ids
    apart (`vm@3f2a1b`, longer where two start alike). A name holding ID_MARK always shows its id: `vm@3f2a1b`, a
    machine's name, must not pass for another machine's label."""
    if len(ids) == 1 and ID_MARK not in name:
        return 0
    digits = ID_DIGITS_SHOWN
    while len({machine_id[:digits] for machine_id in ids}) < len(ids) and digits < max(map(len, ids)):
        digits += 1
    return digits


def names_machine(spec: str, row: Pooled) -> bool:
    """Whether `spec`, the MACHINE of `--baseline MACHINE/DEVICE`, names `row`'s machine: its label as tables show
    it, its whole id, or its name and the start of its id (`vm@3f2a1b0e`, ID_DIGITS_SHOWN digits or more)."""
    machine_id, name = machine_identity(row.machine)
    spec_name, mark, digits = spec.rpartition(ID_MARK)
    return spec in (row.machine_name, machine_id) or (
        bool(mark) and spec_name == name and len(digits) >= ID_DIGITS_SHOWN and machine_id.startswith(digits)
    )


PooledRow = TypeVar("PooledRow", bound=Pooled)


def software(machine: dict[str, Any], devicebench_version: str) -> dict[str, Any]:
    """The versions that keep runs apart, from a session's machine fingerprint (None where it holds none: a
    fingerprint from before a key was recorded, a torch without CUDA) and its devicebench version."""
    found = {name: machine.get(name) for name in SOFTWARE}
    found["devicebench"] = devicebench_version  # the session's own record; the fingerprint's copy may be absent
    return found


def run_settings(result: Result, run: RunRecord, pool_interrupted: bool = True) -> dict[str, Any]:
    """A run's speed settings and the software it ran under: what its row shares, but the definition; and unless
    `pool_interrupted`, whether it was interrupted: a run cut short (Ctrl-C, a stop) ran in conditions a finished one
    did not share, so it gets a row of its own (labelled `interrupted`) and is no finished row's baseline."""
    return {
        **{name: getattr(run.settings, name) for name in SPEED_SETTINGS},
        **software(result.machine, result.devicebench_version),
        "interrupted": run.status == "interrupted" and not pool_interrupted,
    }


def resolved_definitions(results: list[Result]) -> list[str | None]:
    """Per run, in order, the definition its row is keyed by: its own, or for a run that recorded none, the one
    first recorded by a run that shares all else (workload, machine, device, settings, software); None where none
    did."""
    pairs = [(run, _everything_but_the_definition(result, run)) for result in results for run in result.runs]
    first_recorded: dict[str, str] = {}
    for run, key in pairs:
        if run.definition is not None:
            first_recorded.setdefault(key, run.definition)
    return [run.definition if run.definition is not None else first_recorded.get(key) for run, key in pairs]


def _everything_but_the_definition(result: Result, run: RunRecord) -> str:
    identity = [run.workload, result.machine["machine_id"], run.device, run_settings(result, run)]
    return json.dumps(identity, sort_keys=True, default=repr)


def name_differences(rows: Sequence[Pooled]) -> None:
    """Give each row that shares (machine, device) with another the settings, software and definition in which
    they differ; a tuned-mode choice only where rows of the same mode differ in it (between a seed and a tuned row,
    `tuned` says it)."""
    siblings: dict[tuple[str, str], list[Pooled]] = {}
    for row in rows:
        siblings.setdefault((row.machine_id, row.device), []).append(row)
    for group in siblings.values():
        if len(group) < 2:
            continue
        by_mode: dict[str, list[Pooled]] = {}
        for row in group:
            by_mode.setdefault(row.settings["mode"], []).append(row)
        named = tuple(
            name
            for name in (*SPEED_SETTINGS, *POOLED_APART)
            if any(_varies(name, among) for among in (by_mode.values() if name in TUNED_CHOICES else [group]))
        )
        for row in group:
            row.differs_in = named


def _varies(name: str, rows: list[Pooled]) -> bool:
    return len({_text(row.settings[name]) for row in rows}) > 1


def unrecorded_note(definition: str | None, runs: list[RunRecord]) -> str:
    """For a row of a recorded definition that pools runs which recorded none, what it pools, in words; else ""."""
    unrecorded = sum(run.definition is None for run in runs)
    if definition is None or not unrecorded:
        return ""
    return (
        f"pools {unrecorded} of its {len(runs)} runs whose workload definition was not recorded (stored before "
        f"devicebench recorded definitions) with runs of {setting_text('definition', definition)}: they may have "
        "trained another version of the model"
    )


def same_work(first: Pooled, second: Pooled, apart_from: frozenset[str] = frozenset()) -> bool:
    """Whether `second` did `first`'s work, so that `first` may be set against it: the same SAME_WORK_SETTINGS (but
    `apart_from`, a tuned row's own precision and an auto batch's own size) and definition, and never a finished row
    against an interrupted one."""
    own_choice = {"precision", *apart_from} if first.settings["mode"] == "tuned" else set(apart_from)
    if first.settings["batch_size_auto"]:
        own_choice.add("batch_size")
    definitions = {first.settings["definition"], second.settings["definition"]} - {None}  # unknown: either
    return (
        len(definitions) < 2
        and (first.settings["interrupted"] or not second.settings["interrupted"])
        and all(first.settings[name] == second.settings[name] for name in SAME_WORK_SETTINGS if name not in own_choice)
    )


def closest(row: PooledRow, candidates: list[PooledRow]) -> PooledRow:
    """Of rows doing `row`'s work, the one to set it against: under the same software and as finished (or not) where
    there is one."""
    candidates = [other for other in candidates if not software_difference(row.settings, other.settings)] or candidates
    candidates = [other for other in candidates if other.settings["interrupted"] == row.settings["interrupted"]] or (
        candidates
    )
    for preferred in ("world_size", "max_steps", "threads"):  # one process (what scaling is measured against), then
        wanted = 1 if preferred == "world_size" else row.settings[preferred]  # the same length and threads
        candidates = [other for other in candidates if other.settings[preferred] == wanted] or candidates
    return candidates[0]


def own_choices(settings: dict[str, Any], baseline_settings: dict[str, Any]) -> str:
    """Where tuned mode or --batch-size auto let a row and its baseline each choose its own precision or batch, the
    two (`bf16 vs fp32, batch 1024 vs 64`), to say beside their speedup: each device at its best, not the same work;
    "" where they did the same."""
    return ", ".join(
        f"{'batch ' if name == 'batch_size' else ''}{settings[name]} vs {baseline_settings[name]}"
        for name in ("precision", "batch_size")
        if settings[name] != baseline_settings[name]
    )


def software_difference(settings: dict[str, Any], baseline_settings: dict[str, Any]) -> str:
    """How a baseline's software differs from a row's: `torch 2.11.0 (this row's torch 2.13.0)`; "" when alike."""
    differing = [name for name in SOFTWARE if _text(settings[name]) != _text(baseline_settings[name])]
    return ", ".join(
        f"{setting_text(name, baseline_settings[name])} (this row's {setting_text(name, settings[name])})"
        for name in differing
    )


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def no_baseline_note(spec: str, row: Pooled, rows: Sequence[Pooled], work: str) -> str:
    """Why `row` has no baseline under `--baseline spec` (MACHINE/DEVICE, or a DEVICE), doing `work`: none of that
    device on that machine (saying what to type where several machines share its name), or MACHINE names several
    (the start of an id they share) and picking one would be a guess."""
    machine, _, device = spec.rpartition("/")
    named = sorted({other.machine_name for other in rows if machine and names_machine(machine, other)})
    if len(named) > 1:
        return (
            f"no baseline: {machine} names {len(named)} machines ({', '.join(named)}); name one as the table does, "
            "or by its whole id"
        )
    where = f"on {machine or row.machine_name}"
    if any(machine_identity(other.machine)[1] == machine and other.machine_name != machine for other in rows):
        where += f" (several machines are called {machine}: name one as the table does, {machine}{ID_MARK}ID)"
    return f"no {device} run {where} with the same work ({work})"


def tell_machines_apart(rows: Sequence[Pooled]) -> None:
    """Set each row's id_digits (id_digits_shown) among the machines of `rows`."""
    ids_named: dict[str, set[str]] = {}
    for row in rows:
        machine_id, name = machine_identity(row.machine)
        ids_named.setdefault(name, set()).add(machine_id)
    for row in rows:
        name = machine_identity(row.machine)[1]
        row.id_digits = id_digits_shown(name, ids_named[name])
