"""Tabular classification data for the gradient-boosted-tree workloads: UCI Covertype and a synthetic table.

`read_covertype` parses the UCI release `covtype.data.gz` (581,012 rows of 54 integer features and the cover
type 1-7) with numpy's C reader in about a second. A malformed file raises DataFormatError naming the file and
its first bad line.

The release is not in random order (covtype.info names its first 11,340 and next 3,780 rows as the original
study's training and validation subsets), so its first 80% is not a fair training set. The split is therefore
a fixed pseudo-random one: rows are ranked by a splitmix64 hash of their line number (salted with
COVERTYPE_SPLIT_SALT, never the run's seed), the first `train_size` of that order train and the rest test. The
hash is plain integer arithmetic, so every run, machine and numpy version gets the same rows in the same split.

`synthetic_table` makes a seeded table of any size whose labels follow a hidden rule (linear scores plus
axis-aligned steps, plus noise), so boosted trees learn it well above chance.

    python -c "from devicebench.data.tabular import synthetic_table as t; print(t('table', rows=1000, features=9))"
"""

from __future__ import annotations

import gzip
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicebench.data.arrays import DataSource
from devicebench.data.formats import DataFormatError
from devicebench.data.sources import dataset_spec

COVERTYPE_FEATURES = 54  # 10 quantitative, 4 wilderness-area flags, 40 soil-type flags
COVERTYPE_CLASSES = 7  # cover types 1..7 in the file, labels 0..6 here
COVERTYPE_CLASS_NAMES = (
    "Spruce/Fir",
    "Lodgepole Pine",
    "Ponderosa Pine",
    "Cottonwood/Willow",
    "Aspen",
    "Douglas-fir",
    "Krummholz",
)  # as the release's covtype.info names cover types 1..7
COVERTYPE_SPLIT_SALT = 0  # fixed forever: changing it changes which rows are the test set

# Synthetic tables: how the hidden labelling rule is made.
INFORMATIVE_FEATURES = 8  # features the rule reads (fewer when the table has fewer); the rest are distractors
STEPS_PER_CLASS = 4  # axis-aligned steps (x_j > t) added to each class's score: structure trees find at once
LABEL_NOISE_SCALE = 0.5  # Gumbel noise on the scores: sets how far from 100% the best possible accuracy is


@dataclass(frozen=True, eq=False)
class TableDataset:
    """A whole tabular classification dataset in host memory: float32 features, int64 class indices."""

    name: str  # "covertype", "synthetic-table"
    source: DataSource  # "real" or "synthetic": shown in every table and stored in every result
    train_features: np.ndarray  # float32, (N, F)
    train_labels: np.ndarray  # int64, (N,)
    test_features: np.ndarray  # float32, (M, F)
    test_labels: np.ndarray  # int64, (M,)
    num_classes: int
    class_names: tuple[str, ...] = ()  # in label order; empty where the data only numbers its classes
    origin: str = ""  # where the rows came from: a file path, or the generator and its seed
    fallback_reason: str | None = None  # why "auto" gave synthetic data instead of real; None when it did not

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ValueError(f"{self.name}: a classification table needs at least 2 classes, got {self.num_classes}")
        if self.class_names and len(self.class_names) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes")
        for split, features, labels in (
            ("train", self.train_features, self.train_labels),
            ("test", self.test_features, self.test_labels),
        ):
            if features.dtype != np.float32 or features.ndim != 2:
                raise ValueError(
                    f"{self.name} {split} features must be float32 (N, F), got {features.dtype} {features.shape}"
                )
            if labels.dtype != np.int64 or labels.shape != (features.shape[0],):
                raise ValueError(
                    f"{self.name} {split}: {features.shape[0]} rows but labels of {labels.dtype} {labels.shape}"
                )
            if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
                raise ValueError(
                    f"{self.name} {split}: labels span {labels.min()}..{labels.max()}, "
                    f"outside 0..{self.num_classes - 1}"
                )
        if self.train_features.shape[1] != self.test_features.shape[1]:
            raise ValueError(
                f"{self.name}: {self.train_features.shape[1]} train features but {self.test_features.shape[1]} test"
            )

    @property
    def num_features(self) -> int:
        return self.train_features.shape[1]

    def __repr__(self) -> str:
        return (
            f"TableDataset({self.name!r}, source={self.source!r}, train={len(self.train_labels)}, "
            f"test={len(self.test_labels)}, features={self.num_features}, classes={self.num_classes}"
            + (f", fallback_reason={self.fallback_reason!r})" if self.fallback_reason else ")")
        )


# ---------------------------------------------------------------------------------------------------------------
# UCI Covertype: https://archive.ics.uci.edu/dataset/31/covertype (covtype.info describes the columns)
# ---------------------------------------------------------------------------------------------------------------


def read_covertype(path: Path) -> TableDataset:
    """The Covertype release at `path` (`covtype.data.gz`), split by the fixed hash described in the module
    docstring into the registry's train and test sizes (80% / 20% for a file of another length)."""
    path = Path(path)
    table = _parse_integer_rows(path, columns=COVERTYPE_FEATURES + 1)
    cover_types = table[:, -1]
    outside = np.flatnonzero((cover_types < 1) | (cover_types > COVERTYPE_CLASSES))
    if outside.size:
        line = outside[0] + 1
        raise DataFormatError(
            f"{path}: line {line}: cover type {cover_types[outside[0]]} is not one of 1..{COVERTYPE_CLASSES}"
        )

    train_rows, test_rows = covertype_split(len(table))
    features = table[:, :-1].astype(np.float32)
    labels = (cover_types - 1).astype(np.int64)
    return TableDataset(
        name="covertype",
        source="real",
        train_features=features[train_rows],
        train_labels=labels[train_rows],
        test_features=features[test_rows],
        test_labels=labels[test_rows],
        num_classes=COVERTYPE_CLASSES,
        class_names=COVERTYPE_CLASS_NAMES,
        origin=(
            f"{path}: {len(train_rows):,} train / {len(test_rows):,} test rows by a fixed hash of the line number "
            f"(salt {COVERTYPE_SPLIT_SALT})"
        ),
    )


def covertype_split(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(train row indices, test row indices), each ascending, for a Covertype file of `rows` lines.

    The registry's sizes for the full release; for any other length the same 80/20 proportion (tests, subsets).
    The rows are ranked by a hash of their index, never by the run's seed, so the split never changes.
    """
    spec = dataset_spec("covertype")
    released = spec.train_size + spec.test_size
    train_size = spec.train_size if rows == released else round(rows * spec.train_size / released)
    order = np.argsort(_splitmix64(np.arange(rows, dtype=np.uint64) + np.uint64(COVERTYPE_SPLIT_SALT)), kind="stable")
    return np.sort(order[:train_size]), np.sort(order[train_size:])


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 output function (Steele, Lea and Flood 2014) on uint64s: a fixed, well-mixed hash.
    numpy's uint64 arithmetic wraps modulo 2**64, as the algorithm requires."""
    mixed = values + np.uint64(0x9E3779B97F4A7C15)
    mixed = (mixed ^ (mixed >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    mixed = (mixed ^ (mixed >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return mixed ^ (mixed >> np.uint64(31))


def _parse_integer_rows(path: Path, columns: int) -> np.ndarray:
    """A gzipped file of comma-separated integers, `columns` per line, as an int32 (lines, columns) array.

    numpy's C reader parses the whole release in about a second; when it refuses the file, the file is read
    again line by line to name the first bad line and field in our words (numpy numbers its rows
    inconsistently between its messages).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy's "input contained no data": refused below
            table = np.loadtxt(path, delimiter=",", dtype=np.int32, comments=None, ndmin=2)
    except (OSError, EOFError, zlib.error) as error:  # OSError: not gzip at all; EOFError: cut short
        raise DataFormatError(f"{path}: not a complete gzip file ({error})") from error
    except ValueError as error:
        raise DataFormatError(f"{path}: {_first_bad_line(path, columns) or error}") from None
    if table.size == 0:
        raise DataFormatError(f"{path}: the file holds no rows")
    if table.shape[1] != columns:
        raise DataFormatError(f"{path}: line 1 has {table.shape[1]} comma-separated fields, expected {columns}")
    return table


def _first_bad_line(path: Path, columns: int) -> str | None:
    """Where the first line with the wrong field count or a field that is not an integer is (blank lines are
    skipped, as numpy skips them); None when every line looks right to Python (an int32 overflow)."""
    with gzip.open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            fields = line.split(b",")
            if len(fields) != columns:
                return f"line {number} has {len(fields)} comma-separated fields, expected {columns}"
            for column, field in enumerate(fields, start=1):
                try:
                    int(field)
                except ValueError:
                    text = field.strip().decode(errors="replace")
                    return f"line {number}, field {column}: {text!r} is not an integer"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Synthetic tables
# ---------------------------------------------------------------------------------------------------------------


def synthetic_table(
    name: str,
    *,
    seed: int = 0,
    rows: int,
    features: int,
    classes: int = 2,
    test_fraction: float = 0.2,
) -> TableDataset:
    """`rows` rows in all (round(rows * test_fraction) of them held out for test) of `features` standard-normal
    float32 features, labelled by a hidden rule drawn from `seed`.

    The rule: each class scores a random linear combination of INFORMATIVE_FEATURES features plus
    STEPS_PER_CLASS random steps (x_j > t); a row's label is the class of highest score after Gumbel noise.
    One million rows of 50 features take about two seconds to make.
    """
    if rows < 10 or features < 1 or classes < 2:
        raise ValueError(
            f"synthetic table: needs rows >= 10, features >= 1 and classes >= 2; "
            f"got rows={rows}, features={features}, classes={classes}"
        )
    test_rows = round(rows * test_fraction)
    if not 0 < test_rows < rows:
        raise ValueError(f"synthetic table: test_fraction {test_fraction} of {rows} rows leaves a split empty")

    rule_rng, sample_rng = (np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(2))
    informative = rule_rng.choice(features, size=min(features, INFORMATIVE_FEATURES), replace=False)
    weights = rule_rng.standard_normal((len(informative), classes)).astype(np.float32)
    weights /= np.sqrt(len(informative))  # every class's linear score has unit variance, whatever the count
    step_features = rule_rng.choice(informative, size=(classes, STEPS_PER_CLASS))
    step_thresholds = rule_rng.uniform(-1.0, 1.0, size=(classes, STEPS_PER_CLASS)).astype(np.float32)
    step_heights = rule_rng.uniform(-1.0, 1.0, size=(classes, STEPS_PER_CLASS)).astype(np.float32)

    table = sample_rng.standard_normal((rows, features), dtype=np.float32)
    scores = table[:, informative] @ weights
    for label in range(classes):
        for feature, threshold, height in zip(step_features[label], step_thresholds[label], step_heights[label]):
            scores[:, label] += height * (table[:, feature] > threshold)
    scores -= np.median(scores, axis=0)  # no class wins by a constant offset: the classes stay roughly balanced
    scores += LABEL_NOISE_SCALE * sample_rng.gumbel(size=scores.shape).astype(np.float32)
    labels = scores.argmax(axis=1).astype(np.int64)

    train_rows = rows - test_rows  # rows are independent draws, so the last ones are as good a test set as any
    return TableDataset(
        name=name,
        source="synthetic",
        train_features=table[:train_rows],
        train_labels=labels[:train_rows],
        test_features=table[train_rows:],
        test_labels=labels[train_rows:],
        num_classes=classes,
        origin=(
            f"synthetic: {rows:,} rows x {features} standard-normal features, {classes} classes from a random rule "
            f"on {len(informative)} of them (linear + {STEPS_PER_CLASS} steps per class, Gumbel noise "
            f"x{LABEL_NOISE_SCALE}), numpy SeedSequence({seed})"
        ),
    )
