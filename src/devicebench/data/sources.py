"""Where each dataset comes from and how it gets into the cache: URLs, pinned checksums, verified downloads.

A download streams into a hidden `.<file>.*.partial` beside its destination while it is hashed, is checked for size
and checksum, and only then is moved into place atomically: a file at its final name has always been verified. A
transfer the server cuts off midway is taken up again where it stopped (HTTP Range), a few times at most; a data
folder that is full or read-only stops the download at once with an error that says so. A download stopped by
Ctrl-C is kept as `.<file>.partial`, and the next fetch of that file takes it up where it stopped (HTTP Range).

    python -c "from devicebench.data.sources import DATASETS, data_root; print(data_root(), list(DATASETS))"
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import math
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from devicebench.data.formats import CIFAR10_BINARY, CIFAR100_BINARY, MNIST_FILES
from devicebench.errors import DevicebenchError
from devicebench.files import (
    DATA_VARIABLE,
    UnusableFile,
    require_regular_file,
    user_folder,
)

CHUNK_BYTES = 1 << 20  # 1 MiB per read: small enough for a smooth progress bar, large enough to be cheap
DIGEST_HEX_LENGTHS = {"md5": 32, "sha256": 64}  # the checksum kinds we accept, and their hex lengths
DATA_DIR_ENVIRONMENT_VARIABLE = DATA_VARIABLE
DOWNLOAD_ATTEMPTS = 3  # requests per URL: a transfer cut off midway is taken up again twice at most
RETRY_PAUSE_S = 1.0  # seconds before taking it up again, so a server that just dropped the connection can recover
STALL_TIMEOUT_S = 15.0  # seconds a connection or a read may wait for the server before the URL is given up
# seconds a URL has to deliver a whole file, attempts included: a server sending a byte now and then, never stalling,
# cannot hold a download for ever. 30 min brings the largest release (CIFAR-100, 169 MB) at 94 kB/s
DOWNLOAD_DEADLINE_S = 1800.0
# `--data auto` in the quick suite downloads a dataset that is not cached only up to this size: MNIST (11.6 MB) and
# Covertype (11 MB) are fetched, the larger ones run on synthetic data until `devicebench data fetch` gets them
QUICK_SUITE_DOWNLOAD_LIMIT_BYTES = 15_000_000
SYNTHETIC_ONLY = "synthetic only"  # the state of a dataset devicebench cannot read: nothing to download
MEGABYTE = 1_000_000  # bytes; sizes are shown in decimal MB, as the releases state them
T = TypeVar("T")


class DataUnavailable(RuntimeError):
    """No URL gave a file that verifies; the message says what each URL answered and where to put the file."""

    def __init__(self, filename: str, folder: Path, failures: list[tuple[str, str]], checksum: str) -> None:
        self.filename = filename
        self.folder = folder
        self.failures = tuple(failures)  # (url, reason) for each URL tried, in order
        self.checksum = checksum
        tried = "\n".join(f"  - {url}: {reason}" for url, reason in failures) or "  (no URLs are known for it)"
        super().__init__(
            f"could not download {filename} from any of its {len(failures)} URL(s):\n{tried}\n"
            f"To use it offline, download it yourself and put it in folder {folder} as file {filename}\n"
            f"(that is, {folder / filename}); it must match {checksum}."
        )

    def __reduce__(self) -> tuple[type[DataUnavailable], tuple[str, Path, list[tuple[str, str]], str]]:
        # rebuilt from our own arguments, so the error survives crossing a process boundary (DataLoader workers, DDP)
        return (DataUnavailable, (self.filename, self.folder, list(self.failures), self.checksum))

    @property
    def reasons(self) -> str:
        """One line: each URL and why it failed."""
        return "; ".join(f"{url}: {reason}" for url, reason in self.failures) or "no URLs are known"


class RealDataUnreadable(DataUnavailable):
    """Real data was asked for (`--data real`) of a dataset devicebench cannot read (`DatasetSpec.real_data_needs`);
    the message says what it would take. A DataUnavailable, so that the runs of it fail with it as with any."""

    def __init__(self, title: str, needs: str) -> None:
        self.title, self.needs = title, needs
        self.filename, self.folder, self.failures, self.checksum = title, None, (), ""  # no file was tried
        RuntimeError.__init__(self, f"devicebench cannot read the real {title}: that needs {needs}. Its runs train on "
                                    f"synthetic data of the same shapes: use --data synthetic (or auto)")

    def __reduce__(self) -> tuple[type[RealDataUnreadable], tuple[str, str]]:  # type: ignore[override]
        return (RealDataUnreadable, (self.title, self.needs))

    @property
    def reasons(self) -> str:
        return f"reading it needs {self.needs}"


class NotDownloadable(DataUnavailable):
    """Real data of a dataset devicebench cannot download (ImageNet) was asked for, and no folder of its images was
    given; the message says how to get them and hand them over."""

    def __init__(self, title: str, folder: Path, how: str) -> None:
        RuntimeError.__init__(self, f"real {title} was asked for, but devicebench cannot download it: {how}")
        self.title, self.how = title, how
        self.filename, self.folder, self.failures, self.checksum = title, folder, (), ""

    def __reduce__(self) -> tuple[type[NotDownloadable], tuple[str, Path, str]]:  # see DataUnavailable.__reduce__
        return (NotDownloadable, (self.title, self.folder, self.how))


@dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset release, the mirrors that serve it, and the checksum it must have."""

    filename: str
    urls: tuple[str, ...]  # mirrors, tried in order
    checksum: str  # "sha256:<hex>" or "md5:<hex>"
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        algorithm, _, hex_digest = self.checksum.partition(":")
        if DIGEST_HEX_LENGTHS.get(algorithm) != len(hex_digest) or not all(
            character in "0123456789abcdef" for character in hex_digest
        ):
            raise ValueError(
                f"{self.filename}: checksum must be 'md5:<32 hex>' or 'sha256:<64 hex>', got {self.checksum!r}"
            )

    @property
    def algorithm(self) -> str:
        return self.checksum.partition(":")[0]

    @property
    def hex_digest(self) -> str:
        return self.checksum.partition(":")[2]


@dataclass(frozen=True)
class DatasetSpec:
    """What a dataset is (shapes, classes, sizes) and which files make up its release."""

    name: str  # registry key: "mnist", "cifar10", "cifar100"
    title: str  # how people write it: "MNIST", "CIFAR-10"
    files: tuple[RemoteFile, ...]
    image_shape: tuple[int, int, int] | None  # (channels, height, width); None for text and tables
    num_classes: int
    train_size: int  # images in the released train split
    test_size: int
    class_names: tuple[str, ...] = ()  # in label order; empty where the release only numbers its classes
    kind: str = "images"  # "images", "text" or "table": which reader and which synthetic stand-in
    features: int | None = None  # columns of a table
    derived: tuple[str, ...] = ()  # what reading it makes beside the release files (globs): removed with them
    # What reading the real release would take that devicebench does not have (a tokenizer's vocabulary); "" when
    # devicebench reads it. Such a dataset has no files to download: its runs train on synthetic stand-ins only.
    real_data_needs: str = ""
    # Why devicebench cannot download it (a registration), and how to train on real images instead; empty for one
    # whose `files` it downloads. Such a dataset is synthetic unless `--data-dir` names a folder of its images.
    not_downloadable: str = ""
    # (train, test) images of the synthetic stand-in, where the release's sizes would not fit a laptop's memory;
    # None: the release's sizes
    synthetic_sizes: tuple[int, int] | None = None

    @property
    def size_bytes(self) -> int:
        """The release's download size, from the registry."""
        return sum(remote.size_bytes or 0 for remote in self.files)


# Checksums below are the sha256 of each file as served, with its size in bytes. Where each is published:
# - tensorflow/datasets, tensorflow_datasets/url_checksums/{mnist,cifar10,cifar100}.txt (url, size, sha256);
#   the same values appear in other public loaders (MLDatasets.jl, gomlx, red-datasets).
# - MNIST t10k-*: also ../shared/data/mnist/SHA256SUMS, computed from the original files; their md5s
#   (9fb629c4..., ec29112d...) are the ones published with MNIST and used by torchvision.datasets.MNIST.
# - CIFAR: https://www.cs.toronto.edu/~kriz/cifar.html publishes md5s of the binary versions:
#   CIFAR-10 c32a1d4ab5d03f1284b67883e8d87530, CIFAR-100 03b5dce01913d631647c71ecec9e9cb8.
# - IMDB (aclImdb_v1.tar.gz): the sha256 is the one MLDatasets.jl, the gomlx imdb example and others pin; the size
#   is tensorflow-datasets' (url_checksums/imdb_reviews.txt).
# - Covertype (covtype.data.gz): the sha256 scikit-learn's fetch_covtype pins for the same file on its figshare mirror;
#   the size is the one other public dataset registries list for the UCI file.
# - Cats vs Dogs: the sha256 is pinned in the gomlx project's dogsvscats example (examples/dogsvscats/dogsvscats.go);
#   the size is the Content-Length download.microsoft.com sends (824,887,076 bytes).
MNIST_MIRRORS = ("https://yann.lecun.com/exdb/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/")
MNIST_SHA256_AND_SIZE = {  # file name -> (sha256, bytes)
    MNIST_FILES["train_images"]: ("440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", 9_912_422),
    MNIST_FILES["train_labels"]: ("3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", 28_881),
    MNIST_FILES["test_images"]: ("8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", 1_648_877),
    MNIST_FILES["test_labels"]: ("f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4_542),
}
CIFAR_BASE_URL = "https://www.cs.toronto.edu/~kriz/"

DATASETS: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec(
        name="mnist",
        title="MNIST",
        files=tuple(
            RemoteFile(
                filename=filename,
                urls=tuple(mirror + filename for mirror in MNIST_MIRRORS),
                checksum=f"sha256:{sha256}",
                size_bytes=size_bytes,
            )
            for filename, (sha256, size_bytes) in MNIST_SHA256_AND_SIZE.items()
        ),
        image_shape=(1, 28, 28),
        num_classes=10,
        train_size=60_000,
        test_size=10_000,
        class_names=tuple("0123456789"),
    ),
    "cifar10": DatasetSpec(
        name="cifar10",
        title="CIFAR-10",
        files=(
            RemoteFile(
                filename=CIFAR10_BINARY.archive_name,
                urls=(CIFAR_BASE_URL + CIFAR10_BINARY.archive_name,),
                checksum="sha256:c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
                size_bytes=170_052_171,
            ),
        ),
        image_shape=(3, 32, 32),
        num_classes=10,
        train_size=50_000,
        test_size=10_000,
        class_names=("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
    ),
    "cifar100": DatasetSpec(
        name="cifar100",
        title="CIFAR-100",
        files=(
            RemoteFile(
                filename=CIFAR100_BINARY.archive_name,
                urls=(CIFAR_BASE_URL + CIFAR100_BINARY.archive_name,),
                checksum="sha256:58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec",
                size_bytes=168_513_733,
            ),
        ),
        image_shape=(3, 32, 32),
        num_classes=100,  # the fine labels
        train_size=50_000,
        test_size=10_000,
    ),
    "cats-vs-dogs": DatasetSpec(
        name="cats-vs-dogs",
        title="Microsoft Cats vs Dogs (PetImages)",
        files=(
            RemoteFile(
                filename="kagglecatsanddogs_5340.zip",
                urls=(
                    "https://download.microsoft.com/download/3/E/1/3E1C3F21-ECDB-4869-8368-6DEBA77B919F/"
                    "kagglecatsanddogs_5340.zip",
                ),
                checksum="sha256:b7974bd00a84a99921f36ee4403f089853777b5ae8d151c76a86e64900334af9",
                size_bytes=824_887_076,
            ),
        ),
        # The originals vary in size (about 500 x 375); each workload decodes them to its own input size, and
        # 64 x 64 is the seeds' tutorial's.
        image_shape=(3, 64, 64),
        num_classes=2,
        train_size=8_000,  # the seeds' training_set: 4,000 per class
        test_size=2_000,  # the seeds' test_set: 1,000 per class
        class_names=("cat", "dog"),
    ),
    "imdb": DatasetSpec(
        name="imdb",
        title="IMDB movie reviews (Large Movie Review Dataset v1.0)",
        files=(
            RemoteFile(
                filename="aclImdb_v1.tar.gz",
                urls=("https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
                checksum="sha256:c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
                size_bytes=84_125_825,
            ),
        ),
        image_shape=None,
        num_classes=2,
        train_size=25_000,
        test_size=25_000,
        class_names=("neg", "pos"),  # the archive's folder names, alphabetical
        kind="text",
        derived=("aclImdb", "imdb-v*-l*.npz"),  # the extracted reviews and the encoded arrays (data/text.py)
    ),
    # The language models' data (workloads/language.py): token sequences made by a tokenizer devicebench does not
    # ship, so every run trains on the synthetic stand-ins of data/sequences.py. The sizes are the real releases'.
    "squad": DatasetSpec(
        name="squad",
        title="SQuAD v1.1",  # the Stanford Question Answering Dataset (Rajpurkar et al. 2016)
        files=(),
        image_shape=None,
        num_classes=0,  # a class at each of 2 answer ends: a position of the sequence, so as many as its length
        train_size=87_599,  # questions in train-v1.1.json (Rajpurkar et al. 2016)
        test_size=10_570,  # questions in dev-v1.1.json, the split BERT's F1 figures are measured on
        kind="sequences",
        real_data_needs=(
            "BERT's uncased WordPiece vocabulary (30,522 tokens) and its tokenizer, to turn questions and paragraphs "
            "into token ids and answers' character offsets into token positions; devicebench ships neither"
        ),
    ),
    "openwebtext": DatasetSpec(
        name="openwebtext",
        title="OpenWebText",  # the open replication of GPT-2's WebText, on which nanoGPT trains GPT-2 small
        files=(),
        image_shape=None,
        num_classes=0,  # a class at each position: the next token, one of the tokenizer's vocabulary
        # 8,013,769 documents; nanoGPT's data/openwebtext/prepare.py counts 9,035,582,198 training and 4,434,897
        # validation tokens of GPT-2's BPE, here as sequences of 1,024 tokens (GPT-2's context)
        train_size=8_823_810,
        test_size=4_330,
        kind="sequences",
        real_data_needs=(
            "GPT-2's byte-pair encoding (50,257 tokens) to tokenize its 8,013,769 documents (about 40 GB of text, "
            "9 billion tokens); devicebench ships no tokenizer"
        ),
    ),
    "wmt16": DatasetSpec(
        name="wmt16",
        title="WMT16 English-German",  # what NVIDIA's GNMT v2 trains on (workloads/translation.py)
        files=(),
        image_shape=None,
        num_classes=0,  # a class at each target position: the next token, one of the 32,000 BPE tokens
        # "about 4.5M sentence pairs", as Vaswani et al. 2017 count the WMT English-German training corpora; NVIDIA's
        # README gives no count. Its test set is newstest2014: 3,003 sentences
        train_size=4_500_000,
        test_size=3_003,
        kind="sequences",
        real_data_needs=(
            "the WMT16 English-German corpora segmented into NVIDIA's 32,000 shared BPE tokens (its "
            "scripts/wmt16_en_de.sh, with subword-nmt); devicebench ships no tokenizer"
        ),
    ),
    "covertype": DatasetSpec(
        name="covertype",
        title="UCI Covertype",
        files=(
            RemoteFile(
                filename="covtype.data.gz",
                urls=(
                    "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz",
                    "https://ndownloader.figshare.com/files/5976039",
                ),
                checksum="sha256:614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771",
                size_bytes=11_240_707,
            ),
        ),
        image_shape=None,
        num_classes=7,  # cover types 1-7, stored as 0-6
        train_size=464_809,  # 80% of the 581,012 rows, chosen by a fixed hash of the line number (data/tables.py)
        test_size=116_203,
        kind="table",
        features=54,  # 10 measurements, 4 wilderness areas and 40 soil types (one-hot)
    ),
    # ILSVRC-2012 (Russakovsky et al. 2015): 1,281,167 training and 50,000 validation images of 1,000 classes, the
    # data of the ImageNet reference models (workloads/imagenet.py). Only registered users may download it.
    "imagenet": DatasetSpec(
        name="imagenet",
        title="ImageNet (ILSVRC-2012)",
        files=(),
        image_shape=(3, 224, 224),  # the photos vary in size; the reference models take 224 x 224
        num_classes=1000,
        train_size=1_281_167,
        test_size=50_000,  # the validation split: its test labels were never released
        not_downloadable=(
            "image-net.org gives its images only to registered users: register and download ILSVRC-2012 there, "
            "then give --data-dir DIR with DIR/train/<class>/*.JPEG and DIR/val/<class>/*.JPEG (a folder per class, "
            "as torchvision's ImageFolder reads them)"
        ),
        # 1,280 + 256 images at 224 x 224 x 3 bytes: 231 MB in memory, where the real 1.33 M would take 200 GB.
        # 1,280 is five batches of 256: enough steps an epoch for a steady state at the published batch size
        synthetic_sizes=(1_280, 256),
    ),
}


def known_datasets() -> tuple[str, ...]:
    return tuple(DATASETS)


def dataset_spec(name: str) -> DatasetSpec:
    """The registry entry for `name`; a ValueError listing the known names otherwise."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(known_datasets())}") from None


def data_root(data_dir: str | Path | None = None) -> Path:
    """The cache root: `data_dir` if given, else $DEVICEBENCH_DATA, else the user's cache folder."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    from_environment = os.environ.get(DATA_DIR_ENVIRONMENT_VARIABLE)
    if from_environment:
        return Path(from_environment).expanduser()
    return user_folder("cache", "the datasets") / "data"


def dataset_folder(name: str, data_dir: str | Path | None = None) -> Path:
    """Where dataset `name`'s release files live: `<root>/<name>/`."""
    return data_root(data_dir) / dataset_spec(name).name


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in chunks so a 170 MB archive never sits in memory twice. Only a regular file is
    hashed (UnusableFile otherwise): a link to /dev/zero would be hashed forever."""
    require_regular_file(path, "the cached file")
    hasher = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def verifies(path: Path, remote: RemoteFile) -> bool:
    """Whether `path` is a regular file with the checksum pinned for `remote`."""
    return path.is_file() and file_digest(path, remote.algorithm) == remote.hex_digest


def is_cached(name: str, data_dir: str | Path | None = None) -> bool:
    """Whether every file of dataset `name` is in the cache and verifies (hashes them: ~0.5 s for CIFAR)."""
    folder = dataset_folder(name, data_dir)
    return all(verifies(folder / remote.filename, remote) for remote in dataset_spec(name).files)


def partial_path(folder: Path, remote: RemoteFile) -> Path:
    """Where a download of `remote` stopped by Ctrl-C waits for the next fetch to take it up: `.<file>.partial`."""
    return Path(folder) / f".{remote.filename}.partial"


@dataclass(frozen=True)
class DatasetStatus:
    """How much of a dataset's release is in its folder, told from file sizes alone: `verify_dataset` hashes."""

    spec: DatasetSpec
    folder: Path
    state: str  # "cached" (every file, each of its registry size), "partial", "missing", "wrong size",
    # "not downloadable" (devicebench cannot download it: see DatasetSpec.not_downloadable), or SYNTHETIC_ONLY for a
    # dataset devicebench cannot read (nothing to download)
    present_bytes: int  # whole files of the right size, plus downloads kept to be taken up

    def describe(self) -> str:
        if self.state == "partial":
            return f"partial ({megabytes(self.present_bytes)} of {megabytes(self.spec.size_bytes)} MB)"
        return self.state


def dataset_status(name: str, data_dir: str | Path | None = None) -> DatasetStatus:
    """What of dataset `name` is in `<root>/<name>/`, without reading a byte of it (fast, even for 825 MB)."""
    spec, folder = dataset_spec(name), dataset_folder(name, data_dir)
    present_bytes, whole_files, wrong_size = 0, 0, False
    for remote in spec.files:
        size = _regular_file_size(folder / remote.filename)
        if size is not None and size == (remote.size_bytes or size):
            present_bytes, whole_files = present_bytes + size, whole_files + 1
        elif size is not None or (folder / remote.filename).exists():
            wrong_size = True  # the wrong size, or not a regular file at all
        else:
            present_bytes += _regular_file_size(partial_path(folder, remote)) or 0
    if spec.real_data_needs:
        return DatasetStatus(spec, folder, SYNTHETIC_ONLY, 0)
    state = ("not downloadable" if spec.not_downloadable else "wrong size" if wrong_size
             else "cached" if whole_files == len(spec.files) else "partial" if present_bytes else "missing")
    return DatasetStatus(spec, folder, state, present_bytes)


def verify_dataset(name: str, data_dir: str | Path | None = None) -> dict[str, str | None]:
    """Each release file of `name` in its folder, hashed against its pinned checksum: filename -> None when it
    verifies, else what is wrong. Files that are not there are left out (`dataset_status` says what is missing)."""
    folder = dataset_folder(name, data_dir)
    checked: dict[str, str | None] = {}
    for remote in dataset_spec(name).files:
        path = folder / remote.filename
        if not path.exists():
            continue
        try:
            found = file_digest(path, remote.algorithm)
        except (UnusableFile, OSError) as error:
            checked[remote.filename] = f"cannot be read: {getattr(error, 'strerror', None) or error}"
            continue
        checked[remote.filename] = None if found == remote.hex_digest else (
            f"checksum mismatch: expected {remote.checksum}, found {remote.algorithm}:{found}")
    return checked


def managed_paths(name: str, data_dir: str | Path | None = None) -> list[Path]:
    """What devicebench put in dataset `name`'s folder: its release files, downloads kept or left behind
    (`.<file>.partial`, `.<file>.*.partial`) and what reading it made (`derived`). Nothing else there is touched.
    A folder that is a symbolic link is refused (DataFolderIsALink): it leads into a folder of someone else's."""
    spec, folder = dataset_spec(name), dataset_folder(name, data_dir)
    if folder.is_symlink():
        raise DataFolderIsALink(
            f"{folder} is a symbolic link (to {os.readlink(folder)}), not a folder devicebench made: what it would "
            "remove there may be another program's or yours, so nothing was removed. Remove the link itself with "
            f"`rm {folder}` if its dataset is no longer wanted")
    if not folder.is_dir():
        return []
    patterns = [pattern for remote in spec.files
                for pattern in (remote.filename, f".{remote.filename}.partial", f".{remote.filename}.*.partial")]
    return sorted({path for pattern in (*patterns, *spec.derived) for path in folder.glob(pattern)})


class DataFolderIsALink(DevicebenchError, RuntimeError):
    """A dataset's folder is a symbolic link: devicebench removes files only from a folder of its own."""


def remove_dataset(name: str, data_dir: str | Path | None = None) -> int:
    """Delete `managed_paths(name)`, and the dataset's folder if that leaves it empty; the bytes freed."""
    freed = 0
    for path in managed_paths(name, data_dir):
        if path.is_dir() and not path.is_symlink():
            freed += sum(entry.lstat().st_size for entry in path.rglob("*") if not entry.is_dir())
            shutil.rmtree(path)
        else:
            freed += path.lstat().st_size
            path.unlink()
    folder = dataset_folder(name, data_dir)
    with contextlib.suppress(OSError):  # not empty (the user's own files), or not there: left as it is
        folder.rmdir()
    return freed


def megabytes(size_bytes: int) -> str:
    """`size_bytes` in decimal MB, as people quote download sizes: 11.6, 170, 825."""
    value = size_bytes / MEGABYTE
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _regular_file_size(path: Path) -> int | None:
    """The size of the regular file at `path` (a link to one counts), or None when there is none."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def fetch(remote: RemoteFile, folder: Path, *, progress: bool = True, timeout_s: float = STALL_TIMEOUT_S,
          deadline_s: float | None = DOWNLOAD_DEADLINE_S) -> Path:
    """Return `folder/remote.filename`, verified, downloading it from the first mirror that serves it intact.

    `timeout_s`: how long connecting or any one read may wait; `deadline_s`: how long each mirror has to deliver
    the whole file, attempts included (None: no limit). A data folder that takes no more bytes (full, read-only)
    ends the search at once: no other mirror can help.
    """
    folder = Path(folder)
    target = folder / remote.filename
    failures: list[tuple[str, str]] = []
    try:
        if _cached(target, remote):
            return target
        _writing(folder, folder.mkdir, parents=True, exist_ok=True)
        for url in remote.urls:
            reason = _download(url, remote, target, progress=progress, timeout_s=timeout_s, deadline_s=deadline_s)
            if reason is None:
                return target
            failures.append((url, reason))
    except _CacheUnusable as error:
        failures = [(url, f"not downloaded: {error}") for url in remote.urls]
        raise DataUnavailable(remote.filename, folder, failures, remote.checksum) from None
    raise DataUnavailable(remote.filename, folder, failures, remote.checksum)


class _CacheUnusable(Exception):
    """The data folder cannot hold the file (full, read-only, unreadable); the message says which and what to do."""


def _writing(folder: Path, operation: Callable[..., T], *arguments: Any, **options: Any) -> T:
    """`operation(*arguments, **options)`, an operation on the data folder: its OSError becomes _CacheUnusable."""
    try:
        return operation(*arguments, **options)
    except OSError as error:
        raise _CacheUnusable(_unwritable(folder, error)) from None


def _cached(target: Path, remote: RemoteFile) -> bool:
    """Whether `target` is already in the cache and verifies; a corrupt copy is deleted, with a warning."""
    if not target.exists():
        return False
    try:
        found = file_digest(target, remote.algorithm)
    except UnusableFile as error:  # a device, a FIFO, a folder, or a link to one: never read, never deleted
        raise _CacheUnusable(
            f"{error}; remove {target} from the cache, or choose another data folder with --data-dir or "
            f"${DATA_DIR_ENVIRONMENT_VARIABLE}"
        ) from None
    except OSError as error:  # unreadable
        raise _CacheUnusable(
            f"{target} is in the cache but cannot be read ({error.strerror or error}); remove it, or choose another "
            f"data folder with --data-dir or ${DATA_DIR_ENVIRONMENT_VARIABLE}"
        ) from None
    if found == remote.hex_digest:
        return True
    corrupt = f"{target} is corrupt (expected {remote.checksum}, found {remote.algorithm}:{found})"
    try:
        target.unlink()
    except OSError as error:
        raise _CacheUnusable(f"{corrupt} and cannot be deleted: {_unwritable(target.parent, error)}") from None
    warnings.warn(f"{corrupt}; deleted it, downloading it again", stacklevel=3)
    return False


class _PartialFile:
    """The hidden temporary file a download streams into, hashed as it grows; only a verified one is renamed.

    It is private to this download (a random name), so that two processes fetching the same file never write into
    one. A download kept from an earlier fetch (`partial_path`) is claimed by renaming it to that private name, and
    continued: its bytes are hashed, and the first request asks for the rest."""

    def __init__(self, folder: Path, remote: RemoteFile) -> None:
        self.folder = folder
        self.algorithm = remote.algorithm
        self.kept_path = partial_path(folder, remote)
        handle, name = _writing(folder, tempfile.mkstemp, dir=folder, prefix=f".{remote.filename}.",
                                suffix=".partial")
        self.path = Path(name)
        self.expected_bytes = remote.size_bytes
        if not self.kept_path.is_symlink() and _regular_file_size(self.kept_path):
            os.close(handle)
            try:
                os.replace(self.kept_path, self.path)
            except FileNotFoundError:
                pass  # another process claimed it first: this one starts afresh
            except OSError as error:
                self.path.unlink(missing_ok=True)
                raise _CacheUnusable(_unwritable(folder, error)) from None
            handle = self._claimed(_writing(folder, os.open, self.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)))
        self._file = os.fdopen(handle, "wb")
        self.arrived_bytes = 0  # every byte any attempt brought, kept or not: whether retrying still helps
        self.oversized = False  # the server sent (or announced) more bytes than the file has
        self.moved = False
        self.hasher = hashlib.new(self.algorithm, usedforsecurity=False)
        self.received_bytes = self.resumed_bytes = self._hash_kept_bytes()

    def _claimed(self, handle: int) -> int:
        """`handle`, open on a kept download, if it may be taken up; else a new, empty file's in its place.

        It is written to and may be truncated, so it must be this folder's alone: a regular file with no other name
        (a hard link would make a file elsewhere, outside the data folder, the one written). One longer than the
        whole file is no beginning of it: it is dropped unread, not hashed (it may be 50 GB)."""
        info = os.fstat(handle)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size <= (self.expected_bytes or math.inf):
            return handle
        os.close(handle)
        _writing(self.folder, self.path.unlink)  # the name only: another name of a hard link keeps its bytes
        return _writing(self.folder, os.open, self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL
                        | getattr(os, "O_NOFOLLOW", 0), 0o600)

    def _hash_kept_bytes(self) -> int:
        """Hash the bytes an earlier fetch kept in the file (none for a new one); their count. Ends at the end."""
        with open(self.path, "rb") as kept:
            while chunk := kept.read(CHUNK_BYTES):
                self.hasher.update(chunk)
        return _writing(self.folder, self._file.seek, 0, os.SEEK_END)

    def restart(self) -> None:
        """Forget the bytes received: the server is sending the whole file again."""
        if self.received_bytes:
            _writing(self.folder, self._file.seek, 0)
            _writing(self.folder, self._file.truncate)
        self.hasher = hashlib.new(self.algorithm, usedforsecurity=False)
        self.received_bytes = self.resumed_bytes = 0

    def append(self, chunk: bytes) -> None:
        _writing(self.folder, self._file.write, chunk)
        self.hasher.update(chunk)
        self.received_bytes += len(chunk)
        self.arrived_bytes += len(chunk)

    def move_to(self, target: Path) -> None:
        """Put the whole file, on disk for good, at `target`, atomically."""
        _writing(self.folder, self._file.flush)
        _writing(self.folder, os.fsync, self._file.fileno())  # a power cut after the rename keeps every byte
        _writing(self.folder, self._file.close)
        _writing(self.folder, os.replace, self.path, target)
        self.moved = True

    def close(self, *, keep: bool) -> None:
        """Close it, and either keep its bytes at `kept_path` for the next fetch or delete it; gone after move_to."""
        if self.moved:
            return
        try:
            self._file.close()
        except OSError:
            keep = False  # the bytes it could not flush (a full disk) cannot be trusted, nor kept
        if keep and self.received_bytes:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.kept_path)
                return
        self.path.unlink(missing_ok=True)


def _download(url: str, remote: RemoteFile, target: Path, *, progress: bool, timeout_s: float,
              deadline_s: float | None) -> str | None:
    """Download `url` to `target` through a verified temporary file; None on success, else why it failed.

    A transfer cut off midway is taken up where it stopped (an HTTP Range request) or, from a server that ignores
    ranges, from the start: up to DOWNLOAD_ATTEMPTS requests, as long as each one brings new bytes, all within
    `deadline_s`. Stopped by Ctrl-C, or failing to add to bytes an earlier fetch kept, it keeps what it has for the
    next fetch to take up. A server sending more bytes than the file has is stopped there, and its bytes deleted.
    """
    partial = _PartialFile(target.parent, remote)
    interrupted = False
    try:
        with _progress_bar(enabled=progress) as bar, _Deadline(deadline_s) as deadline:
            task = bar.add_task(remote.filename, total=remote.size_bytes, completed=partial.received_bytes)

            def show(received_bytes: int, expected_bytes: int | None) -> None:
                bar.update(task, completed=received_bytes, total=expected_bytes or remote.size_bytes)

            # kept whole (stopped just before its move into place): nothing is left to ask for
            already_whole = bool(partial.resumed_bytes) and partial.resumed_bytes == remote.size_bytes
            for attempt in range(1, 0 if already_whole else DOWNLOAD_ATTEMPTS + 1):
                arrived_before = partial.arrived_bytes
                reason = _request(url, partial, timeout_s=timeout_s, show=show, deadline=deadline)
                kept = (f"; kept its first {partial.received_bytes:,} bytes for the next fetch"
                        if partial.resumed_bytes else "")
                if deadline.passed.is_set() and partial.received_bytes != remote.size_bytes:
                    return (f"gave up after {deadline_s:g} s, the time a URL has to deliver the file, with "
                            f"{partial.received_bytes:,} bytes received") + kept
                if partial.oversized:
                    partial.restart()
                    return f"{reason}; the downloaded file was deleted"
                if reason is None:
                    break
                if partial.arrived_bytes == arrived_before or attempt == DOWNLOAD_ATTEMPTS:
                    return (reason if attempt == 1 else f"{reason} (gave up after {attempt} attempts)") + kept
                time.sleep(RETRY_PAUSE_S)
        deleted = "; the downloaded file was deleted"
        if partial.resumed_bytes:
            deleted += (f" (it continued {partial.resumed_bytes:,} bytes an earlier, interrupted download kept; "
                        "the next fetch starts afresh)")
        if remote.size_bytes is not None and partial.received_bytes != remote.size_bytes:
            problem = f"size mismatch: expected {remote.size_bytes} bytes, received {partial.received_bytes}{deleted}"
            partial.restart()
            return problem
        actual = partial.hasher.hexdigest()
        if actual != remote.hex_digest:
            partial.restart()
            return f"checksum mismatch: expected {remote.checksum}, got {remote.algorithm}:{actual}{deleted}"
        partial.move_to(target)
        return None
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:  # a new download that failed is never left behind; one stopped by Ctrl-C or resumed is kept
        partial.close(keep=interrupted or partial.resumed_bytes > 0)


def _request(
    url: str, partial: _PartialFile, *, timeout_s: float, show: Callable[[int, int | None], None], deadline: _Deadline
) -> str | None:
    """One request for the bytes `partial` still lacks; None once it holds the whole file, else why not. Never more
    than the file's size is read: a server sending more is stopped there (`partial.oversized`)."""
    headers = {"User-Agent": "devicebench"}
    if partial.received_bytes:
        headers["Range"] = f"bytes={partial.received_bytes}-"  # resume where the last attempt stopped
    expected_bytes = None
    try:
        with _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout_s) as response:
            if response.status == HTTPStatus.PARTIAL_CONTENT:
                sent = response.headers.get("Content-Range", "")
                if not sent.startswith(f"bytes {partial.received_bytes}-"):
                    return f"asked for the bytes from {partial.received_bytes} on, the server sent {sent!r}"
            else:
                partial.restart()  # the server ignores ranges: it is sending the whole file again
            if response.length is not None:  # Content-Length, or None when the server does not say
                expected_bytes = partial.received_bytes + response.length
            size = partial.expected_bytes
            if size is not None and (expected_bytes or 0) > size:
                partial.oversized = True
                return f"the server announced {expected_bytes:,} bytes, more than the file's {size:,}: not read"
            with deadline.watching(response):
                # one byte beyond the file's end is asked for, to tell a server that sends more
                while chunk := response.read(CHUNK_BYTES if size is None else min(
                        CHUNK_BYTES, size - partial.received_bytes + 1)):
                    if size is not None and partial.received_bytes + len(chunk) > size:
                        partial.oversized = True
                        return f"the server sent more than the file's {size:,} bytes: stopped reading there"
                    partial.append(chunk)
                    show(partial.received_bytes, expected_bytes)
    except InsecureRedirect as error:
        return str(error.reason)
    except urllib.error.HTTPError as error:
        error.close()  # the error page's body is of no use to us
        return f"HTTP {error.code} {error.reason}"
    except urllib.error.URLError as error:
        return _describe_network_error(error.reason, timeout_s)
    except (OSError, http.client.HTTPException, ValueError) as error:  # reset, timeout mid-body, malformed URL
        return _describe_network_error(error, timeout_s)
    # http.client returns a short body silently when the server closes early, so count the bytes ourselves
    if expected_bytes is not None and partial.received_bytes < expected_bytes:
        return f"truncated: received {partial.received_bytes} of {expected_bytes} bytes"
    return None


class _Deadline:
    """The time a URL has to deliver a file, attempts included. When it passes, a timer thread (so that no clock is
    read here: only engine/timing.py reads one) marks it passed and shuts down the connection being read, whose
    read then ends at once: a server sending a byte now and then, never stalling, cannot outlive it."""

    def __init__(self, seconds: float | None) -> None:
        self.passed = threading.Event()
        self._response: Any = None  # the response being read, whose connection the timer shuts down
        self._lock = threading.Lock()  # so the timer never shuts a connection down as it is closed (its fd reused)
        self._timer = None if seconds is None else threading.Timer(seconds, self._pass)
        if self._timer is not None:
            self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exception: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    @contextlib.contextmanager
    def watching(self, response: Any) -> Iterator[None]:
        """Shut `response`'s connection down if the deadline passes while it is read (or has passed already)."""
        with self._lock:
            self._response = response
            if self.passed.is_set():
                _shut_down(response)
        try:
            yield
        finally:
            with self._lock:
                self._response = None

    def _pass(self) -> None:
        with self._lock:
            self.passed.set()
            if self._response is not None:
                _shut_down(self._response)


def _shut_down(response: Any) -> None:
    """End the connection under `response` both ways: a read blocked on it, in another thread, returns at once."""
    with contextlib.suppress(OSError, ValueError):  # closed already
        with socket.fromfd(response.fileno(), socket.AF_INET, socket.SOCK_STREAM) as connection:  # a duplicate fd
            connection.shutdown(socket.SHUT_RDWR)


class InsecureRedirect(urllib.error.URLError):
    """A server sent an HTTPS download on to a URL that is not HTTPS."""


class HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect from HTTPS only to HTTPS: the rule is HTTPS only, so that what is downloaded, and whether
    it is downloaded at all, cannot be changed on the way (the checksum guards the bytes, not the connection)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(req.full_url).scheme == "https" and urllib.parse.urlsplit(newurl).scheme != "https":
            fp.close()
            raise InsecureRedirect(f"redirected (HTTP {code}) to {newurl}, which is not HTTPS: refused, since "
                                   "devicebench downloads over HTTPS only")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(HttpsOnlyRedirects)  # urlopen's opener, with redirects kept on HTTPS


def _unwritable(folder: Path, error: OSError) -> str:
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"the disk holding the data folder {folder} is full ({error.strerror or error}); free some space there, "
            f"or choose another folder with --data-dir or ${DATA_DIR_ENVIRONMENT_VARIABLE}"
        )
    return (
        f"the data folder {folder} cannot be written ({error.strerror or error}); "
        f"choose another with --data-dir or ${DATA_DIR_ENVIRONMENT_VARIABLE}"
    )


def _describe_network_error(error: object, timeout_s: float) -> str:
    if isinstance(error, TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, http.client.IncompleteRead):
        return f"truncated: connection closed after {len(error.partial)} bytes"
    return f"{type(error).__name__}: {error}"


def _progress_bar(*, enabled: bool) -> Progress:
    """Bytes, speed and time left on stderr; vanishes when done, so stdout stays for results. Only on a terminal: in
    a pipe or a log file it cannot vanish, and rich leaves a blank line for each download tried (two before a
    fallback to synthetic data from two mirrors, at the top of the output)."""
    console = Console(stderr=True)
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not (enabled and (console.is_terminal or console.is_jupyter)),
    )
