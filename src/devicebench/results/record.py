"""The public record: GPU training throughputs others published for the reference workloads, each row cited.

The rows live in CSV files beside this module (`record/*.csv`, one file per source, shipped as package data); this
module reads them, refuses a row that breaks the format (naming the file, the line and what is wrong) and hands
them out as `PublishedFigure`s. They are data to set beside a measurement (`devicebench reproduce`) and points for
the estimate; they are never stored as devicebench measurements. The format, column by column, is in
docs/record.md.

    python -c "from devicebench.results.record import published_figures; print(len(published_figures()))"
"""

from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devicebench.choices import KERNEL_PRECISIONS
from devicebench.results.datasheets import UnknownTarget, catalog_entry

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python 3.11+; annotations only

COLUMNS = (
    "workload",
    "gpu",
    "gpus",
    "framework",
    "framework_version",
    "precision",
    "tf32",
    "batch_per_gpu",
    "sequence_length",
    "throughput",
    "unit",
    "data",
    "source",
    "notes",
)
TF32_STATES = frozenset({"on", "off", "n/a"})  # n/a: a GPU before Ampere, or a source that does not say
UNITS = frozenset({"images/s", "sequences/s", "tokens/s"})
DATA_KINDS = frozenset({"synthetic", "real"})
FRAMEWORKS = frozenset({"PyTorch", "TensorFlow", "MXNet"})
# A repository file, pinned to a commit or not ("NVIDIA/DeepLearningExamples@3bbe228d...:PyTorch/.../README.md"), or a
# web page: a reader must be able to open what a figure was read from.
SOURCE_PATTERN = re.compile(r"https?://\S+|[\w.-]+/[\w.-]+(@[0-9a-f]{7,40})?:\S+")
RECORD_PACKAGE = "devicebench.results"  # the folder `record/` inside it holds the CSVs
RECORD_FOLDER = "record"


class RecordError(ValueError):
    """A record file or row that breaks the format; the message names the file, the line and what is wrong."""


@dataclass(frozen=True)
class PublishedFigure:
    """One published training throughput, as its source printed it."""

    workload: str  # the devicebench workload it was measured on: resnet50, bert-large, ...
    gpu: str  # a GPU catalog key (devicebench.results.datasheets)
    gpus: int  # how many GPUs the figure was measured on; throughput is their total
    framework: str  # PyTorch, TensorFlow or MXNet
    framework_version: str  # as the source gives it ("NGC 20.12", "1.12.1"); empty if it does not say
    precision: str  # fp32, tf32, amp-fp16 or amp-bf16
    tf32: str  # on, off or n/a
    batch_per_gpu: int  # samples per GPU per step
    sequence_length: int | None  # tokens per sequence for a text model; None for an image model or when not given
    throughput: float  # in `unit`, summed over the `gpus`
    unit: str  # images/s, sequences/s or tokens/s
    data: str  # synthetic or real: what the source measured on
    source: str  # owner/repo:path, owner/repo@commit:path, or a URL
    notes: str  # which table and column, the task, what else matters to compare

    @property
    def per_gpu_throughput(self) -> float:
        """The throughput of one GPU of the run, in `unit` (the total divided evenly: scaling losses included)."""
        return self.throughput / self.gpus

    def describe(self) -> str:
        """One line for a table: what ran where, at which settings, and how fast."""
        sequence = f", seq {self.sequence_length}" if self.sequence_length is not None else ""
        version = f" {self.framework_version}" if self.framework_version else ""
        return (
            f"{self.workload} on {self.gpus}x {self.gpu}, {self.framework}{version}, {self.precision}, "
            f"batch {self.batch_per_gpu}/GPU{sequence}: {self.throughput:.10g} {self.unit} ({self.data} data)"
        )


def read_record(folder: Traversable | Path) -> tuple[PublishedFigure, ...]:
    """Every row of every CSV in `folder`, files in name order, rows in file order; RecordError at the first bad
    one. The package's own folder is `published_figures`'s; a test hands in a folder of its own."""
    files = sorted((entry for entry in folder.iterdir() if entry.name.endswith(".csv")), key=lambda entry: entry.name)
    return tuple(figure for entry in files for figure in _read_file(entry))


@functools.cache
def _package_record() -> tuple[PublishedFigure, ...]:
    return read_record(resources.files(RECORD_PACKAGE) / RECORD_FOLDER)


def published_figures(workload: str | None = None) -> tuple[PublishedFigure, ...]:
    """The shipped record (parsed once a process), or only the rows of one workload."""
    figures = _package_record()
    return figures if workload is None else tuple(figure for figure in figures if figure.workload == workload)


def _read_file(entry: Traversable | Path) -> list[PublishedFigure]:
    # Traversable.open passes newline on to the text wrapper, as Path.open does; typeshed's overloads leave it out
    with entry.open("r", encoding="utf-8", newline="") as stream:  # type: ignore[call-overload]
        reader = csv.reader(stream)
        header = next(reader, None)
        if header is None or tuple(header) != COLUMNS:
            raise RecordError(
                f"{entry.name}, line 1: the header must be {','.join(COLUMNS)}; it is "
                f"{','.join(header) if header else 'missing'}"
            )
        figures = []
        for cells in reader:
            line = reader.line_num  # the line the row ends on (a quoted cell may span lines)
            try:
                figures.append(_figure(cells))
            except ValueError as error:
                raise RecordError(f"{entry.name}, line {line}: {error}") from None
        return figures


def _figure(cells: list[str]) -> PublishedFigure:
    if len(cells) != len(COLUMNS):
        raise ValueError(f"{len(cells)} cells, the header has {len(COLUMNS)}")
    row = dict(zip(COLUMNS, cells, strict=True))
    for column, allowed in (
        ("precision", KERNEL_PRECISIONS),
        ("tf32", TF32_STATES),
        ("unit", UNITS),
        ("data", DATA_KINDS),
        ("framework", FRAMEWORKS),
    ):
        if row[column] not in allowed:
            raise ValueError(f"{column} {row[column]!r} is not one of {', '.join(sorted(allowed))}")
    try:
        key = catalog_entry(row["gpu"]).key
    except UnknownTarget as error:
        raise ValueError(f"gpu: {error}") from None
    if row["gpu"] != key:  # catalog_entry also takes product names and any case; the record holds keys only
        raise ValueError(f"gpu {row['gpu']!r}: write the catalog key {key!r}")
    if not row["workload"].strip():
        raise ValueError("workload is empty")
    if not SOURCE_PATTERN.fullmatch(row["source"]):
        raise ValueError(f"source {row['source']!r} is neither owner/repo:path, owner/repo@commit:path nor a URL")
    throughput = _number(row, "throughput", float)
    if not (math.isfinite(throughput) and throughput > 0):
        raise ValueError(f"throughput {row['throughput']!r} must be a finite number above 0")
    counts = {column: _number(row, column, int) for column in ("gpus", "batch_per_gpu")}
    for column, count in counts.items():
        if count < 1:
            raise ValueError(f"{column} {count} must be 1 or more")
    sequence_length = _number(row, "sequence_length", int) if row["sequence_length"] else None
    if sequence_length is not None and sequence_length < 1:
        raise ValueError(f"sequence_length {sequence_length} must be 1 or more, or empty")
    fields: dict[str, Any] = {**row, **counts, "throughput": throughput, "sequence_length": sequence_length}
    return PublishedFigure(**fields)


def _number(row: dict[str, str], column: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(row[column])
    except ValueError:
        raise ValueError(f"{column} {row[column]!r} is not {'an integer' if kind is int else 'a number'}") from None
