"""The IMDB reviews (`aclImdb_v1.tar.gz`, holding aclImdb/{train,test}/{neg,pos}/<id>_<rating>.txt) as token ids.

The archive is extracted once beside itself, with tarfile's "data" filter, and its encoded arrays are cached there
as `imdb-v<vocab size>-l<sequence length>.npz` (plain arrays, never a pickle), so every read after the first loads
a file instead of tokenizing 50,000 reviews.

    python -c "from devicebench.data.imdb import read_imdb; help(read_imdb)"
"""

from __future__ import annotations

import os
import platform
import re
import tarfile
import tempfile
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from devicebench.data.formats import DataFormatError
from devicebench.data.sources import dataset_spec
from devicebench.data.text import TokenDataset, check_sequence_length, check_vocab_size, encode_splits

IMDB_FOLDER = "aclImdb"  # the archive's top folder, extracted beside the archive
IMDB_SPLITS = ("train", "test")  # train/unsup/ (50,000 unlabelled reviews) is never extracted
IMDB_REVIEW_FILE = re.compile(r"([0-9]+)_([0-9]+)\.txt")  # <review id>_<rating 1-10>.txt
IMDB_REVIEW_MEMBER = re.compile(rf"{IMDB_FOLDER}/(?:train|test)/(?:neg|pos)/{IMDB_REVIEW_FILE.pattern}")
EXTRACTED_MARKER = ".devicebench-extracted"  # written last, so an interrupted extraction is done again
CACHE_FORMAT = 1  # stored in each cache file; bump it when tokenize, build_vocabulary or encode change


def read_imdb(archive: str | Path, *, vocab_size: int, sequence_length: int) -> TokenDataset:
    """The IMDB reviews of `archive` as token ids: labels neg 0 and pos 1, ordered by label then review id, the
    vocabulary from the train split. Served from the cache beside the archive when it holds these sizes."""
    archive = Path(archive)
    check_vocab_size(vocab_size)
    check_sequence_length(sequence_length)
    cache = archive.parent / f"imdb-v{vocab_size}-l{sequence_length}.npz"
    archive_bytes = archive.stat().st_size  # ties a cache to its archive: a different download is rebuilt
    origin = f"{archive} (IMDB reviews, vocabulary of the train split), encoded and cached as {cache}"
    class_names = dataset_spec("imdb").class_names  # ("neg", "pos"): the archive's folders
    cached = _load_imdb_cache(
        cache,
        class_names,
        archive_bytes=archive_bytes,
        vocab_size=vocab_size,
        sequence_length=sequence_length,
        origin=origin,
    )
    if cached is not None:
        return cached

    reviews_folder = _extract_reviews(archive)
    train_paths, test_paths = (
        _imdb_review_paths(archive, reviews_folder / split, class_names) for split in IMDB_SPLITS
    )
    dataset = encode_splits(
        "imdb",
        class_names,
        train_paths,
        test_paths,
        vocab_size=vocab_size,
        sequence_length=sequence_length,
        origin=origin,
    )
    _write_imdb_cache(cache, dataset, archive_bytes=archive_bytes)
    return dataset


def _extract_reviews(archive: Path) -> Path:
    """`<archive folder>/aclImdb/` with the train and test reviews in it, extracted from `archive` unless they were."""
    reviews_folder = archive.parent / IMDB_FOLDER
    marker = reviews_folder / EXTRACTED_MARKER
    if marker.is_file():
        return reviews_folder
    data_filter = getattr(tarfile, "data_filter", None)  # Python 3.10.12, 3.11.4, 3.12 and later
    if data_filter is None:
        raise RuntimeError(
            f"refusing to extract {archive}: this Python ({platform.python_version()}) lacks "
            "tarfile's 'data' extraction filter, which stops members from landing outside the data folder; "
            "use Python 3.10.12, 3.11.4, 3.12 or later"
        )

    def reviews_only(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
        safe = data_filter(member, destination)  # FilterError for a member or link that would reach outside
        return safe if IMDB_REVIEW_MEMBER.fullmatch(safe.name) else None  # None skips unsup/, imdb.vocab, README...

    try:
        # "r|gz" reads the archive front to back once; every member passes the filter, the reviews are written
        with tarfile.open(archive, mode="r|gz") as reader:
            reader.extractall(archive.parent, filter=reviews_only)
    except tarfile.FilterError as error:  # its message names the member and what is wrong with it
        raise DataFormatError(
            f"{archive}: refused to extract an unsafe member ({error}); the IMDB release holds only plain files "
            f"inside {IMDB_FOLDER}/, so this archive is not it: delete it and devicebench downloads a verified copy"
        ) from error
    except (tarfile.TarError, EOFError, zlib.error) as error:  # a missing file stays a FileNotFoundError
        raise DataFormatError(f"{archive}: not a readable .tar.gz ({error})") from error
    reviews_folder.mkdir(exist_ok=True)  # absent when the archive held no reviews; reading says so
    marker.write_text(f"reviews extracted from {archive.name}\n")
    return reviews_folder


def _imdb_review_paths(archive: Path, split_folder: Path, class_names: tuple[str, ...]) -> list[list[Path]]:
    """Per class, the review files of one split in the order of their numeric ids."""
    paths_by_label = []
    for class_name in class_names:
        folder = split_folder / class_name
        numbered = sorted(
            (int(match[1]), path)
            for path in (folder.iterdir() if folder.is_dir() else ())
            if (match := IMDB_REVIEW_FILE.fullmatch(path.name))
        )
        if not numbered:
            raise DataFormatError(
                f"{archive}: no reviews in {IMDB_FOLDER}/{split_folder.name}/{class_name}/ "
                f"(extracted to {folder}; want files named <id>_<rating>.txt)"
            )
        paths_by_label.append([path for _, path in numbered])
    return paths_by_label


def _load_imdb_cache(
    cache: Path,
    class_names: tuple[str, ...],
    *,
    archive_bytes: int,
    vocab_size: int,
    sequence_length: int,
    origin: str,
) -> TokenDataset | None:
    """The cached dataset, or None when there is none or it is corrupt or not ours (with a warning)."""
    if not cache.is_file():
        return None
    try:
        with np.load(cache, allow_pickle=False) as arrays:
            if int(arrays["format"]) != CACHE_FORMAT or int(arrays["archive_bytes"]) != archive_bytes:
                raise ValueError("written by another version of devicebench, or from another archive")
            dataset = TokenDataset(
                name="imdb",
                source="real",
                train_tokens=arrays["train_tokens"],
                train_labels=arrays["train_labels"],
                test_tokens=arrays["test_tokens"],
                test_labels=arrays["test_labels"],
                num_classes=len(class_names),
                class_names=class_names,
                vocabulary=tuple(arrays["vocabulary"].tolist()),
                origin=origin,
            )
        if dataset.sequence_length != sequence_length or dataset.vocab_size > vocab_size:
            raise ValueError(f"holds {dataset.vocab_size} words and sequences of {dataset.sequence_length} tokens")
    except (OSError, ValueError, TypeError, KeyError, EOFError, zipfile.BadZipFile) as error:
        warnings.warn(f"ignoring the cache {cache} ({error}); building it again", stacklevel=3)
        return None
    return dataset


def _write_imdb_cache(cache: Path, dataset: TokenDataset, *, archive_bytes: int) -> None:
    """Write the cache through a temporary file and a rename, so a cache at its final name is always whole."""
    handle, partial_name = tempfile.mkstemp(dir=cache.parent, prefix=f".{cache.name}.", suffix=".partial")
    partial = Path(partial_name)
    try:
        with os.fdopen(handle, "wb") as partial_file:
            np.savez(
                partial_file,
                format=np.int64(CACHE_FORMAT),
                archive_bytes=np.int64(archive_bytes),
                vocabulary=np.array(dataset.vocabulary),  # fixed-width unicode, which loads without pickle
                train_tokens=dataset.train_tokens,
                train_labels=dataset.train_labels,
                test_tokens=dataset.test_tokens,
                test_labels=dataset.test_labels,
            )
        os.replace(partial, cache)
    finally:
        partial.unlink(missing_ok=True)  # gone already after os.replace; never left behind otherwise
