"""The dataset catalog: each dataset devicebench knows (shapes, classes, sizes), the files of its release with their
URLs and pinned checksums, where its cache lives, and what of it is there (status, verification, removal). The files
are downloaded by download.py.

    python -c "from devicebench.data.sources import DATASETS, data_root; print(data_root(), list(DATASETS))"
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from devicebench.data.download import (
    DataUnavailable,
    RemoteFile,
    file_digest,
    partial_path,
    regular_file_size,
)
from devicebench.data.formats import CIFAR10_BINARY, CIFAR100_BINARY, MNIST_FILES
from devicebench.errors import DevicebenchError
from devicebench.files import DATA_VARIABLE, UnusableFile, expanded, user_folder

DATA_DIR_ENVIRONMENT_VARIABLE = DATA_VARIABLE
# `--data auto` in the quick suite downloads a dataset that is not cached only up to this size: MNIST (11.6 MB) and
# Covertype (11 MB) are fetched, the larger ones run on synthetic data until `devicebench data fetch` gets them
QUICK_SUITE_DOWNLOAD_LIMIT_BYTES = 15_000_000
SYNTHETIC_ONLY = "synthetic only"  # the state of a dataset devicebench cannot read: nothing to download
MEGABYTE = 1_000_000  # bytes; sizes are shown in decimal MB, as the releases state them


class RealDataUnreadable(DataUnavailable):
    """Real data was asked for (`--data real`) of a dataset devicebench cannot read (`DatasetSpec.real_data_needs`);
    the message says what it would take. A DataUnavailable, so that the runs of it fail with it as with any."""

    def __init__(self, title: str, needs: str) -> None:
        self.title, self.needs = title, needs
        self.filename, self.folder, self.failures, self.checksum = title, None, (), ""  # no file was tried
        RuntimeError.__init__(
            self,
            f"devicebench cannot read the real {title}: that needs {needs}. Its runs train on "
            f"synthetic data of the same shapes: use --data synthetic (or auto)",
        )

    def __reduce__(self) -> tuple[type[RealDataUnreadable], tuple[str, str]]:
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

    def __reduce__(
        self,
    ) -> tuple[type[NotDownloadable], tuple[str, Path | None, str]]:  # see DataUnavailable.__reduce__
        return (NotDownloadable, (self.title, self.folder, self.how))


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
        train_size=464_809,  # 80% of the 581,012 rows, chosen by a fixed hash of the line number (data/tabular.py)
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
        return expanded(data_dir, "--data-dir")
    from_environment = os.environ.get(DATA_DIR_ENVIRONMENT_VARIABLE)
    if from_environment:
        return expanded(from_environment, f"${DATA_DIR_ENVIRONMENT_VARIABLE}")
    return user_folder("cache", "the datasets") / "data"


def dataset_folder(name: str, data_dir: str | Path | None = None) -> Path:
    """Where dataset `name`'s release files live: `<root>/<name>/`."""
    return data_root(data_dir) / dataset_spec(name).name


def verifies(path: Path, remote: RemoteFile) -> bool:
    """Whether `path` is a regular file with the checksum pinned for `remote`."""
    return path.is_file() and file_digest(path, remote.algorithm) == remote.hex_digest


def is_cached(name: str, data_dir: str | Path | None = None) -> bool:
    """Whether every file of dataset `name` is in the cache and verifies (hashes them: ~0.5 s for CIFAR)."""
    folder = dataset_folder(name, data_dir)
    return all(verifies(folder / remote.filename, remote) for remote in dataset_spec(name).files)


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
        size = regular_file_size(folder / remote.filename)
        if size is not None and size == (remote.size_bytes or size):
            present_bytes, whole_files = present_bytes + size, whole_files + 1
        elif size is not None or (folder / remote.filename).exists():
            wrong_size = True  # the wrong size, or not a regular file at all
        else:
            present_bytes += regular_file_size(partial_path(folder, remote)) or 0
    if spec.real_data_needs:
        return DatasetStatus(spec, folder, SYNTHETIC_ONLY, 0)
    state = (
        "not downloadable"
        if spec.not_downloadable
        else "wrong size"
        if wrong_size
        else "cached"
        if whole_files == len(spec.files)
        else "partial"
        if present_bytes
        else "missing"
    )
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
        checked[remote.filename] = (
            None
            if found == remote.hex_digest
            else (f"checksum mismatch: expected {remote.checksum}, found {remote.algorithm}:{found}")
        )
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
            f"`rm {folder}` if its dataset is no longer wanted"
        )
    if not folder.is_dir():
        return []
    patterns = [
        pattern
        for remote in spec.files
        for pattern in (remote.filename, f".{remote.filename}.partial", f".{remote.filename}.*.partial")
    ]
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
