"""Mini-batches for the training loop: HostBatches (in memory) and LoaderBatches (DataLoader, maybe with workers).

Covered: both give the same batches for the same (seed, epoch), in the order `epoch_order` says, with the last
partial batch kept and `steps` honoured; augmented batches are identical whatever the number of workers or the
batch size; images decoded from a generated folder of PNG and JPEG files come out in the model's shape, scaled
and labelled by folder; `batches_for` picks the right kind and refuses a wrong image shape; `default_workers`;
and a file that fails to decode is named in the error, in this process and from a worker process.

Workers cost about a second to start, so only the tests whose point is workers use them.

    python -m pytest tests/test_pipeline.py -q
"""

from __future__ import annotations

import io
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from devicebench.data import ArrayDataset, ImageFolderDataset, pipeline, placement
from devicebench.data.augmentation import (
    CifarDistortion,
    KerasAugmentation,
    Preprocessing,
    Rescale,
)
from devicebench.data.formats import DataFormatError
from devicebench.data.images import read_image_folder
from devicebench.data.pipeline import (
    ArrayImages,
    Batch,
    Batches,
    HostBatches,
    LoaderBatches,
    PreprocessedImages,
    Shard,
    batches_for,
    default_workers,
    epoch_order,
)
from devicebench.data.synthetic import synthetic_dataset

CPU = torch.device("cpu")
TRAIN_SIZE, BATCH_SIZE = 50, 16  # four batches: 16, 16, 16 and a partial 2
SEED = 3

# Image folder fixture: each class has its own brightness, so a decoded image shows which class it came from.
CAT_RGB, DOG_RGB = (250, 200, 220), (10, 40, 20)  # greyscale ~218 and ~29
BRIGHT_CLASS_THRESHOLD = 0.5  # a cat's pixels are all above it after scaling, a dog's all below


@pytest.fixture(scope="module")
def mnist_like() -> ArrayDataset:
    return synthetic_dataset("mnist", train_size=TRAIN_SIZE, test_size=10)


def host_batches(dataset: ArrayDataset, **options: object) -> HostBatches:
    settings = dict(seed=SEED) | options
    return HostBatches(dataset.train_images, dataset.train_labels, BATCH_SIZE, CPU, **settings)


def loader_batches(
    dataset: ArrayDataset,
    batch_size: int = BATCH_SIZE,
    *,
    preprocessing=Rescale(),  # noqa: B008
    training: bool = True,
    seed: int = SEED,
    workers: int = 0,
) -> LoaderBatches:
    images = PreprocessedImages(ArrayImages(dataset.train_images), dataset.train_labels, preprocessing, training, seed)
    return LoaderBatches(images, batch_size, CPU, workers=workers, training=training, seed=seed)


def concatenated(batches: list[Batch]) -> Batch:
    return torch.cat([images for images, _ in batches]), torch.cat([labels for _, labels in batches])


def assert_same_batches(first: list[Batch], second: list[Batch]) -> None:
    assert len(first) == len(second)
    for (images, labels), (other_images, other_labels) in zip(first, second, strict=True):
        assert torch.equal(images, other_images)
        assert torch.equal(labels, other_labels)


# ---------------------------------------------------------------------------------------------------------------
# HostBatches and LoaderBatches on in-memory images
# ---------------------------------------------------------------------------------------------------------------


def test_host_and_loader_batches_are_identical_for_the_same_seed_and_epoch(mnist_like: ArrayDataset) -> None:
    host = list(host_batches(mnist_like).epoch(2))
    loader = list(loader_batches(mnist_like).epoch(2))

    assert_same_batches(host, loader)
    images, labels = concatenated(host)
    order = epoch_order(TRAIN_SIZE, 2, SEED, shuffle=True)
    assert sorted(order.tolist()) == list(range(TRAIN_SIZE))  # every sample once
    assert torch.equal(images, torch.from_numpy(mnist_like.train_images)[order].float() / 255)
    assert torch.equal(labels, torch.from_numpy(mnist_like.train_labels)[order])
    assert images.dtype == torch.float32 and labels.dtype == torch.int64


@pytest.mark.parametrize("make", [host_batches, loader_batches], ids=["host", "loader"])
def test_each_epoch_is_drawn_in_its_own_order(make: Callable[..., Batches], mnist_like: ArrayDataset) -> None:
    batches = make(mnist_like)

    first, again, second = (concatenated(list(batches.epoch(epoch)))[0] for epoch in (1, 1, 2))

    assert torch.equal(first, again)
    assert not torch.equal(first, second)
    assert torch.allclose(first.sum(dim=0), second.sum(dim=0))  # the same samples, shuffled differently


def test_unshuffled_host_batches_and_test_loader_batches_come_in_index_order(mnist_like: ArrayDataset) -> None:
    in_order = torch.from_numpy(mnist_like.train_images).float() / 255

    for batches in (host_batches(mnist_like, shuffle=False), loader_batches(mnist_like, training=False)):
        images, labels = concatenated(list(batches.epoch(5)))
        assert torch.equal(images, in_order)
        assert torch.equal(labels, torch.from_numpy(mnist_like.train_labels))


@pytest.mark.parametrize("make", [host_batches, loader_batches], ids=["host", "loader"])
def test_steps_limits_an_epoch_to_its_first_batches(make: Callable[..., Batches], mnist_like: ArrayDataset) -> None:
    batches = make(mnist_like)

    first_two = list(batches.epoch(1, steps=2))

    assert len(first_two) == 2
    assert_same_batches(first_two, list(batches.epoch(1))[:2])
    assert len(list(batches.epoch(1))) == 4  # a limited pass leaves the next full one whole


@pytest.mark.parametrize("make", [host_batches, loader_batches], ids=["host", "loader"])
def test_the_last_partial_batch_is_kept_and_counted(make: Callable[..., Batches], mnist_like: ArrayDataset) -> None:
    batches = make(mnist_like)

    assert len(batches) == 4
    assert batches.batch_sizes(4) == [16, 16, 16, 2]
    assert batches.batch_sizes(2) == [16, 16]
    assert [len(labels) for _, labels in batches.epoch(1)] == [16, 16, 16, 2]


def test_negative_workers_and_empty_batches_are_refused(mnist_like: ArrayDataset) -> None:
    with pytest.raises(ValueError, match="workers must be 0 or more, got -1"):
        loader_batches(mnist_like, workers=-1)
    with pytest.raises(ValueError, match="batch size must be at least 1"):
        HostBatches(mnist_like.train_images, mnist_like.train_labels, 0, CPU)


# ---------------------------------------------------------------------------------------------------------------
# Augmentation: the same images whatever the workers or the batch size
# ---------------------------------------------------------------------------------------------------------------


def in_index_order(batches: list[Batch], epoch: int) -> torch.Tensor:
    """The images of one shuffled epoch of the training split, put back in dataset order."""
    order = epoch_order(TRAIN_SIZE, epoch, SEED, shuffle=True)
    return concatenated(batches)[0][torch.argsort(order)]


def test_augmented_batches_are_bitwise_identical_with_and_without_workers(mnist_like: ArrayDataset) -> None:
    children_before = set(multiprocessing.active_children())  # any other test's, left to them
    in_process = loader_batches(mnist_like, preprocessing=KerasAugmentation(), workers=0)
    two_workers = loader_batches(mnist_like, preprocessing=KerasAugmentation(), workers=2)
    try:
        first_epoch = list(two_workers.epoch(1))
        second_epoch = list(two_workers.epoch(2))
        workers_started = set(multiprocessing.active_children()) - children_before
        assert len(workers_started) == 2  # persistent: the same two made both epochs

        assert_same_batches(first_epoch, list(in_process.epoch(1)))
        assert_same_batches(second_epoch, list(in_process.epoch(2)))
    finally:
        two_workers.close()
        in_process.close()
    assert not workers_started & set(multiprocessing.active_children())  # close() stopped them
    for closed in (in_process, two_workers):
        with pytest.raises(RuntimeError, match="closed"):
            next(iter(closed.epoch(3)))
    unaugmented = torch.from_numpy(mnist_like.train_images).float() / 255
    first, second = in_index_order(first_epoch, 1), in_index_order(second_epoch, 2)
    assert not torch.allclose(first, unaugmented, atol=1e-3)
    assert not torch.allclose(first, second, atol=1e-3)  # each image is distorted anew each epoch


def test_each_image_is_augmented_the_same_whatever_batch_it_falls_in(mnist_like: ArrayDataset) -> None:
    # An image's augmentation depends only on (seed, epoch, index), and the order only on (seed, epoch).
    augmentation = KerasAugmentation()
    by_16 = loader_batches(mnist_like, preprocessing=augmentation)
    by_7 = loader_batches(mnist_like, 7, preprocessing=augmentation)

    images_16, labels_16 = concatenated(list(by_16.epoch(1)))
    images_7, labels_7 = concatenated(list(by_7.epoch(1)))

    assert torch.equal(images_16, images_7)
    assert torch.equal(labels_16, labels_7)
    assert images_16.min() >= 0.0 and images_16.max() <= 1.0


@pytest.mark.parametrize("seed", [20_000, 2**62], ids=["20000", "2**62"])
def test_any_seed_shuffles_and_augments_reproducibly(seed: int, mnist_like: ArrayDataset) -> None:
    # The per-image seed made of (seed, epoch, index) passes 64 bits, manual_seed's limit, from seed 18,447 on.
    augmented = [
        concatenated(list(loader_batches(mnist_like, preprocessing=KerasAugmentation(), seed=seed).epoch(1)))
        for _ in range(2)
    ]
    shuffled = [concatenated(list(host_batches(mnist_like, seed=seed).epoch(1))) for _ in range(2)]

    assert torch.equal(augmented[0][0], augmented[1][0])
    assert torch.equal(shuffled[0][0], shuffled[1][0])
    order = epoch_order(TRAIN_SIZE, 1, seed, shuffle=True)
    assert torch.equal(shuffled[0][1], torch.from_numpy(mnist_like.train_labels)[order])
    assert torch.equal(augmented[0][1], shuffled[0][1])  # both paths draw the same order


# ---------------------------------------------------------------------------------------------------------------
# Images decoded from a folder of files
# ---------------------------------------------------------------------------------------------------------------


def encoded(colour: tuple[int, int, int], size: tuple[int, int], mode: str, image_format: str) -> bytes:
    """An image of one colour with a darker diagonal stripe, in `mode` ("RGB" or "L"), encoded as `image_format`."""
    image = Image.new("RGB", size, colour)
    for step in range(min(size)):
        image.putpixel((step, step), tuple(channel * 9 // 10 for channel in colour))
    buffer = io.BytesIO()
    image.convert(mode).save(buffer, image_format)
    return buffer.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    """train/: 3 cats and 2 dogs of mixed sizes, modes and formats, plus one corrupt file; test/: 1 of each."""
    for name, colour, size, mode, image_format in [
        ("train/cat/wide.png", CAT_RGB, (40, 30), "RGB", "PNG"),
        ("train/cat/tall.jpg", CAT_RGB, (20, 50), "L", "JPEG"),
        ("train/cat/big.jpeg", CAT_RGB, (90, 70), "RGB", "JPEG"),
        ("train/dog/small.png", DOG_RGB, (12, 16), "L", "PNG"),
        ("train/dog/square.jpg", DOG_RGB, (64, 64), "RGB", "JPEG"),
        ("test/cat/one.jpg", CAT_RGB, (33, 33), "RGB", "JPEG"),
        ("test/dog/one.png", DOG_RGB, (28, 28), "L", "PNG"),
    ]:
        write(tmp_path / name, encoded(colour, size, mode, image_format))
    write(tmp_path / "train/dog/corrupt.jpg", b"this is not a JPEG at all" * 10)
    return tmp_path


def labels_from_brightness(images: torch.Tensor) -> torch.Tensor:
    """0 (cat) for an image whose every pixel is bright, 1 (dog) for one whose every pixel is dark, else -1."""
    flat = images.flatten(1)
    bright, dark = flat.min(dim=1).values > BRIGHT_CLASS_THRESHOLD, flat.max(dim=1).values < BRIGHT_CLASS_THRESHOLD
    return torch.where(bright, 0, torch.where(dark, 1, -1))


def check_batches(batches: Batches, image_shape: tuple[int, int, int], sizes: list[int]) -> None:
    """Every batch of one epoch: float32 in [0, 1], shaped for the model, labels those its pixels show."""
    epoch = list(batches.epoch(1))
    assert [len(labels) for _, labels in epoch] == sizes
    for images, labels in epoch:
        assert images.dtype == torch.float32
        assert images.shape == (len(labels), *image_shape)
        assert images.min() >= 0.0 and images.max() <= 1.0
        assert torch.equal(labels_from_brightness(images), labels)


@pytest.mark.parametrize("image_shape", [(1, 28, 28), (3, 64, 64)], ids=["grey-28", "rgb-64"])
def test_image_folder_batches_are_decoded_resized_and_labelled_by_class(
    image_folder: Path, image_shape: tuple[int, int, int]
) -> None:
    dataset = read_image_folder(image_folder)
    assert dataset.class_names == ("cat", "dog")
    assert len(dataset.skipped) == 1 and dataset.skipped[0].endswith("corrupt.jpg")
    assert not any("corrupt" in member for member in dataset.train.members)  # the loader never sees it

    train, test = batches_for(dataset, image_shape, Rescale(), 2, CPU, workers=0, seed=SEED)

    assert isinstance(train, LoaderBatches) and isinstance(test, LoaderBatches)
    check_batches(train, image_shape, [2, 2, 1])
    check_batches(test, image_shape, [2])
    _, test_labels = next(iter(test.epoch(1)))
    assert test_labels.tolist() == [0, 1]  # unshuffled: cat/ before dog/


def test_image_folder_batches_can_be_augmented(image_folder: Path) -> None:
    dataset = read_image_folder(image_folder)

    train, _ = batches_for(dataset, (3, 64, 64), KerasAugmentation(), 5, CPU, workers=0, seed=SEED)

    check_batches(train, (3, 64, 64), [5])  # the border fill keeps every pixel its class's brightness


# ---------------------------------------------------------------------------------------------------------------
# batches_for and default_workers
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preprocessing", "workers", "kind"),
    [
        (Rescale(), 0, HostBatches),
        (CifarDistortion(augment=False), 0, HostBatches),
        (Rescale(), 1, LoaderBatches),
        (KerasAugmentation(), 0, LoaderBatches),
        (KerasAugmentation(shear=0, zoom=0, horizontal_flip=False), 0, HostBatches),
    ],
    ids=["rescale-0", "cifar-no-augment-0", "rescale-1-worker", "keras-0", "keras-doing-nothing-0"],
)
def test_batches_for_in_memory_data_uses_the_host_path_only_with_nothing_random_and_no_workers(
    preprocessing: Preprocessing, workers: int, kind: type, mnist_like: ArrayDataset
) -> None:
    train, test = batches_for(mnist_like, (1, 28, 28), preprocessing, BATCH_SIZE, CPU, workers=workers, seed=SEED)
    try:
        assert type(train) is kind and type(test) is kind
        assert train.workers == workers and test.workers == workers
        assert len(train) == 4 and len(test) == 1  # 50 and 10 samples in batches of 16
        if workers == 0:  # iterating with a worker would start it: a second of work that shows nothing more
            _, labels = concatenated(list(test.epoch(1)))
            assert torch.equal(labels, torch.from_numpy(mnist_like.test_labels))  # the test split is unshuffled
    finally:
        train.close()
        test.close()


def test_batches_for_refuses_in_memory_images_of_another_shape_naming_both(mnist_like: ArrayDataset) -> None:
    with pytest.raises(ValueError, match="takes 3x32x32 images but mnist holds 1x28x28"):
        batches_for(mnist_like, (3, 32, 32), Rescale(), BATCH_SIZE, CPU, workers=0, seed=SEED)


@pytest.mark.parametrize(("cores", "expected"), [(16, 4), (4, 4), (2, 2), (1, 1)])
def test_default_workers_is_one_per_core_up_to_4_when_there_is_work_for_them(
    cores: int, expected: int, mnist_like: ArrayDataset, image_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder_dataset = read_image_folder(image_folder)
    assert isinstance(folder_dataset, ImageFolderDataset)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)

    assert default_workers(mnist_like, Rescale()) == 0
    assert default_workers(mnist_like, CifarDistortion(augment=False)) == 0
    assert default_workers(mnist_like, KerasAugmentation()) == expected
    assert default_workers(mnist_like, CifarDistortion()) == expected
    assert default_workers(folder_dataset, Rescale()) == expected


# ---------------------------------------------------------------------------------------------------------------
# A file that passes the reader's header check but does not decode
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_an_image_damaged_after_the_scan_fails_its_batch_with_an_error_naming_the_file(
    tmp_path: Path, workers: int
) -> None:
    """The scan leaves out files already truncated (tests/test_hostile_models.py); one damaged after it, while the
    run reads the folder, is found only when decoded."""
    noise = np.random.default_rng(0).integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "JPEG")  # noise compresses badly: half the file holds all its headers
    whole = buffer.getvalue()
    truncated = write(tmp_path / "train/cat/truncated.jpg", whole)
    write(tmp_path / "train/cat/fine.png", encoded(CAT_RGB, (20, 20), "RGB", "PNG"))
    write(tmp_path / "test/cat/fine.png", encoded(CAT_RGB, (20, 20), "RGB", "PNG"))
    dataset = read_image_folder(tmp_path)
    assert dataset.skipped == ()  # whole when scanned
    write(truncated, whole[: len(whole) // 2])

    train, _ = batches_for(dataset, (3, 32, 32), Rescale(), 2, CPU, workers=workers, seed=SEED)
    try:
        # workers=0 raises DataFormatError itself; a worker's is rebuilt in this process by the DataLoader
        # with the worker's traceback as its message, which still names the file.
        with pytest.raises(DataFormatError, match="not a readable image") as raised:
            next(iter(train.epoch(1)))
    finally:
        train.close()
    assert str(truncated) in str(raised.value)


# ---------------------------------------------------------------------------------------------------------------
# Where in-memory data lives: on the device (resident) or gathered on the host and copied (staged)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shard", [None, Shard(rank=1, world=2, global_batch=BATCH_SIZE)], ids=["one", "rank-1"])
@pytest.mark.parametrize("chunk_bytes", [1, 10**9], ids=["chunk-per-batch", "one-chunk"])
def test_resident_and_staged_batches_are_identical(
    mnist_like: ArrayDataset, shard: Shard | None, chunk_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two ways a device gets in-memory data give the same batches in `epoch_order`'s order, however many
    batches a resident chunk holds (one, or the whole epoch with its partial last batch), and for each rank."""
    monkeypatch.setattr(pipeline, "CHUNK_BYTES", chunk_bytes)
    resident, staged = (host_batches(mnist_like, resident=where, shard=shard) for where in (True, False))
    assert resident.resident and not staged.resident

    drawn = list(resident.epoch(2))
    assert_same_batches(drawn, list(staged.epoch(2)))
    _, labels = concatenated(drawn)
    order = epoch_order(TRAIN_SIZE, 2, SEED, shuffle=True)
    expected = order[: len(labels)] if shard is None else torch.cat([shard.indices(order, step) for step in (0, 1, 2)])
    assert torch.equal(labels, torch.from_numpy(mnist_like.train_labels)[expected])
    assert [len(batch) for batch, _ in drawn] == ([16, 16, 16, 2] if shard is None else [8, 8, 8])


def test_a_cpu_run_keeps_the_arrays_where_they_are_and_scales_each_chunk(mnist_like: ArrayDataset) -> None:
    """On the CPU the data is already in the device's memory: nothing is copied up front (a float copy of CIFAR-10
    would take 614 MB beside its 154 MB of uint8), and batches come out scaled to float."""
    batches = host_batches(mnist_like)
    assert batches.resident and not batches.preprocessed
    assert batches.inputs.dtype == torch.uint8
    assert batches.inputs.data_ptr() == torch.from_numpy(mnist_like.train_images).data_ptr()  # shared, not copied
    inputs, _ = next(batches.epoch(1))
    assert inputs.dtype == torch.float32 and float(inputs.min()) >= 0 and float(inputs.max()) <= 1


def test_residency_is_judged_by_the_preprocessed_size(
    mnist_like: ArrayDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a device would hold is the model's inputs, float32 (four bytes a pixel), and the labels."""
    asked: list[int] = []
    monkeypatch.setattr(placement, "fits_on", lambda device, size_bytes: asked.append(size_bytes) or False)
    batches = host_batches(mnist_like)
    assert not batches.resident  # the device said no: staged
    assert asked == [TRAIN_SIZE * 28 * 28 * 4 + TRAIN_SIZE * 8]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_a_gpu_gets_the_cpus_batches_resident_or_staged(mnist_like: ArrayDataset) -> None:
    """Resident on the GPU: preprocessed on the host, so bitwise the CPU's batches. Staged (forced here, as for data
    too big for the device): the same samples, scaled on the device, equal to a rounding."""
    cuda = torch.device("cuda")
    on_cpu = list(host_batches(mnist_like).epoch(2))
    resident = HostBatches(mnist_like.train_images, mnist_like.train_labels, BATCH_SIZE, cuda, seed=SEED)
    staged = HostBatches(mnist_like.train_images, mnist_like.train_labels, BATCH_SIZE, cuda, seed=SEED, resident=False)
    assert resident.resident and resident.preprocessed and resident.inputs.device.type == "cuda"
    assert not staged.resident
    drawn = zip(on_cpu, resident.epoch(2), staged.epoch(2), strict=True)
    for (images, labels), (resident_images, resident_labels), (staged_images, staged_labels) in drawn:
        assert resident_images.device.type == staged_images.device.type == "cuda"
        assert torch.equal(resident_images.cpu(), images) and torch.equal(resident_labels.cpu(), labels)
        assert torch.allclose(staged_images.cpu(), images, rtol=1e-6, atol=0) and torch.equal(
            staged_labels.cpu(), labels
        )
