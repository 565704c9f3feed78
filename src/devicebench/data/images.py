"""Image datasets that stay on disk: a folder of class subfolders, or the Microsoft cats-vs-dogs (PetImages) zip.

Indexing lists the files and checks each one (for a folder, that it decodes to its end: a truncated file is left
out and counted like any unreadable one; the JFIF marker for PetImages); the pixels are decoded later, one image
at a time, by `decode_image` (in DataLoader workers), to the size each workload wants.
Nothing is ever extracted from a zip: members are read straight out of it.

    python -c "from devicebench.data.images import read_image_folder; print(read_image_folder('DIR'))"
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from devicebench.data.arrays import DataSource
from devicebench.data.formats import DataFormatError
from devicebench.files import expanded

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")  # matched case-insensitively
# The Pillow formats those suffixes name. Restricting Image.open to them means a file that merely ends in .jpg is
# never handed to another plugin (EPS, for one, runs Ghostscript).
ACCEPTED_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP")
# What Pillow raises for a file it cannot read: a bad header (UnidentifiedImageError, an OSError; SyntaxError from
# some plugins), truncated data (OSError, EOFError), a mode it cannot convert (ValueError), too many pixels (the
# warning too: `_open_image` raises it).
PILLOW_READ_ERRORS = (
    OSError,
    SyntaxError,
    EOFError,
    ValueError,
    Image.DecompressionBombError,
    Image.DecompressionBombWarning,
)

TRAIN_SPLIT_NAMES = ("train", "training_set")  # the second is the seeds' layout
TEST_SPLIT_NAMES = ("test", "test_set", "val", "validation")  # the first one present is used
EXPECTED_LAYOUT = (
    "an image folder is laid out as DIR/train/<class>/<images> and DIR/test/<class>/<images> "
    "(training_set/ and test_set/ are accepted too)"
)

PET_IMAGES_MEMBER = re.compile(r"PetImages/(Cat|Dog)/([0-9]+)\.jpg")  # the names tensorflow-datasets accepts
PET_IMAGES_CLASSES = ("cat", "dog")  # label 0, 1: the folders Cat/ and Dog/, lower-cased as tensorflow-datasets does
# tensorflow-datasets (image_classification/cats_vs_dogs.py) drops a member when b"JFIF" is not in `fobj.peek(10)`,
# which drops 1,738 files of kagglecatsanddogs_5340.zip. Its fobj is a zipfile.ZipExtFile, whose peek returns up
# to 512 buffered bytes whatever it is asked for, so the test it really makes is on the first 512 bytes: reading
# those gives the same answer without depending on peek's buffering. Checking only bytes 0-9 would also drop
# JPEGs that start with an Exif segment and carry their JFIF segment after it.
JFIF_MARKER = b"JFIF"
JFIF_SEARCH_BYTES = 512


# Open zips, one per (process, path). A DataLoader worker forked from a process that had the zip open inherits
# its handle, and with it the file offset the two processes share; keying by pid makes each process open its own.
# Kept out of ImageFiles so that pickling one (into a spawned worker) needs no special handling.
_OPEN_ZIPS: dict[tuple[int, Path], zipfile.ZipFile] = {}


def _open_zip(path: Path) -> zipfile.ZipFile:
    key = (os.getpid(), path)
    if key not in _OPEN_ZIPS:
        _OPEN_ZIPS[key] = zipfile.ZipFile(path)
    return _OPEN_ZIPS[key]


@dataclass(frozen=True, eq=False)
class ImageFiles:
    """One split of images on disk, read lazily: files under a folder, or members of a zip."""

    container: Path  # a folder, or a .zip file
    members: tuple[str, ...]  # posix paths relative to the folder, or zip member names
    labels: np.ndarray  # int64 class index, one per member

    def __post_init__(self) -> None:
        if self.labels.dtype != np.int64 or self.labels.shape != (len(self.members),):
            raise ValueError(
                f"{self.container}: want int64 labels of shape ({len(self.members)},), "
                f"got {self.labels.dtype} {self.labels.shape}"
            )

    def __len__(self) -> int:
        return len(self.members)

    @property
    def is_zip(self) -> bool:
        return not self.container.is_dir()

    def read_bytes(self, index: int) -> bytes:
        """The encoded bytes of image `index`, as stored."""
        member = self.members[index]
        if not self.is_zip:
            return (self.container / member).read_bytes()
        try:
            return _open_zip(self.container).read(member)
        except zipfile.BadZipFile as error:  # a CRC mismatch or a damaged local header
            raise DataFormatError(f"{self.describe(index)}: cannot be read from the zip ({error})") from error

    def describe(self, index: int) -> str:
        """A name for image `index` that a person can find: "DIR/train/cat/3.jpg" or "ZIP:PetImages/Cat/3.jpg"."""
        member = self.members[index]
        return f"{self.container}:{member}" if self.is_zip else str(self.container / member)


def decode_image(data: bytes, *, channels: int, size: tuple[int, int], name: str) -> np.ndarray:
    """Decode encoded image bytes to uint8 (channels, height, width); `size` is (height, width), `name` for errors.

    Any mode converts: palette, RGBA (alpha dropped), CMYK, grey. 16-bit grey goes through Pillow's conversion,
    which clips values above 255 rather than scaling them, as Keras' load_img does.
    """
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels}")
    height, width = size
    try:
        with _strict_decoding(), _open_image(io.BytesIO(data)) as image:
            converted = image.convert("L" if channels == 1 else "RGB")
        # NEAREST, not BILINEAR: the seeds' tutorial loaded images with Keras flow_from_directory, whose
        # interpolation defaults to "nearest"; we resize the same way so the pixels match.
        resized = converted.resize((width, height), Image.Resampling.NEAREST)
        pixels = np.array(resized, dtype=np.uint8)  # a writable copy: torch.from_numpy needs one
    except PILLOW_READ_ERRORS as error:
        raise DataFormatError(f"{name}: not a readable image ({_describe_pillow_error(error)})") from error
    if channels == 1:
        return np.ascontiguousarray(pixels[np.newaxis])
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))  # (H, W, C) -> (C, H, W)


def _open_image(source: str | Path | io.BytesIO) -> Image.Image:
    """Open an image's header, refusing one that declares more than Image.MAX_IMAGE_PIXELS pixels.

    Pillow raises DecompressionBombError only above twice its limit and merely warns between the two, after which
    decoding would allocate the pixels; an image that large is no photo to benchmark on, so the warning is an error
    here too. The limit itself is Pillow's and is never raised.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return Image.open(source, formats=ACCEPTED_FORMATS)


def _describe_pillow_error(error: Exception) -> str:
    if isinstance(error, UnidentifiedImageError):  # its own message ends in the repr of a BytesIO: of no use
        return f"cannot identify image file as one of {', '.join(ACCEPTED_FORMATS)}"
    if isinstance(error, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        return f"too many pixels, a possible decompression bomb: {error}"
    return str(error) or type(error).__name__


@contextlib.contextmanager
def _strict_decoding() -> Iterator[None]:
    """Decode with Pillow's LOAD_TRUNCATED_IMAGES off, whatever another library set it to: on, a truncated file
    decodes without an error, its missing rows grey, and would train as if it were an image."""
    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def _is_whole_image(path: Path) -> bool:
    """Whether Pillow reads `path` to its end: a header with a truncated or damaged body is not an image. A PNG's
    chunks are checked without inflating them (`verify`: lengths and CRCs); other formats are decoded, a JPEG at
    an eighth of its size (`draft`), which still reads every byte: about a millisecond for a photo."""
    try:
        with _strict_decoding(), _open_image(path) as image:
            if image.format == "PNG":
                image.verify()
            else:
                image.draft(image.mode, (1, 1))  # JPEG only: DCT scaling; other formats ignore it
                image.load()
        return True
    except PILLOW_READ_ERRORS:
        return False


@dataclass(frozen=True, eq=False, kw_only=True)
class ImageFolderDataset:
    """An image-classification dataset whose images stay on disk until a loader decodes them."""

    name: str  # the folder's name, or "cats-vs-dogs"
    source: DataSource = "real"  # shown in every table and stored in every result, as for ArrayDataset
    train: ImageFiles
    test: ImageFiles
    class_names: tuple[str, ...]  # index -> name
    origin: str  # where the images came from, and how many
    skipped: tuple[str, ...] = ()  # describe() of each image file left out as unreadable
    notes: tuple[str, ...] = ()  # things a user should be told: an empty class, files left out
    fallback_reason: ClassVar[None] = None  # real images are never a fallback; the runner asks every dataset

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __repr__(self) -> str:
        return (
            f"ImageFolderDataset({self.name!r}, source={self.source!r}, train={len(self.train)}, "
            f"test={len(self.test)}, classes={self.num_classes}, skipped={len(self.skipped)})"
        )


# ---------------------------------------------------------------------------------------------------------------
# A folder of class subfolders: DIR/train/<class>/* and DIR/test/<class>/*
# ---------------------------------------------------------------------------------------------------------------


def is_image_folder(directory: str | Path) -> bool:
    """Whether `directory` has a train split folder, so is an image folder rather than a download cache root."""
    return any((Path(directory) / name).is_dir() for name in TRAIN_SPLIT_NAMES)


def read_image_folder(directory: str | Path) -> ImageFolderDataset:
    """Index an image folder: classes are the train split's subfolders in alphabetical order, as in Keras."""
    directory = expanded(directory, "the data folder")
    if not directory.is_dir():
        raise DataFormatError(f"{directory}: no such directory; {EXPECTED_LAYOUT}")
    notes: list[str] = []
    train_folder = _find_split(directory, TRAIN_SPLIT_NAMES, "train", notes)
    test_folder = _find_split(directory, TEST_SPLIT_NAMES, "test", notes)

    class_names = tuple(_class_folder_names(train_folder))
    if not class_names:
        raise DataFormatError(f"{train_folder}: no class folders; {EXPECTED_LAYOUT}")
    unknown = sorted(set(_class_folder_names(test_folder)) - set(class_names))
    if unknown:
        raise DataFormatError(
            f"{test_folder}: class folder(s) {', '.join(map(repr, unknown))} not in {train_folder.name}/, whose "
            f"classes are {', '.join(map(repr, class_names))}; the test split's classes must be among the train split's"
        )

    splits, skipped = [], []
    for split_folder in (train_folder, test_folder):
        members, labels, unreadable = _index_split(directory, split_folder, class_names)
        if not members:
            raise DataFormatError(
                f"{split_folder}: no readable images in its class folders ({len(unreadable)} unreadable); "
                f"images are files ending in {', '.join(IMAGE_SUFFIXES)}; {EXPECTED_LAYOUT}"
            )
        counts = np.bincount(labels, minlength=len(class_names))
        notes.extend(
            f"class {class_name!r} has no readable images in {split_folder.name}"
            for class_name, count in zip(class_names, counts, strict=True)
            if count == 0
        )
        splits.append(ImageFiles(directory, tuple(members), np.asarray(labels, dtype=np.int64)))
        skipped.extend(unreadable)
    if skipped:
        notes.append(f"left out {len(skipped)} unreadable image file(s), the first {skipped[0]}")

    train, test = splits
    return ImageFolderDataset(
        name=directory.resolve().name,
        train=train,
        test=test,
        class_names=class_names,
        origin=f"{directory} (image folder: {len(train)} train, {len(test)} test images, {len(class_names)} classes)",
        skipped=tuple(skipped),
        notes=tuple(notes),
    )


def _find_split(directory: Path, names: tuple[str, ...], role: str, notes: list[str]) -> Path:
    """The first of `names` present under `directory`; a note when others are present too and go unused."""
    present = [name for name in names if (directory / name).is_dir()]
    if not present:
        raise DataFormatError(
            f"{directory}: no {role} split folder (looked for {', '.join(name + '/' for name in names)}); "
            f"{EXPECTED_LAYOUT}"
        )
    if len(present) > 1:
        notes.append(f"using {present[0]}/ as the {role} split; {', '.join(present[1:])}/ left unused")
    return directory / present[0]


def _class_folder_names(split_folder: Path) -> list[str]:
    return sorted(entry.name for entry in split_folder.iterdir() if entry.is_dir() and not entry.name.startswith("."))


def _index_split(
    directory: Path, split_folder: Path, class_names: tuple[str, ...]
) -> tuple[list[str], list[int], list[str]]:
    """(members relative to `directory`, their labels, unreadable files) of one split, by class then path."""
    members, labels, unreadable = [], [], []
    for label, class_name in enumerate(class_names):
        class_folder = split_folder / class_name
        if not class_folder.is_dir():  # a class the test split lacks: an empty class, noted by the caller
            continue
        for path in _image_paths(class_folder):
            if _is_whole_image(path):
                members.append(path.relative_to(directory).as_posix())
                labels.append(label)
            else:
                unreadable.append(str(path))
    return members, labels, unreadable


def _image_paths(class_folder: Path) -> list[Path]:
    """Files with an image suffix at any depth under `class_folder`, hidden ones left out, sorted by path."""
    found: list[Path] = []
    for folder, subfolders, filenames in os.walk(class_folder):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]  # prunes the walk
        found.extend(
            Path(folder, filename)
            for filename in filenames
            if not filename.startswith(".") and filename.lower().endswith(IMAGE_SUFFIXES)
        )
    return sorted(found, key=lambda path: path.as_posix())


# ---------------------------------------------------------------------------------------------------------------
# Microsoft cats vs dogs: kagglecatsanddogs_5340.zip, holding PetImages/Cat/<id>.jpg and PetImages/Dog/<id>.jpg
# ---------------------------------------------------------------------------------------------------------------


def read_pet_images(zip_path: Path, *, train_per_class: int = 4000, test_per_class: int = 1000) -> ImageFolderDataset:
    """Index the PetImages zip: per class, by numeric id, the first `train_per_class` valid images train and the
    next `test_per_class` test. The defaults give the seeds' 8,000 training and 2,000 validation images."""
    zip_path = Path(zip_path)
    valid_by_class: list[list[tuple[int, str]]] = [[] for _ in PET_IMAGES_CLASSES]  # (id, member name)
    skipped: list[str] = []
    try:
        with zipfile.ZipFile(zip_path) as archive:
            for info in archive.infolist():
                match = PET_IMAGES_MEMBER.fullmatch(info.filename)
                if match is None:  # the licence, the readme, Thumbs.db
                    continue
                with archive.open(info) as member:
                    head = member.read(JFIF_SEARCH_BYTES)
                if JFIF_MARKER in head:
                    valid_by_class[PET_IMAGES_CLASSES.index(match[1].lower())].append((int(match[2]), info.filename))
                else:
                    skipped.append(f"{zip_path}:{info.filename}")
    except zipfile.BadZipFile as error:  # a missing file stays a FileNotFoundError
        raise DataFormatError(f"{zip_path}: not a readable zip ({error})") from error

    wanted = train_per_class + test_per_class
    train_members, test_members = [], []
    for class_name, valid in zip(PET_IMAGES_CLASSES, valid_by_class, strict=True):
        if len(valid) < wanted:
            raise DataFormatError(
                f"{zip_path}: class {class_name!r} has {len(valid)} valid images, fewer than the {wanted} asked for "
                f"({train_per_class} train + {test_per_class} test per class)"
            )
        names_by_id = [name for _, name in sorted(valid)]
        train_members.append(names_by_id[:train_per_class])
        test_members.append(names_by_id[train_per_class:wanted])

    def split(members_by_class: list[list[str]], per_class: int) -> ImageFiles:
        members = tuple(name for names in members_by_class for name in names)
        return ImageFiles(zip_path, members, np.repeat(np.arange(len(PET_IMAGES_CLASSES), dtype=np.int64), per_class))

    train, test = split(train_members, train_per_class), split(test_members, test_per_class)
    notes = [f"skipped {len(skipped)} corrupt images (no JFIF header), as tensorflow-datasets does"] if skipped else []
    return ImageFolderDataset(
        name="cats-vs-dogs",
        train=train,
        test=test,
        class_names=PET_IMAGES_CLASSES,
        origin=f"{zip_path} (PetImages: {len(train)} train, {len(test)} test images, 2 classes)",
        skipped=tuple(skipped),
        notes=tuple(notes),
    )
