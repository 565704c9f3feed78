"""Training batches distorted on the device, a whole batch at a time: tuned mode's way with in-memory images.

The seeds distort each image on the host, one at a time, in DataLoader workers (pipeline.py's `LoaderBatches`): on
an H200, cifar10-cnn waited 1.8 s of its 3.5 s epoch for them. Here the uint8 training split is gathered a batch at a
time where it is held (on the device when it fits: pipeline.py's `HostBatches`), and the batch is distorted there by
the preprocessing's own `train`, which draws each image's distortion from the same laws as the per-image path but
from one generator on the device, with no loop over images and nothing read back to the host. Each epoch's draws
come from a generator seeded by (seed, epoch) alone, so a run is repeatable; they are not the per-image path's draws.

    python -c "from devicebench.data import load_dataset; from devicebench.data.pipeline import batches_for; from devicebench.data.augmentation import CifarDistortion; import torch; d = load_dataset('cifar10', 'synthetic'); b = batches_for(d, (3, 32, 32), CifarDistortion(), 128, torch.device('cpu'), workers=0, seed=0, device_augment=True)[0]; print(type(b).__name__, next(b.epoch(1))[0].shape)"
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from devicebench.data.arrays import Batch, Batches
from devicebench.data.augmentation import Preprocessing

AUGMENTATION_STREAM = 2**63 + 1  # mixed into each epoch's seed: draws apart from those `epoch_order` shuffles with


def epoch_generator(device: torch.device, seed: int, epoch: int) -> torch.Generator:
    """The generator every distortion of `epoch` draws from, on `device`."""
    generator = torch.Generator(device)
    # reduced to 64 bits, as epoch_order's: manual_seed refuses larger integers, and any --seed is allowed
    return generator.manual_seed(((seed * 1_000_003 + epoch) ^ AUGMENTATION_STREAM) % 2**64)


class DeviceAugmentedBatches:
    """`gathered`'s uint8 batches (on `device`, in `epoch_order`'s order) distorted by `preprocessing.train`."""

    workers = 0  # the training process makes every batch, on the device

    def __init__(self, gathered: Batches, preprocessing: Preprocessing, device: torch.device, seed: int) -> None:
        if not preprocessing.device_augments:
            raise ValueError(f"{preprocessing} cannot distort a batch on the device")
        self.gathered = gathered
        self.preprocessing = preprocessing
        self.device = device
        self.seed = seed
        self.batch_size = gathered.batch_size
        self.resident = gathered.resident

    def __len__(self) -> int:
        return len(self.gathered)

    def batch_sizes(self, steps: int) -> list[int]:
        return self.gathered.batch_sizes(steps)

    def epoch(self, epoch: int, steps: int | None = None) -> Generator[Batch, None, None]:
        generator = epoch_generator(self.device, self.seed, epoch)
        for images, labels in self.gathered.epoch(epoch, steps):
            yield self.preprocessing.train(images, generator), labels

    def close(self) -> None:
        self.gathered.close()
