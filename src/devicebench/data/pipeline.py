"""Mini-batches from an in-memory dataset to a device, the way the seeds fed Keras: on the host.

Each epoch shuffles with its own seeded order, gathers one batch of uint8 images, scales it to [0, 1] on the
host and moves it to the device. The last, partial batch is kept (Keras' 1563 steps for 50,000 samples at 32).

    python -c "from devicebench.data import load_dataset; from devicebench.data.pipeline import HostBatches; import torch; d = load_dataset('mnist', 'synthetic'); b = HostBatches(d.train_images, d.train_labels, 50, torch.device('cpu')); print(len(b), next(iter(b.epoch(1)))[0].shape)"
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

PIXEL_SCALE = 255.0  # uint8 pixels → [0, 1], as every seed did


class HostBatches:
    """Shuffled mini-batches of uint8 images, scaled on the host and moved to `device`."""

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray,
        batch_size: int,
        device: torch.device,
        *,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch size must be at least 1, got {batch_size}")
        self.images = torch.from_numpy(images)  # shares memory with the dataset: no copy
        self.labels = torch.from_numpy(labels)
        self.batch_size = batch_size
        self.device = device
        self.shuffle = shuffle
        self.seed = seed

    @property
    def num_samples(self) -> int:
        return len(self.labels)

    def __len__(self) -> int:
        """Steps in one full pass."""
        return math.ceil(self.num_samples / self.batch_size)

    def batch_sizes(self, steps: int) -> list[int]:
        """The number of samples in each of the first `steps` batches (only the last of a full pass is short)."""
        return [min(self.batch_size, self.num_samples - step * self.batch_size) for step in range(steps)]

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of one epoch; the order depends only on (seed, epoch), so every device sees the same data."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.num_samples, generator=generator)
        else:
            order = torch.arange(self.num_samples)
        for start in range(0, self.num_samples, self.batch_size):
            index = order[start : start + self.batch_size]
            images = self.images[index].float().div_(PIXEL_SCALE)
            yield (
                images.to(self.device, non_blocking=True),
                self.labels[index].to(self.device, non_blocking=True),
            )
