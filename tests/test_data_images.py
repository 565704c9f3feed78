"""Image folders and the PetImages zip: indexing, skipping unreadable files, decoding, and reading from workers.

Every image here is written by Pillow into tmp_path; the zip is also served from a loopback HTTP server.

    python -m pytest tests/test_data_images.py -q
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import io
import pickle
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from devicebench import RunConfig, planning, runner
from devicebench.data import DataUnavailable
from devicebench.data.download import RemoteFile, fetch
from devicebench.data.formats import DataFormatError
from devicebench.data.images import (
    ImageFiles,
    decode_image,
    is_image_folder,
    read_image_folder,
    read_pet_images,
)
from devicebench.data.sources import DATASETS

RED = (255, 0, 0)
RED_LUMA = 76  # Pillow's L = R * 299/1000 + G * 587/1000 + B * 114/1000, for pure red


def encode(image: Image.Image, image_format: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, image_format, **options)
    return buffer.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def palette_image(size: tuple[int, int]) -> Image.Image:
    """A "P" image whose every pixel is palette entry 1, (0, 128, 255)."""
    image = Image.new("P", size, 1)
    image.putpalette([0, 0, 0, 0, 128, 255])
    return image


# ---------------------------------------------------------------------------------------------------------------
# Image folders
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    """Three classes (bird, cat, dog) in every mode and format, with files to skip and to ignore."""
    root = tmp_path / "pets"
    write(root / "train/cat/1.jpg", encode(Image.new("RGB", (40, 30), RED), "JPEG"))
    write(root / "train/cat/2.png", encode(Image.new("L", (20, 20), 9), "PNG"))
    write(root / "train/cat/nested/3.png", encode(Image.new("RGBA", (7, 11), (10, 20, 30, 0)), "PNG"))
    write(root / "train/cat/bad.jpg", np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8).tobytes())
    write(root / "train/cat/Thumbs.db", b"not an image, and not named like one")
    write(root / "train/cat/notes.txt", b"ignored")
    write(root / "train/cat/.hidden.jpg", encode(Image.new("RGB", (5, 5)), "JPEG"))  # hidden: left out
    write(root / "train/dog/a.JPG", encode(Image.new("RGB", (64, 48), (0, 255, 0)), "JPEG"))  # suffix in capitals
    write(root / "train/dog/p.gif", encode(palette_image((13, 17)), "GIF"))
    write(root / "train/bird/1.bmp", encode(Image.new("RGB", (9, 9), (1, 2, 3)), "BMP"))
    write(root / "train/bird/empty.png", b"")
    write(root / "train/.cache/4.png", encode(Image.new("L", (4, 4)), "PNG"))  # a hidden folder is not a class
    write(root / "test/cat/x.jpg", encode(Image.new("RGB", (30, 40), RED), "JPEG"))
    write(root / "test/bird/y.webp", encode(Image.new("RGB", (12, 12), (5, 6, 7)), "WEBP", lossless=True))
    (root / "test/dog").mkdir()  # an empty class in test
    return root


def test_classes_are_the_train_subfolders_in_alphabetical_order(image_tree):
    dataset = read_image_folder(image_tree)
    assert dataset.class_names == ("bird", "cat", "dog") and dataset.num_classes == 3
    assert dataset.train.members == (
        "train/bird/1.bmp",
        "train/cat/1.jpg",
        "train/cat/2.png",
        "train/cat/nested/3.png",
        "train/dog/a.JPG",
        "train/dog/p.gif",
    )
    assert dataset.train.labels.tolist() == [0, 1, 1, 1, 2, 2] and dataset.train.labels.dtype == np.int64
    assert dataset.test.members == ("test/bird/y.webp", "test/cat/x.jpg")
    assert dataset.test.labels.tolist() == [0, 1]
    assert (len(dataset.train), len(dataset.test)) == (6, 2)


def test_unreadable_files_are_listed_as_skipped_and_the_empty_class_is_noted(image_tree):
    dataset = read_image_folder(image_tree)
    assert dataset.skipped == (str(image_tree / "train/bird/empty.png"), str(image_tree / "train/cat/bad.jpg"))
    assert "class 'dog' has no readable images in test" in dataset.notes
    assert any("left out 2 unreadable image file(s)" in note for note in dataset.notes)
    assert dataset.origin == f"{image_tree} (image folder: 6 train, 2 test images, 3 classes)"
    assert dataset.name == "pets" and dataset.source == "real" and dataset.fallback_reason is None
    assert repr(dataset) == "ImageFolderDataset('pets', source='real', train=6, test=2, classes=3, skipped=2)"


def test_files_are_read_as_stored_and_described_by_their_path(image_tree):
    files = read_image_folder(image_tree).train
    assert files.read_bytes(1) == (image_tree / "train/cat/1.jpg").read_bytes()
    assert files.describe(1) == str(image_tree / "train/cat/1.jpg")
    assert not files.is_zip


@pytest.mark.parametrize("channels", [1, 3])
def test_every_file_decodes_to_the_asked_channels_and_size(image_tree, channels):
    dataset = read_image_folder(image_tree)
    for files in (dataset.train, dataset.test):
        for index in range(len(files)):
            pixels = decode_image(files.read_bytes(index), channels=channels, size=(6, 10), name=files.describe(index))
            assert pixels.shape == (channels, 6, 10) and pixels.dtype == np.uint8 and pixels.flags.c_contiguous


def test_the_seeds_layout_and_an_extra_validation_split_are_accepted(tmp_path):
    root = tmp_path / "dataset"
    for split in ("training_set", "test_set", "validation"):
        for class_name in ("dogs", "cats"):
            write(root / split / class_name / "1.png", encode(Image.new("RGB", (8, 8)), "PNG"))
    write(root / "training_set/cats/2.png", encode(Image.new("RGB", (8, 8)), "PNG"))
    assert is_image_folder(root)
    dataset = read_image_folder(root)
    assert dataset.class_names == ("cats", "dogs")
    assert dataset.train.members == ("training_set/cats/1.png", "training_set/cats/2.png", "training_set/dogs/1.png")
    assert dataset.test.members == ("test_set/cats/1.png", "test_set/dogs/1.png")
    assert "using test_set/ as the test split; validation/ left unused" in dataset.notes


def test_a_download_cache_root_is_not_an_image_folder(tmp_path):
    (tmp_path / "mnist").mkdir()
    assert not is_image_folder(tmp_path)
    assert not is_image_folder(tmp_path / "missing")


def _no_train(root: Path) -> None:
    write(root / "test/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))


def _no_test(root: Path) -> None:
    write(root / "train/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))


def _no_class_folders(root: Path) -> None:
    write(root / "train/1.png", encode(Image.new("L", (4, 4)), "PNG"))
    write(root / "test/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))


def _no_readable_train_images(root: Path) -> None:
    write(root / "train/cat/1.jpg", b"garbage")
    write(root / "train/cat/readme.txt", b"text")
    write(root / "test/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))


def _test_class_not_in_train(root: Path) -> None:
    write(root / "train/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))
    write(root / "test/cat/1.png", encode(Image.new("L", (4, 4)), "PNG"))
    write(root / "test/fish/1.png", encode(Image.new("L", (4, 4)), "PNG"))


@pytest.mark.parametrize(
    ("make_layout", "expected_words"),
    [
        (None, ["no such directory", "DIR/train/<class>"]),
        (_no_train, ["no train split folder", "train/, training_set/", "DIR/train/<class>"]),
        (_no_test, ["no test split folder", "test/, test_set/, val/, validation/", "DIR/test/<class>"]),
        (_no_class_folders, ["no class folders", "DIR/train/<class>"]),
        (_no_readable_train_images, ["no readable images", "1 unreadable", ".jpg, .jpeg, .png"]),
        (_test_class_not_in_train, ["'fish' not in train/", "classes are 'cat'"]),
    ],
)
def test_a_bad_layout_says_what_is_wrong_and_what_is_expected(tmp_path, make_layout, expected_words):
    root = tmp_path / "images"
    if make_layout is not None:
        make_layout(root)
    with pytest.raises(DataFormatError) as raised:
        read_image_folder(root)
    for words in expected_words:
        assert words in str(raised.value)


# ---------------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------------


def test_a_solid_red_image_decodes_to_red_and_to_its_luma():
    data = encode(Image.new("RGB", (40, 30), RED), "PNG")
    rgb = decode_image(data, channels=3, size=(8, 8), name="red.png")
    assert rgb.shape == (3, 8, 8)
    assert (rgb[0] == 255).all() and (rgb[1] == 0).all() and (rgb[2] == 0).all()
    grey = decode_image(data, channels=1, size=(8, 8), name="red.png")
    assert grey.shape == (1, 8, 8) and (grey == RED_LUMA).all()


def test_alpha_is_dropped_and_a_palette_is_expanded():
    rgba = encode(Image.new("RGBA", (5, 5), (10, 20, 30, 0)), "PNG")
    assert decode_image(rgba, channels=3, size=(2, 2), name="a.png")[:, 0, 0].tolist() == [10, 20, 30]
    palette = encode(palette_image((5, 5)), "GIF")
    assert decode_image(palette, channels=3, size=(2, 2), name="p.gif")[:, 1, 1].tolist() == [0, 128, 255]


def test_resizing_is_nearest_neighbour_so_no_new_grey_levels_appear():
    checkerboard = (np.indices((8, 8)).sum(axis=0) % 2 * 255).astype(np.uint8)  # 0/255 alternating pixels
    decoded = decode_image(encode(Image.fromarray(checkerboard), "PNG"), channels=1, size=(4, 4), name="c.png")
    assert set(np.unique(decoded)) <= {0, 255}  # bilinear would give the mid grey 127/128


def test_height_and_width_are_in_that_order():
    wide = encode(Image.new("RGB", (30, 10), RED), "PNG")  # Pillow sizes are (width, height)
    assert decode_image(wide, channels=3, size=(5, 7), name="w.png").shape == (3, 5, 7)


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG declaring width x height 8-bit RGB pixels, with an empty IDAT: a header and no pixel data."""
    header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + png_chunk(b"IDAT", b"") + png_chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00garbage" * 10, "cannot identify image file"),
        (b"", "cannot identify image file"),
        (encode(Image.new("RGB", (40, 30), RED), "PNG")[:60], "not a readable image"),  # truncated
        (png_header_only(30_000, 30_000), "decompression bomb"),  # 900 Mpixels declared in 57 bytes
        (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "cannot identify image file"),  # EPS never opens
    ],
)
def test_an_unreadable_image_raises_data_format_error_naming_the_file(data, reason):
    with pytest.raises(DataFormatError, match="DIR/train/cat/bad.jpg: not a readable image") as raised:
        decode_image(data, channels=3, size=(8, 8), name="DIR/train/cat/bad.jpg")
    assert reason in str(raised.value)


def test_only_one_or_three_channels_are_accepted():
    with pytest.raises(ValueError, match="channels must be 1 or 3"):
        decode_image(encode(Image.new("L", (4, 4)), "PNG"), channels=4, size=(4, 4), name="x.png")


# ---------------------------------------------------------------------------------------------------------------
# The PetImages zip
# ---------------------------------------------------------------------------------------------------------------

ZIP_NAME = "kagglecatsanddogs_5340.zip"


def pet_jpeg(image_id: int, class_index: int) -> bytes:
    colour = (image_id * 20 % 256, 100 * class_index, 50)  # a different picture for every member
    return encode(Image.new("RGB", (16, 12), colour), "JPEG", quality=95)


def exif_first_jpeg(jpeg: bytes) -> bytes:
    """`jpeg` with a small Exif segment before its JFIF one: b"JFIF" then sits at byte 30, not 6."""
    exif = b"Exif\x00\x00" + b"MM\x00*" + struct.pack(">IHI", 8, 0, 0)  # big-endian TIFF: one IFD, no entries
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif + jpeg[2:]


@pytest.fixture
def pet_zip(tmp_path: Path) -> Path:
    """Cat 0-11 (3 is not a JPEG, 2 starts with Exif), Dog 0-10 (5 is empty), plus the release's other files."""
    members = {f"PetImages/Cat/{image_id}.jpg": pet_jpeg(image_id, 0) for image_id in range(12)}
    members["PetImages/Cat/3.jpg"] = b"GIF89a not a JPEG at all" * 20
    members["PetImages/Cat/2.jpg"] = exif_first_jpeg(pet_jpeg(2, 0))
    members.update({f"PetImages/Dog/{image_id}.jpg": pet_jpeg(image_id, 1) for image_id in range(11)})
    members["PetImages/Dog/5.jpg"] = b""
    members["PetImages/Cat/Thumbs.db"] = b"thumbnail cache"
    members["readme[1].txt"] = b"Microsoft Cats vs Dogs"
    members["PetImages/Dog/sub/99.jpg"] = pet_jpeg(99, 1)  # not the PetImages/<Class>/<id>.jpg pattern
    path = tmp_path / "zips" / ZIP_NAME
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members, reverse=True):  # not in id order, so the reader must sort
            archive.writestr(name, members[name])
    return path


def test_pillow_writes_a_jfif_header_and_the_exif_first_variant_still_decodes():
    jpeg = pet_jpeg(1, 0)
    assert jpeg[:4] == b"\xff\xd8\xff\xe0" and jpeg[6:10] == b"JFIF"  # SOI, then the APP0 JFIF segment
    variant = exif_first_jpeg(jpeg)
    assert b"JFIF" not in variant[:10] and variant.index(b"JFIF") == 30
    decoded = [decode_image(data, channels=3, size=(12, 16), name="x.jpg") for data in (variant, jpeg)]
    np.testing.assert_array_equal(decoded[0], decoded[1])


def test_pet_images_skip_members_without_jfif_and_split_by_numeric_id(pet_zip):
    dataset = read_pet_images(pet_zip, train_per_class=8, test_per_class=2)
    assert dataset.name == "cats-vs-dogs" and dataset.class_names == ("cat", "dog")
    assert sorted(dataset.skipped) == [f"{pet_zip}:PetImages/Cat/3.jpg", f"{pet_zip}:PetImages/Dog/5.jpg"]
    assert dataset.notes == ("skipped 2 corrupt images (no JFIF header), as tensorflow-datasets does",)
    cat_train = [f"PetImages/Cat/{image_id}.jpg" for image_id in (0, 1, 2, 4, 5, 6, 7, 8)]
    dog_train = [f"PetImages/Dog/{image_id}.jpg" for image_id in (0, 1, 2, 3, 4, 6, 7, 8)]
    assert dataset.train.members == tuple(cat_train + dog_train)
    assert dataset.test.members == (
        "PetImages/Cat/9.jpg",
        "PetImages/Cat/10.jpg",
        "PetImages/Dog/9.jpg",
        "PetImages/Dog/10.jpg",
    )  # 10 after 9: numeric order, not text order
    assert dataset.train.labels.tolist() == [0] * 8 + [1] * 8 and dataset.test.labels.tolist() == [0, 0, 1, 1]
    assert dataset.origin == f"{pet_zip} (PetImages: 16 train, 4 test images, 2 classes)"
    assert dataset.train.describe(0) == f"{pet_zip}:PetImages/Cat/0.jpg"


def test_jfif_after_a_leading_exif_segment_counts_as_tensorflow_datasets_peek_finds_it(pet_zip):
    with zipfile.ZipFile(pet_zip) as archive:
        assert b"JFIF" not in archive.read("PetImages/Cat/2.jpg")[:10]  # a check of bytes 0-9 alone would drop it
    assert "PetImages/Cat/2.jpg" in read_pet_images(pet_zip, train_per_class=8, test_per_class=2).train.members


def test_too_few_valid_images_in_a_class_is_an_error_with_the_count(pet_zip):
    with pytest.raises(DataFormatError, match=r"class 'dog' has 10 valid images, fewer than the 11 asked for"):
        read_pet_images(pet_zip, train_per_class=8, test_per_class=3)


def test_a_file_that_is_not_a_zip_is_a_data_format_error(tmp_path):
    path = write(tmp_path / ZIP_NAME, b"<html>a captive portal, not a zip</html>")
    with pytest.raises(DataFormatError, match="not a readable zip"):
        read_pet_images(path)


def test_members_decode_to_the_pictures_written(pet_zip):
    files = read_pet_images(pet_zip, train_per_class=8, test_per_class=2).train
    assert files.is_zip and files.read_bytes(3) == pet_jpeg(4, 0)  # the 4th valid cat is id 4
    pixels = decode_image(files.read_bytes(3), channels=3, size=(12, 16), name=files.describe(3))
    assert np.abs(pixels[:, 6, 8].astype(int) - [80, 0, 50]).max() <= 3  # JPEG is lossy: within 3 levels


def test_image_files_pickle_after_a_read_and_read_the_same_again(pet_zip):
    files = read_pet_images(pet_zip, train_per_class=8, test_per_class=2).train
    first = files.read_bytes(0)
    clone = pickle.loads(pickle.dumps(files))
    assert clone.read_bytes(0) == first and clone.members == files.members
    np.testing.assert_array_equal(clone.labels, files.labels)
    assert files.read_bytes(15) == pet_jpeg(8, 1)  # the original still reads after the clone did


class DecodedImages(torch.utils.data.Dataset):
    """What a workload's loader does with ImageFiles: read, decode, label."""

    def __init__(self, files: ImageFiles) -> None:
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        pixels = decode_image(self.files.read_bytes(index), channels=3, size=(8, 8), name=self.files.describe(index))
        return pixels, int(self.files.labels[index])


def test_dataloader_workers_read_the_zip_as_the_main_process_does(pet_zip):
    files = read_pet_images(pet_zip, train_per_class=8, test_per_class=2).train
    dataset = DecodedImages(files)
    in_process = np.stack([dataset[index][0] for index in range(len(dataset))])  # opens the zip in this process
    loader = torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=2, shuffle=False)
    batches = list(loader)
    np.testing.assert_array_equal(torch.cat([images for images, _ in batches]).numpy(), in_process)
    assert torch.cat([labels for _, labels in batches]).tolist() == files.labels.tolist()


def test_the_zip_arrives_through_fetch_and_reads(pet_zip, loopback_server, tmp_path):
    url = loopback_server.publish(pet_zip)
    data = pet_zip.read_bytes()
    remote = RemoteFile(ZIP_NAME, (url,), f"sha256:{hashlib.sha256(data).hexdigest()}", size_bytes=len(data))
    arrived = fetch(remote, tmp_path / "cache" / "cats-vs-dogs", progress=False)
    assert arrived.read_bytes() == data
    assert len(read_pet_images(arrived, train_per_class=8, test_per_class=2).train) == 16

    wrong = RemoteFile(ZIP_NAME, (url,), "sha256:" + "0" * 64)
    with pytest.raises(DataUnavailable, match="checksum mismatch"):
        fetch(wrong, tmp_path / "other-cache", progress=False)
    assert not (tmp_path / "other-cache" / ZIP_NAME).exists()


def test_the_registry_entry_matches_the_readers_default_split():
    spec = DATASETS["cats-vs-dogs"]
    defaults = inspect.signature(read_pet_images).parameters
    assert spec.num_classes == 2 and [remote.filename for remote in spec.files] == [ZIP_NAME]
    assert spec.train_size == spec.num_classes * defaults["train_per_class"].default == 8_000
    assert spec.test_size == spec.num_classes * defaults["test_per_class"].default == 2_000


def test_a_cats_vs_dogs_run_downloads_the_zip_and_trains_on_its_photos(pet_zip, loopback_server, tmp_path, monkeypatch):
    """`--data real` end to end: the registry's URL (here the loopback server), the checksum, the split, a run."""
    url = loopback_server.publish(pet_zip)
    data = pet_zip.read_bytes()
    remote = RemoteFile(ZIP_NAME, (url,), f"sha256:{hashlib.sha256(data).hexdigest()}", size_bytes=len(data))
    monkeypatch.setitem(
        DATASETS,
        "cats-vs-dogs",
        dataclasses.replace(DATASETS["cats-vs-dogs"], files=(remote,), train_size=16, test_size=4),
    )
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("catdog-original",),
                devices="cpu",
                data="real",
                data_dir=str(tmp_path / "cache"),
                epochs=2,
                batch_size=4,
                workers=0,
            )
        )
    )
    [record] = result.runs
    assert record.status == "ok", record.error
    assert record.settings.data_source == "real"
    assert [epoch.samples for epoch in record.epochs] == [16, 16] and record.epochs[0].eval_samples == 4
    assert (tmp_path / "cache" / "cats-vs-dogs" / ZIP_NAME).read_bytes() == data
