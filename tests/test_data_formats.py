"""Readers of the release formats, checked against tiny files built from the formats' descriptions.

python -m pytest tests/test_data_formats.py -q
"""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest

from devicebench.data.formats import (
    CIFAR10_BINARY,
    CIFAR100_BINARY,
    MNIST_FILES,
    CifarLayout,
    DataFormatError,
    read_cifar_binary,
    read_idx,
    read_mnist,
    read_release,
)
from devicebench.data.sources import dataset_spec, verifies


def assert_splits_equal(actual, expected) -> None:
    for field_name in expected._fields:
        got, want = getattr(actual, field_name), getattr(expected, field_name)
        assert got.dtype == want.dtype, field_name
        np.testing.assert_array_equal(got, want, err_msg=field_name)


# --- IDX ---------------------------------------------------------------------------------------------------------


def test_read_idx_gzipped_plain_and_file_object_give_the_same_array(tiny_mnist, tmp_path):
    gz_path = tiny_mnist.folder / MNIST_FILES["train_images"]
    plain_path = tmp_path / "train-images-idx3-ubyte"
    plain_path.write_bytes(gzip.decompress(gz_path.read_bytes()))
    want = tiny_mnist.expected.train_images[:, 0]

    for source in (gz_path, str(plain_path), io.BytesIO(gz_path.read_bytes())):
        images = read_idx(source)
        assert images.dtype == np.uint8 and images.shape == (6, 28, 28)
        np.testing.assert_array_equal(images, want)


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_read_idx_decodes_big_endian_multibyte_elements(idx_encoder, tmp_path, dtype):
    array = np.array([[1, -2, 70_000], [3, 4, -5]], dtype=dtype)  # 70,000 needs more than two bytes
    path = tmp_path / "values.idx"
    path.write_bytes(idx_encoder(array))
    result = read_idx(path)
    assert result.dtype == np.dtype(dtype) and result.dtype.isnative
    np.testing.assert_array_equal(result, array)


def test_truncated_idx_names_the_file_and_the_expected_and_actual_bytes(tiny_mnist, tmp_path):
    raw = gzip.decompress((tiny_mnist.folder / MNIST_FILES["test_images"]).read_bytes())
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(raw[:-100]))  # 4 images of 28 x 28 = 3136 payload bytes, 100 missing

    with pytest.raises(DataFormatError) as caught:
        read_idx(path)
    message = str(caught.value)
    assert str(path) in message and "3136" in message and "3036" in message and "truncated" in message


def test_idx_with_a_bad_magic_number_is_rejected(tmp_path):
    path = tmp_path / "not-idx"
    path.write_bytes(b"\x01\x02\x08\x01" + b"\x00\x00\x00\x01" + b"\x05")
    with pytest.raises(DataFormatError, match="bad IDX magic number 0x01020801"):
        read_idx(path)


def test_cut_off_gzip_stream_is_a_format_error(tiny_mnist, tmp_path):
    compressed = (tiny_mnist.folder / MNIST_FILES["train_images"]).read_bytes()
    path = tmp_path / "cut.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    with pytest.raises(DataFormatError, match="not a complete gzip stream"):
        read_idx(path)


def test_read_mnist_adds_the_channel_axis_and_int64_labels(tiny_mnist):
    splits = read_mnist(tiny_mnist.folder)
    assert splits.train_images.shape == (6, 1, 28, 28)
    assert_splits_equal(splits, tiny_mnist.expected)


def test_real_mnist_test_set_reads_and_matches_the_pinned_checksums(shared_mnist_folder):
    images = read_idx(shared_mnist_folder / MNIST_FILES["test_images"])
    labels = read_idx(shared_mnist_folder / MNIST_FILES["test_labels"])
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert images.max() == 255 and images.min() == 0  # real digits: black background, saturated strokes
    counts = np.bincount(labels, minlength=10)
    assert len(counts) == 10 and counts.sum() == 10_000
    assert ((counts >= 800) & (counts <= 1200)).all(), counts

    pinned = {remote.filename: remote for remote in dataset_spec("mnist").files}
    for role in ("test_images", "test_labels"):
        path = shared_mnist_folder / MNIST_FILES[role]
        assert pinned[path.name].size_bytes == path.stat().st_size
        assert verifies(path, pinned[path.name]), f"{path} does not match {pinned[path.name].checksum}"


# --- CIFAR binary ------------------------------------------------------------------------------------------------


def test_cifar10_archive_reads_every_record_in_member_order(tiny_cifar10):
    splits = read_cifar_binary(tiny_cifar10.folder / CIFAR10_BINARY.archive_name, CIFAR10_BINARY)
    assert splits.train_images.shape == (10, 3, 32, 32) and splits.test_images.shape == (3, 3, 32, 32)
    assert_splits_equal(splits, tiny_cifar10.expected)


def test_cifar_channels_are_red_green_blue_planes(tiny_cifar10):
    first_image = read_release("cifar10", tiny_cifar10.folder).train_images[0]
    assert (first_image[0] == 11).all() and (first_image[1] == 22).all() and (first_image[2] == 33).all()


def test_cifar100_uses_the_fine_label(tiny_cifar100):
    splits = read_release("cifar100", tiny_cifar100.folder)
    assert_splits_equal(splits, tiny_cifar100.expected)
    assert splits.train_labels.max() < 100 and len(splits.train_labels) == 2 and len(splits.test_labels) == 3


def _valid_cifar10_members(extra_bytes: int = 0) -> dict[str, bytes]:
    record = bytes([3]) + bytes(3072)
    members = {name: record for name in CIFAR10_BINARY.train_members + CIFAR10_BINARY.test_members}
    members[CIFAR10_BINARY.test_members[0]] = record * 2 + bytes(extra_bytes)
    return members


def test_valid_minimal_archive_reads(tar_gz_writer, tmp_path):
    archive = tar_gz_writer(tmp_path / "cifar-10-binary.tar.gz", _valid_cifar10_members())
    splits = read_cifar_binary(archive, CIFAR10_BINARY)
    assert splits.train_labels.tolist() == [3] * 5 and splits.test_labels.tolist() == [3, 3]


def test_wrong_record_length_is_rejected(tar_gz_writer, tmp_path):
    archive = tar_gz_writer(tmp_path / "cifar-10-binary.tar.gz", _valid_cifar10_members(extra_bytes=1))
    with pytest.raises(DataFormatError, match=r"6147 bytes is not a whole number of 3073-byte records"):
        read_cifar_binary(archive, CIFAR10_BINARY)


def test_cifar100_records_read_with_cifar10_layout_are_rejected(tiny_cifar100, tmp_path):
    # 3074-byte records are not 3073-byte ones: the layouts cannot be confused silently
    archive_bytes = (tiny_cifar100.folder / CIFAR100_BINARY.archive_name).read_bytes()
    (tmp_path / "renamed.tar.gz").write_bytes(archive_bytes)
    wrong_layout = CifarLayout(
        archive_name="renamed.tar.gz",
        train_members=CIFAR100_BINARY.train_members,
        test_members=CIFAR100_BINARY.test_members,
        label_bytes=1,
        num_classes=100,
    )
    with pytest.raises(DataFormatError, match="3073-byte records"):
        read_cifar_binary(tmp_path / "renamed.tar.gz", wrong_layout)


def test_symlinked_member_is_rejected_not_followed(tar_gz_writer, tmp_path):
    members = _valid_cifar10_members()
    del members["cifar-10-batches-bin/data_batch_1.bin"]
    archive = tar_gz_writer(
        tmp_path / "cifar-10-binary.tar.gz", members, symlinks={"cifar-10-batches-bin/data_batch_1.bin": "/etc/passwd"}
    )
    with pytest.raises(DataFormatError, match=r"'cifar-10-batches-bin/data_batch_1.bin' is a link"):
        read_cifar_binary(archive, CIFAR10_BINARY)


def test_member_escaping_the_archive_is_rejected(tar_gz_writer, tmp_path):
    members = _valid_cifar10_members() | {"../evil": b"payload"}
    archive = tar_gz_writer(tmp_path / "cifar-10-binary.tar.gz", members)
    with pytest.raises(DataFormatError, match=r"'\.\./evil' points outside the archive"):
        read_cifar_binary(archive, CIFAR10_BINARY)


def test_missing_member_is_named(tar_gz_writer, tmp_path):
    members = _valid_cifar10_members()
    del members["cifar-10-batches-bin/test_batch.bin"]
    archive = tar_gz_writer(tmp_path / "cifar-10-binary.tar.gz", members)
    with pytest.raises(DataFormatError, match=r"missing member.*test_batch\.bin"):
        read_cifar_binary(archive, CIFAR10_BINARY)


def test_out_of_range_label_is_rejected(tar_gz_writer, tmp_path):
    members = _valid_cifar10_members()
    members["cifar-10-batches-bin/data_batch_3.bin"] = bytes([10]) + bytes(3072)  # CIFAR-10 labels are 0..9
    archive = tar_gz_writer(tmp_path / "cifar-10-binary.tar.gz", members)
    with pytest.raises(DataFormatError, match="label 10 out of range for 10 classes"):
        read_cifar_binary(archive, CIFAR10_BINARY)


def test_a_file_that_is_not_a_tar_gz_is_a_format_error(tmp_path):
    path = tmp_path / "cifar-10-binary.tar.gz"
    path.write_bytes(b"<html>404 Not Found</html>")
    with pytest.raises(DataFormatError, match=r"not a readable \.tar\.gz"):
        read_cifar_binary(path, CIFAR10_BINARY)
