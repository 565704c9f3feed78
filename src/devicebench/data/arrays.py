"""The in-memory image dataset and the words every data module shares: where data comes from, and what was asked.

Kept apart from `devicebench.data` so that the readers (synthetic, images, text, tables) can build datasets
without importing the package that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

DataSource = Literal["real", "synthetic"]


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A whole image-classification dataset held in host memory.

    Images are uint8 in NCHW layout (scaled to [0, 1] only when a batch is formed, as the seeds did);
    labels are int64 class indices.
    """

    name: str  # "mnist", "cifar10", "cifar100"
    source: DataSource  # "real" or "synthetic": shown in every table and stored in every result
    train_images: np.ndarray  # uint8, (N, C, H, W)
    train_labels: np.ndarray  # int64, (N,)
    test_images: np.ndarray  # uint8, (M, C, H, W)
    test_labels: np.ndarray  # int64, (M,)
    num_classes: int
    origin: str = ""  # where the bytes came from: a file path, or the generator and its seed
    fallback_reason: str | None = None  # why "auto" gave synthetic data instead of real; None when it did not
    notes: tuple[str, ...] = ()  # things a user should be told: a synthetic stand-in smaller than the release

    def __post_init__(self) -> None:
        for split, images, labels in (
            ("train", self.train_images, self.train_labels),
            ("test", self.test_images, self.test_labels),
        ):
            if images.dtype != np.uint8 or images.ndim != 4:
                raise ValueError(f"{self.name} {split} images must be uint8 NCHW, got {images.dtype} {images.shape}")
            if labels.shape != (images.shape[0],):
                raise ValueError(f"{self.name} {split}: {images.shape[0]} images but labels of shape {labels.shape}")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_images.shape[1:])

    def __repr__(self) -> str:
        return (
            f"ArrayDataset({self.name!r}, source={self.source!r}, train={len(self.train_labels)}, "
            f"test={len(self.test_labels)}, image_shape={self.image_shape}, classes={self.num_classes}"
            + (f", fallback_reason={self.fallback_reason!r})" if self.fallback_reason else ")")
        )
