"""Each seed experiment, re-run here and set beside what its post published.

`devicebench reproduce S2` trains the seed's workloads at their published settings (`--quick`: reduced) on the
local devices and prints, per workload, the post's hardware, throughput, speedup and accuracy next to the same
figures measured here. Published numbers come from each workload's `published` data, nowhere else.

    devicebench reproduce S1 --quick --devices cpu
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from devicebench.errors import DevicebenchError
from devicebench.results.compare import Row
from devicebench.results.record import PublishedFigure, published_figures
from devicebench.workloads import (
    SEED_EXPERIMENTS,
    Published,
    Workload,
    get_workload,
    list_workloads,
)


class ReproduceError(DevicebenchError, ValueError):
    """A seed that cannot be reproduced; the message names the seeds that can."""


def _wanted(asked: list[str]) -> list[str]:
    """Seed ids as written in SEEDS.md, in the order asked, leaving out reference models named; "all" means every
    seed."""
    if any(item.lower() == "all" for item in asked):
        return list(SEED_EXPERIMENTS)
    references = {entry.name for entry in reference_workloads()}
    return [item.upper() for item in asked if item.lower() not in references]


def seed_workloads(asked: list[str]) -> list[Workload]:
    """The workloads of the given seed ids ("S1", "s2", or "all"), in registry order, then the reference models
    named ("resnet50": a workload the record has published figures of), in the order asked."""
    wanted = set(_wanted(asked))
    references = {entry.name: entry for entry in reference_workloads()}
    unknown = wanted - set(SEED_EXPERIMENTS)
    if unknown:
        raise ReproduceError(
            f"unknown seed experiment {', '.join(sorted(unknown))}; known: "
            f"{', '.join(SEED_EXPERIMENTS)} or all; reference models: "
            f"{', '.join(references) or 'none'}"
        )
    named = list(dict.fromkeys(references[item.lower()] for item in asked if item.lower() in references))
    selected = [entry for entry in list_workloads() if entry.seed in wanted] + named
    if not selected:
        available = sorted({entry.seed for entry in list_workloads() if entry.seed})
        raise ReproduceError(
            f"{', '.join(sorted(wanted))} has no workloads in this version of devicebench yet; "
            f"seeds with workloads: {', '.join(available)}"
        )
    return selected


def seeds_without_workloads(asked: list[str]) -> list[str]:
    """Which of the asked-for seeds (or all) have no workloads yet, to say so instead of staying silent."""
    covered = {entry.seed for entry in list_workloads()}
    return [seed for seed in _wanted(asked) if seed not in covered]


@dataclass(frozen=True)
class Reproduction:
    """One workload: the post's figures and ours, side by side."""

    workload: Workload
    published: Published
    measured_hardware: str  # the devices measured here
    measured_cpu_samples_per_s: float | None
    measured_gpu_samples_per_s: float | None  # the fastest accelerator measured here
    measured_speedup: float | None  # steady samples/s, fastest accelerator over the CPU
    measured_end_to_end_ratio: float | None  # CPU end-to-end time over the accelerator's, as S4 timed it
    measured_accuracy: float | None  # of the kind the post quoted (test or train), best device
    data_sources: str
    outlook: str | None = None  # what the post's CPU and GPU figures say about this CPU (`published_outlook`)


def reproductions(rows_by_workload: dict[str, list[Row]]) -> list[Reproduction]:
    """The seeds' workloads among `rows_by_workload`: those with a post of their own (`published`)."""
    found = ((get_workload(name), rows) for name, rows in rows_by_workload.items())
    return [
        _reproduction(workload, workload.published, rows) for workload, rows in found if workload.published is not None
    ]


def _reproduction(workload: Workload, published: Published, rows: list[Row]) -> Reproduction:
    rows = finished_first(rows)
    cpu = next((row for row in rows if row.device == "cpu" and row.samples_per_s), None)
    accelerators = [
        row for row in rows if row.device != "cpu" and row.samples_per_s and not row.settings["interrupted"]
    ]
    fastest = max(accelerators, key=_steady_rate, default=None)
    speedup = _steady_rate(fastest) / _steady_rate(cpu) if cpu and fastest else None
    end_to_end = None
    if cpu and fastest and (cpu_end_to_end := cpu.end_to_end_s) and (fastest_end_to_end := fastest.end_to_end_s):
        end_to_end = cpu_end_to_end.median / fastest_end_to_end.median
    return Reproduction(
        workload=workload,
        published=published,
        measured_hardware=" vs ".join(dict.fromkeys(f"{row.device_name} ({row.device})" for row in rows)),
        measured_cpu_samples_per_s=_steady_rate(cpu) if cpu else None,
        measured_gpu_samples_per_s=_steady_rate(fastest) if fastest else None,
        measured_speedup=speedup,
        measured_end_to_end_ratio=end_to_end,
        measured_accuracy=_accuracy(rows, published.accuracy_kind),
        data_sources=", ".join(sorted({row.settings["data_source"] for row in rows})),
        outlook=rows_outlook(workload, rows),
    )


def _steady_rate(row: Row) -> float:
    """A row's median steady samples/s, asked only of rows that have steady epochs."""
    assert row.samples_per_s is not None  # every caller picks its rows for their samples/s first
    return row.samples_per_s.median


def _accuracy(rows: list[Row], kind: str) -> float | None:
    """The best final accuracy of the kind the post quoted, over every device measured here."""
    finals = []
    for row in rows:
        for run in row.runs:
            if run.epochs:
                last = run.epochs[-1]
                finals.append(last.train_accuracy if kind == "train" else last.test_accuracy)
    return max((value for value in finals if value is not None), default=None)


# --- what the post's figures say about this CPU ------------------------------------------------------------
# The simplest layer of a GPU estimate for a machine without one: where a post gave both its CPU's and its GPU's
# samples/s, this CPU's samples/s over the post's CPU's places this machine, and the post's GPU over this CPU is
# what that GPU would have given here. Only the post's own figures are used; nothing is guessed where it gave none.

FRAMEWORKS = ("Keras on TensorFlow", "Keras", "TensorFlow")  # as the seeds' `hardware` names them, longest first


def finished_first(rows: list[Row]) -> list[Row]:
    """`rows` with those of interrupted runs last: a run cut short answers only where nothing finished."""
    return sorted(rows, key=lambda row: row.settings["interrupted"])


def outlook_row(rows: list[Row]) -> Row | None:
    """The CPU row the post's figures are carried to: one with steady epochs, of finished runs and in seed mode (the
    post's settings) where there is one; None without a CPU row."""
    measured = [row for row in finished_first(rows) if row.device == "cpu" and row.samples_per_s]
    return next((row for row in measured if row.settings["mode"] == "seed"), measured[0] if measured else None)


def rows_outlook(workload: Workload, rows: list[Row]) -> str | None:
    """`published_outlook` for the CPU row among `rows` (`outlook_row`); None without one."""
    cpu = outlook_row(rows)
    if cpu is None or cpu.samples_per_s is None:  # outlook_row picks a row with steady samples/s, or none
        return None
    changed = changed_model(workload, [cpu])
    if changed and workload.published is not None:
        return (
            f"{workload.name}: the post measured the published model; this run set {', '.join(changed)}: none of "
            "the post's figures is set beside it."
        )
    return published_outlook(
        workload,
        cpu.samples_per_s.median,
        cpu.settings["batch_size"],
        cpu.settings["data_source"],
        max_steps=cpu.settings["max_steps"],
        precision=row_precision(cpu),
    )


def post_figures(workload: Workload) -> tuple[float, float] | None:
    """The post's (CPU, GPU) samples/s, the GPU's from the CPU's and the speedup where the post gave no GPU figure;
    None where the post gave no CPU throughput, or nothing to find its GPU's with."""
    published = workload.published
    if published is None:
        return None
    post_cpu = published.samples_per_s.get("cpu")
    if post_cpu is None:
        return None
    post_gpu = published.samples_per_s.get("gpu")
    if post_gpu is None and published.speedup is not None:
        post_gpu = post_cpu * published.speedup
    return None if post_gpu is None else (post_cpu, post_gpu)


@dataclass(frozen=True)
class CarriedSpeedup:
    """The post's GPU over this CPU: the one number `published_outlook` ends on, with the range this CPU's own
    spread gives it (the post's figures are single numbers, with no spread to carry)."""

    ratio: float  # the post's GPU samples/s over this CPU's median steady samples/s
    low: float | None  # over this CPU's fastest steady epoch; None with a single steady epoch
    high: float | None  # over its slowest


def carried_speedup(workload: Workload, cpu: Row) -> CarriedSpeedup | None:
    """What the post's GPU would be over the CPU of row `cpu`; None where the post's figures cannot be carried."""
    figures, rates = post_figures(workload), cpu.samples_per_s
    if figures is None or rates is None or not rates.low > 0:
        return None
    post_gpu = figures[1]
    spread = rates.count > 1
    return CarriedSpeedup(
        post_gpu / rates.median, post_gpu / rates.high if spread else None, post_gpu / rates.low if spread else None
    )


def published_outlook(
    workload: Workload,
    measured_cpu_samples_per_s: float,
    measured_batch_size: int | None,
    data_source: str,
    *,
    max_steps: int | None = None,
    precision: str = "fp32",
) -> str | None:
    """One or two sentences: this CPU against the post's, and the post's GPU against this CPU, with what makes the
    comparison rough (framework, hardware of its day, batch size, synthetic data, capped epochs) and, in the same
    clause, why the post's GPU over this CPU is no speedup where the two did other work (`unlike`). None where the
    post published nothing to compare with."""
    published = workload.published
    if published is None or not measured_cpu_samples_per_s > 0:
        return None
    here = f"{workload.name}: this CPU ran {_samples_text(measured_cpu_samples_per_s)} samples/s"
    post_cpu = published.samples_per_s.get("cpu")
    if post_cpu is None:
        if published.speedup is None:
            return None
        return f"{here}; the post gave no CPU throughput, so its {published.speedup:g}x cannot be carried to this CPU."
    figures = post_figures(workload)
    post_gpu = None if figures is None else figures[1]
    sentence = (
        f"{here}, {factor_text(measured_cpu_samples_per_s / post_cpu)} the post's CPU "
        f"({_samples_text(post_cpu)} samples/s)"
    )
    caveats = _caveats(workload, published, measured_batch_size, data_source, max_steps)
    if post_gpu is not None:
        difference = unlike([post_work(workload)], (measured_batch_size or 0, precision, data_source))
        carried = f"{factor_text(post_gpu / measured_cpu_samples_per_s)} this one"
        sentence += f"; the post's GPU was {factor_text(post_gpu / post_cpu)} its CPU, so about " + not_a_speedup(
            carried, difference
        )
        caveats.append(f"`devicebench estimate {workload.name}` predicts named GPUs")  # the finer layer
    return f"{sentence}. A rough guide: {'; '.join(caveats)}."


def _caveats(
    workload: Workload, published: Published, measured_batch_size: int | None, data_source: str, max_steps: int | None
) -> list[str]:
    framework = next((name for name in FRAMEWORKS if name in published.hardware), None)
    devices = published.hardware.removesuffix(f", {framework}") if framework else published.hardware
    caveats = [f"{framework or 'another framework'}, not PyTorch, on hardware of its day ({devices})"]
    post_batch = published.batch_size or workload.defaults.get("batch_size")
    if measured_batch_size is not None and post_batch is not None and measured_batch_size != post_batch:
        caveats.append(f"the post measured at batch {post_batch}, this run at {measured_batch_size}")
    if data_source == "synthetic":
        caveats.append("synthetic data (speeds are real)")
    if max_steps:
        caveats.append(f"epochs capped at {max_steps} steps")
    return caveats


def factor_text(value: float) -> str:
    """A ratio to two significant figures: `0.50x`, `3.3x`, `23x`, `230x`."""
    rounded = float(f"{value:.2g}")
    decimals = max(0, 1 - math.floor(math.log10(rounded))) if rounded > 0 else 0
    return f"{rounded:,.{decimals}f}x"


# --- like for like ---------------------------------------------------------------------------------------------
# A ratio of two throughputs is a speedup only where both did the same work: the same batch, precision and data. The
# posts trained in fp32 (Keras's default) on their real datasets; a record row says its own. Where they differ, the
# ratio is shown with the differences in the same line, never as a speedup.

POST_PRECISION = "fp32"  # what the seeds' posts trained in: Keras's default, none of them says otherwise
POST_DATA = "real"  # the posts trained on their datasets


def row_precision(row: Row) -> str:
    """A row's precision in the record's words: fp32, or amp-bf16 (autocast to bf16, as `--precision bf16` runs)."""
    return "amp-bf16" if row.settings["precision"] == "bf16" else "fp32"


def figure_precision(figure: PublishedFigure) -> str:
    """A record row's precision as it ran: its fp32 on TF32 tensor cores is TF32's arithmetic, not fp32's."""
    return "tf32" if figure.precision == "fp32" and figure.tf32 == "on" else figure.precision


def row_work(row: Row) -> tuple[int, str, str]:
    """The (batch, precision, data) `row`'s runs trained at."""
    return row.settings["batch_size"], row_precision(row), row.settings["data_source"]


def work_differences(there: list[tuple[int, str, str]], here: tuple[int, str, str]) -> dict[str, str]:
    """Where published figures, each (batch, precision, data), did other work than was done `here`, by kind:
    {"batch": "batch 32–256 there, 4 here", "precision": "amp-fp16 there, fp32 here"}; {} where every one did the
    same (or there are none)."""
    if not there:
        return {}
    batch, precision, data = here
    batches, precisions, sources = (sorted(set(values)) for values in zip(*there, strict=True))
    words = {}
    if batches != [batch]:
        span = f"{batches[0]:,}" if len(batches) == 1 else f"{batches[0]:,}–{batches[-1]:,}"
        words["batch"] = f"batch {span} there, {batch:,} here"
    if precisions != [precision]:
        words["precision"] = f"{'/'.join(precisions)} there, {precision} here"
    if sources != [data]:
        words["data"] = f"{'/'.join(sources)} data there, {data} here"
    return words


def unlike(there: list[tuple[int, str, str]], here: tuple[int, str, str]) -> str:
    """`work_differences` in one clause: `batch 32–256 there, 4 here; amp-fp16 there, fp32 here`; "" where alike."""
    return "; ".join(work_differences(there, here).values())


def not_a_speedup(ratio_text: str, difference: str) -> str:
    """`ratio_text`, followed in the same line by why it is no speedup where `difference` (`unlike`) says so."""
    return f"{ratio_text} ({difference}: not a speedup)" if difference else ratio_text


# The --set values that leave a step's arithmetic as the published model's was: what is learnt and for how long. Any
# other (a layer count, a width, an image size, dropout, augmentation) trains another model than the one a figure
# was published of, and no figure of it is set beside the run.
SAME_MODEL_SETTINGS = frozenset(
    {"batch_size", "epochs", "learning_rate", "momentum", "weight_decay", "adam_beta2", "adam_epsilon"}
)


def changed_model(workload: Workload, rows: list[Row], kept_apart: frozenset[str] = frozenset()) -> list[str]:
    """The --set values of `rows` that make another model than the published one, each with the published value
    (`layers=1 (published 12)`); `kept_apart`: settings the caller compares on its own (the record's sequence
    lengths). [] where every run trained the published model."""
    changed: dict[str, str] = {}
    for row in rows:
        for name, value in row.settings["overrides"].items():
            published = workload.defaults.get(name)
            if name not in SAME_MODEL_SETTINGS | kept_apart and value != published:
                changed[name] = f"{name}={value} (published {published})"
    return list(changed.values())


def post_work(workload: Workload) -> tuple[int, str, str]:
    """The (batch, precision, data) the post's throughput was measured at."""
    published = workload.published
    batch = (published.batch_size if published else None) or workload.defaults.get("batch_size", 0)
    return (batch, POST_PRECISION, POST_DATA)


def _samples_text(value: float) -> str:
    return f"{value:,.0f}"  # as the tables' samples/s columns write them


# --- the reference models: the public record beside this machine ------------------------------------------------
# A reference model (ResNet-50, BERT, GPT-2, GNMT) has no post of its own: what the field published of it is the
# record (results/record/), many rows of GPUs, precisions and batches. `devicebench reproduce resnet50` sets those
# beside what this machine measured, in the unit each row was published in.


def reference_workloads() -> list[Workload]:
    """The workloads the record has published figures of, in registry order."""
    recorded = {figure.workload for figure in published_figures()}
    return [entry for entry in list_workloads() if entry.name in recorded]


@dataclass(frozen=True)
class RecordComparison:
    """One reference workload: the record's rows at the sequence length measured here, and the rows measured here."""

    workload: Workload
    measured: list[Row]  # this machine's rows, each a device (and settings)
    figures: tuple[PublishedFigure, ...]  # the record's rows shown, the fastest a GPU first
    other_lengths: dict[int, int]  # rows left out, by their sequence length: a different amount of work a sample
    length: int | None  # the sequence length trained here; None for images
    not_shown: int = 0  # comparable rows left out of a short table: several GPUs', or slower ones of a GPU
    changed: tuple[str, ...] = ()  # --set values that made another model than the record's (`changed_model`): no
    # figure is then comparable


def record_comparisons(rows_by_workload: dict[str, list[Row]], *, every_row: bool = False) -> list[RecordComparison]:
    """The reference models among `rows_by_workload`: those the record has figures of."""
    references = {entry.name for entry in reference_workloads()}
    return [
        record_comparison(get_workload(name), rows, every_row=every_row)
        for name, rows in rows_by_workload.items()
        if name in references
    ]


def record_comparison(workload: Workload, rows: list[Row], *, every_row: bool = False) -> RecordComparison:
    """The record's figures of `workload` beside `rows`: by default the fastest single-GPU figure of each GPU and
    precision (the record holds dozens of a GPU: frameworks, batches, years); `every_row`: all of them."""
    measured = [row for row in rows if row.samples_per_s]
    length = _sequence_length(workload, rows)
    changed = changed_model(workload, rows, kept_apart=frozenset({"sequence_length"}))
    figures = () if changed else published_figures(workload.name)
    comparable: list[PublishedFigure] = []
    other: Counter[int] = Counter()
    for figure in figures:
        # a row at another sequence length did another amount of work a sample; a rate of tokens is one per token
        if figure.sequence_length in (None, length) or figure.unit == "tokens/s":
            comparable.append(figure)
        else:
            other[figure.sequence_length] += 1
    comparable.sort(key=lambda figure: -figure.per_gpu_throughput)
    shown = comparable
    if not every_row:
        fastest: dict[tuple[str, str], PublishedFigure] = {}
        for figure in comparable:
            if figure.gpus == 1:
                fastest.setdefault((figure.gpu, figure.precision), figure)
        shown = [figure for figure in comparable if figure in fastest.values()]
    return RecordComparison(
        workload,
        measured,
        tuple(shown),
        dict(sorted(other.items())),
        length,
        len(comparable) - len(shown),
        tuple(changed),
    )


def _sequence_length(workload: Workload, rows: list[Row]) -> int | None:
    """The sequence length the runs here trained at (the same in every row: it is part of their settings)."""
    for row in rows:
        for run in row.runs:
            return run.settings.hyperparameters.get("sequence_length")
    return workload.defaults.get("sequence_length")


def in_unit(workload: Workload, row: Row, unit: str) -> float | None:
    """`row`'s median steady throughput in `unit` (images/s and sequences/s are samples/s; tokens/s counts each
    sample's tokens, `tokens_per_sample`); None where this workload's samples are not counted in that unit."""
    if row.samples_per_s is None:  # no steady epochs: no throughput in any unit
        return None
    samples = row.samples_per_s.median
    if unit != "tokens/s":
        return samples
    if workload.tokens_per_sample is None or not row.runs:
        return None
    return samples * workload.tokens_per_sample(row.runs[0].settings.hyperparameters)
