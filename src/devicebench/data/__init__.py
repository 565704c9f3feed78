"""Datasets as in-memory arrays: where they come from (real or synthetic) travels with them.

`load_dataset` is the one entry point: real data from the cache or a verified download, or synthetic data of
the same shape when asked for, or (with "auto") when the real data cannot be had, saying why. A `data_dir`
laid out as an image folder (`train/<class>/*`, `test/<class>/*`) is the real data of every image workload.
Small releases (MNIST, CIFAR) come back as in-memory arrays (`ArrayDataset`); photo collections (cats vs
dogs, image folders) as lists of files (`ImageFolderDataset`) that the loader workers decode.

    python -c "from devicebench.data import load_dataset; print(load_dataset('mnist', source='synthetic'))"
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

from devicebench.choices import DataChoice
from devicebench.data.arrays import ArrayDataset, DataSource
from devicebench.data.download import DataUnavailable, fetch
from devicebench.data.formats import DataFormatError, read_release
from devicebench.data.images import (
    ImageFolderDataset,
    is_image_folder,
    read_image_folder,
    read_pet_images,
)
from devicebench.data.imdb import read_imdb
from devicebench.data.sequences import synthetic_sequences
from devicebench.data.sources import (
    DatasetSpec,
    NotDownloadable,
    RealDataUnreadable,
    dataset_folder,
    dataset_spec,
    dataset_status,
    known_datasets,
    megabytes,
)
from devicebench.data.synthetic import synthetic_dataset
from devicebench.data.tabular import TableDataset, read_covertype, synthetic_table
from devicebench.data.text import (
    TokenDataset,
    is_text_folder,
    read_text_folder,
    synthetic_text,
)

Dataset = ArrayDataset | ImageFolderDataset | TokenDataset | TableDataset
SYNTHETIC_TABLE = "synthetic-table"  # the dataset of gbdt-synthetic: generated to the size asked, never downloaded

__all__ = [
    "ArrayDataset",
    "DataChoice",
    "DataFormatError",
    "DataSource",
    "DataUnavailable",
    "Dataset",
    "RealDataUnreadable",
    "NotDownloadable",
    "ImageFolderDataset",
    "TableDataset",
    "TokenDataset",
    "expected_source",
    "known_datasets",
    "load_dataset",
    "real_data_missing",
    "synthetic_dataset",
]


def load_dataset(
    name: str,
    source: DataChoice = "auto",
    *,
    data_dir: str | Path | None = None,
    seed: int = 0,
    progress: bool = True,
    timeout_s: float = 15.0,
    largest_download_bytes: int | None = None,
    **shape: Any,
) -> Dataset:
    """Load dataset `name` from `source`, shaped as `shape` says the model takes it: `image_shape=(C, H, W)` for
    images, `vocab_size` and `sequence_length` for text (and a `task` for sequences: data/sequences.py), `rows` and
    `features` for a synthetic table.

    "real": your own folder `data_dir` if it is one (images or texts, by the dataset's kind); else from
    `<data root>/<name>/` (the root is `data_dir` when given), downloading and verifying what is missing;
    DataUnavailable when it cannot.
    "synthetic": seeded synthetic data of the real shapes (see synthetic.py, text.py, tables.py).
    "auto": real when cached or downloadable, otherwise synthetic with `fallback_reason` set (and a warning).
    A dataset devicebench cannot read (`real_data_needs`) is synthetic under "auto", and "real" raises
    RealDataUnreadable saying what reading it would take.
    With `largest_download_bytes` (the quick suite's limit), a release larger than that which is not cached is not
    downloaded at all: synthetic, with a one-line `fallback_reason` that says how to get it (and no warning).
    `seed` only affects synthetic data; `timeout_s` is per network operation, in seconds.
    """
    if source not in ("auto", "real", "synthetic"):
        raise ValueError(f"source must be 'auto', 'real' or 'synthetic', got {source!r}")
    if name == SYNTHETIC_TABLE:  # generated whatever the source: there is no real one
        return synthetic_table(name, seed=seed, **shape)
    spec = dataset_spec(name)
    if source == "synthetic":
        return _synthetic(spec, seed, shape)
    if spec.real_data_needs:
        if source == "real":
            raise RealDataUnreadable(spec.title, spec.real_data_needs)
        return dataclasses.replace(_synthetic(spec, seed, shape), fallback_reason=_unreadable(spec))
    own = _own_folder(spec, data_dir, shape)
    if own is not None:
        return own
    if source == "real":
        return _load_real(spec.name, data_dir, shape, progress=progress, timeout_s=timeout_s)
    if spec.not_downloadable:  # nothing to try: synthetic, saying so as loudly as a failed download
        stand_in = _synthetic(spec, seed, shape)
        reason = (
            f"real {spec.title} could not be had: devicebench cannot download it; {spec.not_downloadable}. "
            f"Using {len(stand_in.train_labels):,} + {len(stand_in.test_labels):,} synthetic images of its "
            f"shape instead"
        )
        warnings.warn(reason, stacklevel=2)
        return dataclasses.replace(stand_in, fallback_reason=reason)
    missing = _not_downloaded(spec, data_dir, largest_download_bytes)
    if missing is not None:
        return dataclasses.replace(_synthetic(spec, seed, shape), fallback_reason=missing)
    try:
        return _load_real(spec.name, data_dir, shape, progress=progress, timeout_s=timeout_s)
    except DataUnavailable as error:
        filenames = ", ".join(remote.filename for remote in spec.files)
        reason = (
            f"real {spec.title} could not be had ({error.filename}: {error.reasons}); using synthetic data of the "
            f"same shape. Put {filenames} in {error.folder} or check the network."
        )
    warnings.warn(reason, stacklevel=2)
    return dataclasses.replace(_synthetic(spec, seed, shape), fallback_reason=reason)


def _unreadable(spec: DatasetSpec) -> str:
    return f"devicebench cannot read the real {spec.title}: that needs {spec.real_data_needs}"


def _not_downloaded(spec: DatasetSpec, data_dir: str | Path | None, largest_download_bytes: int | None) -> str | None:
    """Why "auto" data is synthetic without trying: a release above the download limit that is not cached (told
    from file sizes, no hashing), with how to get it; None when it is tried."""
    if (
        largest_download_bytes is None
        or spec.size_bytes <= largest_download_bytes
        or dataset_status(spec.name, data_dir).state == "cached"
    ):
        return None
    return (
        f"{spec.title} ({megabytes(spec.size_bytes)} MB) is not downloaded by the quick suite; "
        f"`devicebench data fetch {spec.name}` gets it, or `--data real`"
    )


def expected_source(
    name: str,
    source: DataChoice = "auto",
    *,
    data_dir: str | Path | None = None,
    largest_download_bytes: int | None = None,
) -> tuple[str, str | None]:
    """What `load_dataset` with these arguments will train on, told without loading or downloading anything (for
    `run --dry-run`): ("real", None), ("real or synthetic", why) when it depends on a download, ("synthetic", why),
    or ("yours", None) for data that is not one of devicebench's datasets."""
    if name == SYNTHETIC_TABLE:
        return "synthetic", "generated: there is no real one"
    if name not in known_datasets():
        return "yours", None
    spec = dataset_spec(name)
    if source == "synthetic":
        return "synthetic", "--data synthetic was asked for"
    if spec.real_data_needs:
        return ("real", f"{_unreadable(spec)}: the run stops") if source == "real" else ("synthetic", _unreadable(spec))
    if _is_own_folder(spec, data_dir):
        return "real", None
    if spec.not_downloadable:
        if source == "real":
            return "real", f"devicebench cannot download {spec.title}, so the run stops; {spec.not_downloadable}"
        train, test = spec.synthetic_sizes or (spec.train_size, spec.test_size)
        return "synthetic", (
            f"devicebench cannot download {spec.title}: {train:,} + {test:,} synthetic images of its "
            f"shape stand in. For real ones, {spec.not_downloadable}"
        )
    if source == "auto":
        reason = _not_downloaded(spec, data_dir, largest_download_bytes)
        if reason is not None:
            return "synthetic", reason
    if dataset_status(spec.name, data_dir).state == "cached":
        return "real", None
    fallback = "the run stops" if source == "real" else "synthetic data, loudly"
    return (
        "real" if source == "real" else "real or synthetic",
        f"downloads {megabytes(spec.size_bytes)} MB first (`devicebench data fetch {spec.name}` gets it now); "
        f"if that fails, {fallback}",
    )


def real_data_missing(name: str, data_dir: str | Path | None) -> str | None:
    """Why `--data real` cannot train on dataset `name`, told before anything is loaded: devicebench cannot download
    it and `data_dir` is no folder of its images (what to do instead); None when real data may be had."""
    spec = dataset_spec(name) if name in known_datasets() else None
    if spec is None or not spec.not_downloadable or _is_own_folder(spec, data_dir):
        return None
    return str(NotDownloadable(spec.title, dataset_folder(name, data_dir), spec.not_downloadable))


def _synthetic(spec: DatasetSpec, seed: int, shape: dict[str, Any]) -> ArrayDataset | TokenDataset | TableDataset:
    if spec.kind == "text":
        return synthetic_text(spec.name, seed=seed, **shape)
    if spec.kind == "sequences":
        return synthetic_sequences(spec.name, seed=seed, **shape)
    if spec.kind == "table":
        assert spec.features is not None  # every table's spec names its features
        return synthetic_table(
            spec.name,
            seed=seed,
            rows=spec.train_size + spec.test_size,
            features=spec.features,
            classes=spec.num_classes,
            test_fraction=spec.test_size / (spec.train_size + spec.test_size),
        )
    return synthetic_dataset(spec.name, seed=seed, **shape)


def _is_own_folder(spec: DatasetSpec, data_dir: str | Path | None) -> bool:
    """Whether `data_dir` is laid out as a folder of the user's own images or texts of `spec`'s kind."""
    return data_dir is not None and (
        is_image_folder(data_dir) if spec.kind == "images" else spec.kind == "text" and is_text_folder(data_dir)
    )


def _own_folder(spec: DatasetSpec, data_dir: str | Path | None, shape: dict[str, Any]) -> Dataset | None:
    """The user's own images or texts in `data_dir`, when it is laid out as such a folder."""
    if data_dir is None or not _is_own_folder(spec, data_dir):
        return None
    return read_image_folder(data_dir) if spec.kind == "images" else read_text_folder(data_dir, **shape)


def _load_real(
    name: str, data_dir: str | Path | None, shape: dict[str, Any], *, progress: bool, timeout_s: float
) -> Dataset:
    folder = dataset_folder(name, data_dir)
    spec = dataset_spec(name)
    if spec.not_downloadable:  # and data_dir is no folder of its images (_own_folder)
        given = f" ({data_dir} has no train/ folder)" if data_dir is not None else ""
        raise NotDownloadable(spec.title, folder, spec.not_downloadable + given)
    paths = [fetch(remote, folder, progress=progress, timeout_s=timeout_s) for remote in spec.files]
    if spec.kind == "text":
        return read_imdb(paths[0], **shape)
    if spec.kind == "table":
        return read_covertype(paths[0])
    if name == "cats-vs-dogs":  # the registry's sizes are the split: 4,000 + 1,000 per class, as the seeds had
        per_class = spec.train_size // spec.num_classes, spec.test_size // spec.num_classes
        return read_pet_images(paths[0], train_per_class=per_class[0], test_per_class=per_class[1])
    splits = read_release(name, folder)
    return ArrayDataset(
        name=name,
        source="real",
        train_images=splits.train_images,
        train_labels=splits.train_labels,
        test_images=splits.test_images,
        test_labels=splits.test_labels,
        num_classes=spec.num_classes,
        origin=f"{folder}: {', '.join(remote.filename for remote in spec.files)} (checksums verified)",
    )
