"""Readers for the datasets' release formats (MNIST IDX, CIFAR binary): bytes on disk in, numpy arrays out.

Nothing here unpickles, extracts to disk or follows a link; a file that does not match its format raises
`DataFormatError` naming the file and what was wrong.

    python -c "from devicebench.data.formats import read_idx as r; print(r('../shared/data/mnist/t10k-labels-idx1-ubyte.gz'))"
"""

from __future__ import annotations

import gzip
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, NamedTuple

import numpy as np


class DataFormatError(ValueError):
    """A file is not in the format it claims to be (bad header, wrong length, unsafe archive member)."""


class Splits(NamedTuple):
    """The four arrays of a released dataset: images uint8 (N, C, H, W), labels int64 (N,)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


# ---------------------------------------------------------------------------------------------------------------
# MNIST IDX: http://yann.lecun.com/exdb/mnist/ ("THE IDX FILE FORMAT")
# ---------------------------------------------------------------------------------------------------------------

# The third byte of the magic number names the element type; all multi-byte types are big-endian.
IDX_ELEMENT_TYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"

MNIST_FILES = {  # role -> file name in the MNIST release
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}


def read_idx(source: str | Path | BinaryIO) -> np.ndarray:
    """Read one IDX file (gzipped or not) into an array of its declared shape, in native byte order."""
    if isinstance(source, (str, Path)):
        name = str(source)
        raw = Path(source).read_bytes()
    else:
        name = str(getattr(source, "name", "<stream>"))
        raw = source.read()

    if raw[:2] == GZIP_MAGIC:  # sniffed rather than trusted to the suffix: a renamed file still reads
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:
            raise DataFormatError(f"{name}: not a complete gzip stream ({error})") from error

    if len(raw) < 4:
        raise DataFormatError(f"{name}: {len(raw)} bytes is too short for an IDX header (at least 4)")
    zero_bytes, type_code, ndim = raw[:2], raw[2], raw[3]
    if zero_bytes != b"\x00\x00" or type_code not in IDX_ELEMENT_TYPES or ndim == 0:
        raise DataFormatError(
            f"{name}: bad IDX magic number 0x{raw[:4].hex()} (want 0x0000TTDD with type TT in "
            f"{sorted(hex(code) for code in IDX_ELEMENT_TYPES)} and DD >= 1 dimensions)"
        )
    header_bytes = 4 + 4 * ndim
    if len(raw) < header_bytes:
        raise DataFormatError(f"{name}: header declares {ndim} dimensions but the file ends at byte {len(raw)}")
    dims = struct.unpack(f">{ndim}I", raw[4:header_bytes])
    element_type = IDX_ELEMENT_TYPES[type_code]
    expected_bytes = int(np.prod(dims, dtype=np.int64)) * element_type.itemsize
    actual_bytes = len(raw) - header_bytes
    if actual_bytes != expected_bytes:
        raise DataFormatError(
            f"{name}: dimensions {dims} need {expected_bytes} payload bytes but the file holds {actual_bytes} "
            f"({'truncated' if actual_bytes < expected_bytes else 'trailing data'})"
        )
    payload = np.frombuffer(raw, dtype=element_type, offset=header_bytes).reshape(dims)
    return payload.astype(element_type.newbyteorder("="))  # a writable copy in native byte order


def read_mnist(folder: Path) -> Splits:
    """Read the four MNIST release files from `folder`; images gain a channel axis: (N, 1, 28, 28)."""
    arrays = {role: read_idx(folder / filename) for role, filename in MNIST_FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        images_file, labels_file = MNIST_FILES[f"{split}_images"], MNIST_FILES[f"{split}_labels"]
        if images.ndim != 3 or images.dtype != np.uint8:
            raise DataFormatError(
                f"{folder / images_file}: want uint8 (N, rows, cols), got {images.dtype} {images.shape}"
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise DataFormatError(
                f"{folder / labels_file}: {labels.shape} labels for {len(images)} images in {images_file}"
            )
    return Splits(
        train_images=arrays["train_images"][:, np.newaxis],
        train_labels=arrays["train_labels"].astype(np.int64),
        test_images=arrays["test_images"][:, np.newaxis],
        test_labels=arrays["test_labels"].astype(np.int64),
    )


# ---------------------------------------------------------------------------------------------------------------
# CIFAR binary release: https://www.cs.toronto.edu/~kriz/cifar.html ("Binary version")
# ---------------------------------------------------------------------------------------------------------------

CIFAR_IMAGE_SHAPE = (3, 32, 32)  # channels R, G, B; each a row-major 32 x 32 plane
CIFAR_PIXEL_BYTES = 3 * 32 * 32  # 3072 bytes per image
CIFAR_MAX_MEMBER_RECORDS = 50_000  # CIFAR-100's train.bin, the largest member of either release


@dataclass(frozen=True)
class CifarLayout:
    """Where the records sit inside a CIFAR binary archive and how each record starts."""

    archive_name: str  # the .tar.gz as released
    train_members: tuple[str, ...]  # read in this order and concatenated
    test_members: tuple[str, ...]
    label_bytes: int  # label bytes before the pixels; the last one is the label we use
    num_classes: int

    @property
    def record_bytes(self) -> int:
        return self.label_bytes + CIFAR_PIXEL_BYTES


CIFAR10_BINARY = CifarLayout(
    archive_name="cifar-10-binary.tar.gz",
    train_members=tuple(f"cifar-10-batches-bin/data_batch_{index}.bin" for index in range(1, 6)),
    test_members=("cifar-10-batches-bin/test_batch.bin",),
    label_bytes=1,
    num_classes=10,
)
CIFAR100_BINARY = CifarLayout(
    archive_name="cifar-100-binary.tar.gz",
    train_members=("cifar-100-binary/train.bin",),
    test_members=("cifar-100-binary/test.bin",),
    label_bytes=2,  # coarse (20 superclasses) then fine (100 classes): we train on the fine label
    num_classes=100,
)


def decode_cifar_records(raw: bytes, layout: CifarLayout, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Split concatenated CIFAR records into images uint8 (N, 3, 32, 32) and labels int64 (N,)."""
    if len(raw) == 0 or len(raw) % layout.record_bytes:
        raise DataFormatError(
            f"{name}: {len(raw)} bytes is not a whole number of {layout.record_bytes}-byte records "
            f"({layout.label_bytes} label byte(s) + {CIFAR_PIXEL_BYTES} pixel bytes each)"
        )
    records = np.frombuffer(raw, dtype=np.uint8).reshape(-1, layout.record_bytes)
    labels = records[:, layout.label_bytes - 1].astype(np.int64)
    if labels.max() >= layout.num_classes:
        raise DataFormatError(f"{name}: label {labels.max()} out of range for {layout.num_classes} classes")
    images = np.ascontiguousarray(records[:, layout.label_bytes :]).reshape(-1, *CIFAR_IMAGE_SHAPE)
    return images, labels


def read_cifar_binary(archive_path: str | Path, layout: CifarLayout) -> Splits:
    """Read the train and test records straight out of a CIFAR binary .tar.gz, without extracting it."""
    archive_path = Path(archive_path)
    wanted = set(layout.train_members + layout.test_members)
    member_bytes: dict[str, bytes] = {}
    try:
        # "r|gz" reads the archive front to back once: no seeking back through 170 MB of gzip
        with tarfile.open(archive_path, mode="r|gz") as archive:
            for member in archive:
                _check_member_is_safe(member, archive_path, layout)
                if member.name in wanted:
                    if not member.isfile():
                        raise DataFormatError(f"{archive_path}: member {member.name!r} is not a regular file")
                    member_file = archive.extractfile(member)
                    assert member_file is not None  # always a file object for a regular member
                    member_bytes[member.name] = member_file.read()
    except (tarfile.TarError, EOFError, zlib.error) as error:  # a missing file stays a FileNotFoundError
        raise DataFormatError(f"{archive_path}: not a readable .tar.gz ({error})") from error

    missing = sorted(wanted - member_bytes.keys())
    if missing:
        raise DataFormatError(f"{archive_path}: missing member(s) {missing}")

    def read_split(members: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        decoded = [decode_cifar_records(member_bytes[name], layout, f"{archive_path}:{name}") for name in members]
        return np.concatenate([images for images, _ in decoded]), np.concatenate([labels for _, labels in decoded])

    train_images, train_labels = read_split(layout.train_members)
    test_images, test_labels = read_split(layout.test_members)
    return Splits(train_images, train_labels, test_images, test_labels)


def _check_member_is_safe(member: tarfile.TarInfo, archive_path: Path, layout: CifarLayout) -> None:
    """A CIFAR release holds only plain files and folders with relative names, none larger than its largest
    member; anything else is tampering, refused before a byte of the member is read."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        problem = "points outside the archive"
    elif not (member.isfile() or member.isdir()):
        problem = "is a link or special file, not a regular file"
    elif member.size > CIFAR_MAX_MEMBER_RECORDS * layout.record_bytes:  # read whole into memory: cap it first
        problem = f"declares {member.size:,} bytes, more than {CIFAR_MAX_MEMBER_RECORDS:,} records"
    else:
        return
    raise DataFormatError(
        f"{archive_path}: member {member.name!r} {problem}; this is not the CIFAR binary release: delete it and "
        "devicebench downloads a verified copy"
    )


# ---------------------------------------------------------------------------------------------------------------

CIFAR_LAYOUTS = {"cifar10": CIFAR10_BINARY, "cifar100": CIFAR100_BINARY}


def read_release(name: str, folder: Path) -> Splits:
    """Read dataset `name` ("mnist", "cifar10", "cifar100") from the folder holding its release files."""
    if name == "mnist":
        return read_mnist(folder)
    layout = CIFAR_LAYOUTS[name]
    return read_cifar_binary(folder / layout.archive_name, layout)
