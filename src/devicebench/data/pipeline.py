"""Mini-batches for the training loop, made the way the seeds made them, on the device where the data lives there.

Three ways to make them, chosen by `batches_for`:
- `HostBatches`: images (or token ids) already in memory and nothing random to do to them: held on the device
  where they fit (every CPU run; a CUDA device with room for them, preprocessed once) and gathered there a chunk
  of batches at a time, else gathered on one host thread and copied one batch ahead. The fast path, Keras'
  `model.fit(x, y)`.
- `LoaderBatches`: a PyTorch DataLoader whose workers read each image (decoding a JPEG with Pillow when it
  comes from a folder), resize it and augment it one by one, the seeds' `ImageDataGenerator` way. `workers=0`
  does all that in the training process, between steps, which is what the input-pipeline diagnosis catches.
- `DeviceAugmentedBatches` (data/device_augment.py), tuned mode's: in-memory images gathered as uint8 where they are
  held and distorted there a whole batch at a time, from the same laws as the per-image way.

All shuffle each epoch with an order that depends only on (seed, epoch), and each image's augmentation only
on (seed, epoch, index): every device, and every number of workers, sees the same data. The last, partial
batch is kept (Keras' 1563 steps for 50,000 samples at 32).

    python -c "from devicebench.data import load_dataset; from devicebench.data.pipeline import HostBatches; import torch; d = load_dataset('mnist', 'synthetic'); b = HostBatches(d.train_images, d.train_labels, 50, torch.device('cpu')); print(len(b), next(iter(b.epoch(1)))[0].shape)"
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from devicebench.data import placement
from devicebench.data.arrays import ArrayDataset, Batch, Batches
from devicebench.data.augmentation import Preprocessing, Rescale, Unchanged
from devicebench.data.device_augment import DeviceAugmentedBatches
from devicebench.data.images import ImageFiles, ImageFolderDataset, decode_image
from devicebench.data.own import TensorData, TorchData, length
from devicebench.data.text import TokenDataset

Data = ArrayDataset | ImageFolderDataset | TokenDataset | TensorData | TorchData  # what a run trains on
MOST_DEFAULT_WORKERS = 4  # the seeds' largest setting; more rarely helps a single small model


def epoch_order(num_samples: int, epoch: int, seed: int, shuffle: bool) -> torch.Tensor:
    """The sample indices of one epoch, in the order they are drawn."""
    if not shuffle:
        return torch.arange(num_samples)
    # reduced to 64 bits: manual_seed refuses larger integers, and any --seed is allowed
    return torch.randperm(num_samples, generator=torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**64))


def _batch_sizes(num_samples: int, batch_size: int, steps: int) -> list[int]:
    """The number of samples in each of the first `steps` batches (only the last of a full pass is short)."""
    return [min(batch_size, num_samples - step * batch_size) for step in range(steps)]


@dataclass(frozen=True)
class Shard:
    """One process's part of every global batch, in data-parallel training (engine/distributed.py).

    Step k's global batch is the same `global_batch` samples as in one process; rank r takes the r-th of its
    `world` equal slices, so the ranks together see exactly what one process would. The last, partial global
    batch of an epoch is dropped: every rank must take the same number of equal steps.
    """

    rank: int
    world: int
    global_batch: int

    @property
    def batch_size(self) -> int:
        return self.global_batch // self.world

    def steps(self, num_samples: int) -> int:
        return num_samples // self.global_batch

    def indices(self, order: torch.Tensor, step: int) -> torch.Tensor:
        start = step * self.global_batch + self.rank * self.batch_size
        return order[start : start + self.batch_size]

    def epoch_indices(self, order: torch.Tensor, steps: int) -> torch.Tensor:
        """This rank's samples of the epoch's first `steps` steps, in the order drawn: `indices` of each in turn."""
        per_step = order[: steps * self.global_batch].view(steps, self.world, self.batch_size)
        return per_step[:, self.rank].reshape(-1)


def _step_indices(order: torch.Tensor, step: int, batch_size: int, shard: Shard | None) -> torch.Tensor:
    if shard is not None:
        return shard.indices(order, step)
    return order[step * batch_size : (step + 1) * batch_size]


class HostBatches:
    """Shuffled mini-batches of in-memory inputs (uint8 images, token ids), preprocessed as `preprocessing.test`
    does, in `epoch_order`'s order. `resident`: held on the device where they fit (data/placement.py says where and
    why), each epoch gathering its samples a chunk of batches at a time (CHUNK_BYTES) and splitting the chunk, so
    a step costs no tensor operation of its own; else staged: each batch gathered on one host thread and copied."""

    workers = 0  # the training process makes every batch

    def __init__(
        self,
        inputs: np.ndarray | torch.Tensor,
        labels: np.ndarray | torch.Tensor,
        batch_size: int,
        device: torch.device,
        *,
        preprocessing: Preprocessing = Rescale(),  # noqa: B008 (frozen, so one shared instance is safe)
        shuffle: bool = True,
        seed: int = 0,
        resident: bool = True,
        shard: Shard | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        self.shard = shard
        self.inputs = torch.as_tensor(inputs)  # shares memory with the dataset: no copy
        self.labels = torch.as_tensor(labels)
        self.batch_size = shard.batch_size if shard else batch_size
        self.device = device
        self.preprocessing = preprocessing
        self.shuffle = shuffle
        self.seed = seed
        # one sample's model input, in bytes: sizes the chunks and the resident copy
        self.sample_bytes = preprocessing.test(self.inputs[:1]).nbytes if len(self.inputs) else 1
        self.preprocessed = False  # whether `inputs` are the model's inputs already, not what preprocessing takes
        self.resident = resident and placement.fits_on(
            device, len(self.inputs) * self.sample_bytes + self.labels.nbytes
        )
        if self.resident and device.type != "cpu":
            self.inputs, self.labels = (
                placement.preprocessed_on(device, self.inputs, preprocessing),
                self.labels.to(device),
            )
            self.preprocessed = True
        self.stage: placement.Stage | None = None  # made by the first staged epoch

    def __len__(self) -> int:
        if self.shard is not None:
            return self.shard.steps(len(self.labels))
        return math.ceil(len(self.labels) / self.batch_size)

    def batch_sizes(self, steps: int) -> list[int]:
        if self.shard is not None:
            return [self.batch_size] * steps
        return _batch_sizes(len(self.labels), self.batch_size, steps)

    def epoch(self, epoch: int, steps: int | None = None) -> Generator[Batch, None, None]:
        sizes = self.batch_sizes(len(self) if steps is None else steps)
        order = epoch_order(len(self.labels), epoch, self.seed, self.shuffle)
        samples = order[: sum(sizes)] if self.shard is None else self.shard.epoch_indices(order, len(sizes))
        yield from (self._resident_epoch if self.resident else self._staged_epoch)(samples, sizes)

    def _resident_epoch(self, samples: torch.Tensor, sizes: list[int]) -> Iterator[Batch]:
        samples = samples.to(self.inputs.device)
        batches_per_chunk = max(1, CHUNK_BYTES // (self.batch_size * self.sample_bytes))
        taken = 0
        for first in range(0, len(sizes), batches_per_chunk):
            chunk_sizes = sizes[first : first + batches_per_chunk]
            chunk = samples[taken : taken + sum(chunk_sizes)]
            taken += len(chunk)
            inputs = self.inputs.index_select(0, chunk)
            if not self.preprocessed:
                inputs = self.preprocessing.test(inputs)  # test: nothing random, so a whole chunk at once
            yield from zip(inputs.split(chunk_sizes), self.labels.index_select(0, chunk).split(chunk_sizes))

    def _staged_epoch(self, samples: torch.Tensor, sizes: list[int]) -> Iterator[Batch]:
        if self.stage is None:  # once a run: its page-locked buffers are slow to allocate, and serve every epoch
            self.stage = placement.Stage(self.inputs, self.labels, self.batch_size, self.device)
        return self.stage.batches(samples.numpy(), sizes, self.preprocessing)

    def close(self) -> None:
        pass  # nothing runs in the background


CHUNK_BYTES = 32 * 2**20  # model inputs gathered at once: dozens of most models' batches; small beside any memory


class ImageSource(Protocol):
    """Images one at a time, as uint8 (C, H, W): from memory, or decoded from files."""

    def __len__(self) -> int: ...

    def read(self, index: int) -> torch.Tensor: ...


class ArrayImages:
    def __init__(self, images: np.ndarray) -> None:
        self.images = torch.from_numpy(images)

    def __len__(self) -> int:
        return len(self.images)

    def read(self, index: int) -> torch.Tensor:
        return self.images[index]


class FileImages:
    """Image files decoded with Pillow, converted to `image_shape`'s channels and resized to its height and width."""

    def __init__(self, files: ImageFiles, image_shape: tuple[int, int, int]) -> None:
        self.files = files
        self.channels, height, width = image_shape
        self.size = (height, width)

    def __len__(self) -> int:
        return len(self.files)

    def read(self, index: int) -> torch.Tensor:
        pixels = decode_image(
            self.files.read_bytes(index), channels=self.channels, size=self.size, name=self.files.describe(index)
        )
        return torch.from_numpy(pixels)


class PreprocessedImages(Dataset):
    """Item (epoch, index): image `index` preprocessed, augmented (when training) from a seed of its own."""

    def __init__(
        self, images: ImageSource, labels: np.ndarray, preprocessing: Preprocessing, training: bool, seed: int
    ) -> None:
        self.images = images
        self.labels = torch.from_numpy(labels)
        self.preprocessing = preprocessing
        self.training = training
        self.seed = seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int]) -> Batch:
        epoch, index = key
        image = self.images.read(index)[None]  # a batch of one: preprocessing works on batches
        if self.training:
            image_seed = (self.seed * 1_000_003 + epoch) * 1_000_000_007 + index  # past 64 bits from seed 18,447
            generator = torch.Generator().manual_seed(image_seed % 2**64)  # manual_seed takes 64 bits at most
            return self.preprocessing.train(image, generator)[0], self.labels[index]
        return self.preprocessing.test(image)[0], self.labels[index]


class _OwnItems(Dataset):
    """Item (epoch, index): item `index` of a user's Dataset, the same in every epoch."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return length(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Batch:
        return self.dataset[key[1]]


class _EpochBatches(Sampler):
    """Yields each batch as a list of (epoch, index) keys; `epoch` and `steps` are set before each pass."""

    def __init__(self, num_samples: int, batch_size: int, seed: int, shuffle: bool, shard: Shard | None) -> None:
        self.num_samples, self.batch_size, self.seed, self.shuffle = num_samples, batch_size, seed, shuffle
        self.shard = shard
        self.epoch, self.steps = 0, math.ceil(num_samples / batch_size)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        order = epoch_order(self.num_samples, self.epoch, self.seed, self.shuffle)
        for step in range(self.steps):
            yield [(self.epoch, index) for index in _step_indices(order, step, self.batch_size, self.shard).tolist()]


class LoaderBatches:
    """Mini-batches made image by image in DataLoader workers (or in this process with `workers=0`)."""

    resident = False  # workers make each batch on the host

    def __init__(
        self,
        items: Dataset,
        batch_size: int,
        device: torch.device,
        *,
        workers: int,
        training: bool = True,
        seed: int = 0,
        shard: Shard | None = None,
    ) -> None:
        """`items[(epoch, index)]` is sample `index` as epoch `epoch` sees it: an (input, label) pair."""
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        if workers < 0:
            raise ValueError(f"workers must be 0 or more, got {workers}")
        self.shard = shard
        self.batch_size = shard.batch_size if shard else batch_size
        self.workers = workers
        self.device = device
        self._num_samples = length(items)
        self._order = _EpochBatches(length(items), self.batch_size, seed, shuffle=training, shard=shard)
        self._loader: DataLoader | None = DataLoader(
            items,
            batch_sampler=self._order,
            num_workers=workers,
            pin_memory=device.type == "cuda",  # page-locked host batches copy to the GPU asynchronously
            persistent_workers=workers > 0,  # workers start once per run (in the warm-up epoch), not per epoch
            worker_init_fn=_deaf_to_stop_signals,  # a module's function: workers may be spawned, not forked
        )

    def __len__(self) -> int:
        if self.shard is not None:
            return self.shard.steps(self._num_samples)
        return math.ceil(self._num_samples / self.batch_size)

    def batch_sizes(self, steps: int) -> list[int]:
        if self.shard is not None:
            return [self.batch_size] * steps
        return _batch_sizes(self._num_samples, self.batch_size, steps)

    def epoch(self, epoch: int, steps: int | None = None) -> Generator[Batch, None, None]:
        if self._loader is None:
            raise RuntimeError("these batches are closed")
        self._order.epoch, self._order.steps = epoch, len(self) if steps is None else steps
        for images, labels in self._loader:
            yield images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def close(self) -> None:
        """Stop the worker processes (dropping the loader drops its iterator, which shuts them down)."""
        self._loader = None


def _deaf_to_stop_signals(worker_id: int) -> None:
    """A loader worker ignores Ctrl-C and SIGHUP sent to the whole process group (a terminal), and outlives a SIGTERM
    sent to it (Slurm, `timeout`, `kill -- -PGID`) by WORKER_TERM_GRACE_S: the training process, which the same
    signal reached, stops and closes it itself well before. A worker that died first turned the stop into a
    "DataLoader worker is killed by signal" failure. It does not ignore SIGTERM outright: that is how torch, and
    multiprocessing at the interpreter's exit, end a worker that is still there, and waiting for one that never ends
    hung the exit.

    A stop can also come while the training process receives a batch's shared memory from a worker: the thread that
    hands it over (multiprocessing's resource sharer) then finds the connection closed. That is the stop, which
    the training process reports; the worker's thread says nothing of it, where it printed half a traceback."""
    for name in ("SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _leave_soon)
    threading.excepthook = _quiet_when_cut_off


WORKER_TERM_GRACE_S = 5.0  # how long a loader worker lives on after SIGTERM, for the training process to close it


def _leave_soon(number: int, frame: object) -> None:
    """SIGTERM in a loader worker: end it WORKER_TERM_GRACE_S from now, unless it was closed before."""

    def leave() -> None:
        time.sleep(WORKER_TERM_GRACE_S)
        os._exit(0)

    threading.Thread(target=leave, name="devicebench-worker-term", daemon=True).start()


def _quiet_when_cut_off(args: threading.ExceptHookArgs) -> None:
    if not issubclass(args.exc_type, (EOFError, OSError)):  # a closed connection: the training process stopped
        threading.__excepthook__(args)


def default_workers(dataset: Data, preprocessing: Preprocessing) -> int:
    """Loader processes when the user names none: none for in-memory data with nothing random to do, and for
    a user's own Dataset (as torch's DataLoader: the input-bound verdict says when more would help); otherwise
    one per core up to MOST_DEFAULT_WORKERS."""
    if isinstance(dataset, (ArrayDataset, TokenDataset, TensorData, TorchData)) and not preprocessing.augments:
        return 0
    return min(MOST_DEFAULT_WORKERS, usable_cores())


def usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def batches_for(
    dataset: Data,
    image_shape: tuple[int, int, int] | None,
    preprocessing: Preprocessing,
    batch_size: int,
    device: torch.device,
    *,
    workers: int,
    seed: int,
    resident: bool = True,
    device_augment: bool = False,
    shard: Shard | None = None,
) -> tuple[Batches, Batches]:
    """(training batches, test batches) of `dataset`, as a model taking `image_shape` images needs them.

    `resident`: hold in-memory data on the device where it fits (`HostBatches`); False gathers every batch on
    the host and copies it, as data too big for the device is.
    `device_augment`: distort in-memory images a batch at a time where they are held, where the preprocessing can
    (tuned mode; data/device_augment.py), not image by image in loader workers.
    `shard`: this process's slice of every training batch (data-parallel training); every process evaluates on
    the whole test split.
    """
    if isinstance(dataset, TorchData):  # a user's Dataset: its own __getitem__ makes each sample
        assert dataset.test is not None  # TorchData makes an empty test split where none was given
        return _loaded(_OwnItems(dataset.train), _OwnItems(dataset.test), batch_size, device, workers, seed, shard)
    in_memory = _host_batches(batch_size, device, preprocessing, seed, resident, shard)
    if isinstance(dataset, TensorData):  # tensors in memory, nothing random: the fast path
        assert dataset.x_test is not None and dataset.y_test is not None  # made empty where none was given
        return in_memory((dataset.x_train, dataset.y_train), (dataset.x_test, dataset.y_test))
    if isinstance(dataset, TokenDataset):
        return in_memory((dataset.train_tokens, dataset.train_labels), (dataset.test_tokens, dataset.test_labels))
    # images go only to a model that takes images, which names their shape
    assert image_shape is not None, f"{dataset.name} holds images but the model takes none"
    train_images: ArrayImages | FileImages
    test_images: ArrayImages | FileImages
    if isinstance(dataset, ArrayDataset):
        if dataset.image_shape != tuple(image_shape):
            raise ValueError(
                f"the model takes {_shape_text(image_shape)} images but {dataset.name} holds "
                f"{_shape_text(dataset.image_shape)}; give --data-dir a folder of images to resize"
            )
        if workers == 0 and not preprocessing.augments:
            return in_memory((dataset.train_images, dataset.train_labels), (dataset.test_images, dataset.test_labels))
        if device_augment and preprocessing.device_augments:  # uint8 batches gathered, then distorted, on the device
            distorted = _host_batches(batch_size, device, preprocessing, seed, resident, shard, augment_on_device=True)
            return distorted((dataset.train_images, dataset.train_labels), (dataset.test_images, dataset.test_labels))
        train_images, test_images = ArrayImages(dataset.train_images), ArrayImages(dataset.test_images)
        train_labels, test_labels = dataset.train_labels, dataset.test_labels
    else:
        train_images, test_images = FileImages(dataset.train, image_shape), FileImages(dataset.test, image_shape)
        train_labels, test_labels = dataset.train.labels, dataset.test.labels
    return _loaded(
        PreprocessedImages(train_images, train_labels, preprocessing, True, seed),
        PreprocessedImages(test_images, test_labels, preprocessing, False, seed),
        batch_size,
        device,
        workers,
        seed,
        shard,
    )


Arrays = tuple["np.ndarray | torch.Tensor", "np.ndarray | torch.Tensor"]  # (inputs, labels) of one split


def _host_batches(
    batch_size: int,
    device: torch.device,
    preprocessing: Preprocessing,
    seed: int,
    resident: bool,
    shard: Shard | None,
    *,
    augment_on_device: bool = False,
) -> Callable[[Arrays, Arrays], tuple[Batches, Batches]]:
    """How in-memory splits become batches: the training split shuffled and sharded, the test split in order; with
    `augment_on_device`, the training split gathered as uint8 and distorted a batch at a time where it is held."""

    def batches(train: Arrays, test: Arrays) -> tuple[Batches, Batches]:
        gathered = Unchanged() if augment_on_device else preprocessing
        training: Batches = HostBatches(
            *train, batch_size, device, preprocessing=gathered, seed=seed, resident=resident, shard=shard
        )
        if augment_on_device:
            training = DeviceAugmentedBatches(training, preprocessing, device, seed)
        return training, HostBatches(
            *test, batch_size, device, preprocessing=preprocessing, shuffle=False, resident=resident
        )

    return batches


def _loaded(
    train: Dataset,
    test: Dataset,
    batch_size: int,
    device: torch.device,
    workers: int,
    seed: int,
    shard: Shard | None,
) -> tuple[Batches, Batches]:
    """Splits whose samples are made one by one, by loader workers: the training one shuffled and sharded."""
    return (
        LoaderBatches(train, batch_size, device, workers=workers, seed=seed, shard=shard),
        LoaderBatches(test, batch_size, device, workers=workers, training=False),
    )


def _shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(size) for size in shape)
