"""Synthetic stand-ins for the real datasets: same shapes, dtypes and class counts, seeded, and learnable.

Each class has a fixed random prototype image made of coarse blocks (structure a convolution can pick up);
a sample is its class's prototype plus uniform pixel noise. A model's loss falls on it as on real data, so
throughput and time-to-accuracy runs work offline; the numbers say "synthetic" wherever they are shown.

    python -c "from devicebench.data.synthetic import synthetic_dataset; print(synthetic_dataset('cifar10'))"
"""

from __future__ import annotations

import numpy as np

from devicebench.data.arrays import ArrayDataset
from devicebench.data.sources import dataset_spec

PROTOTYPE_BLOCK_PIXELS = 4  # side of one random block of a prototype: 7 x 7 blocks for MNIST, 8 x 8 for CIFAR
# A prototype pixel is 64..191 and the noise -64..63 grey levels (uniform, std ~37), so a sample always lies
# in 0..254: no clipping is needed and the arithmetic stays in uint8, which keeps full-size CIFAR under 1 s.
PROTOTYPE_OFFSET = 64  # grey levels
# Samples whose prototypes are blown up to full size at once: ImageNet's 1,000 prototypes at 224 x 224 would take
# 150 MB beside the images, and its 1,280 samples' another 193 MB; a chunk of 512 takes 77 MB
SAMPLES_PER_CHUNK = 512


def synthetic_dataset(
    name: str,
    *,
    seed: int = 0,
    train_size: int | None = None,
    test_size: int | None = None,
    image_shape: tuple[int, int, int] | None = None,
) -> ArrayDataset:
    """A deterministic synthetic dataset shaped like `name`; sizes default to those of the real release (or to the
    capped ones of a release too large for memory, `synthetic_sizes`), the image shape to the release's (datasets
    of photos of every size take the shape the model is fed)."""
    spec = dataset_spec(name)
    default_train, default_test = spec.synthetic_sizes or (spec.train_size, spec.test_size)
    train_size = default_train if train_size is None else train_size
    test_size = default_test if test_size is None else test_size
    if train_size < 1 or test_size < 1:
        raise ValueError(f"synthetic {name}: sizes must be at least 1, got train={train_size} test={test_size}")

    # Independent streams, so the test split does not change when only train_size does.
    seeds = np.random.SeedSequence(seed).spawn(3)
    prototype_rng, train_rng, test_rng = (np.random.default_rng(child_seed) for child_seed in seeds)
    shape = image_shape or spec.image_shape
    if shape is None:  # a text, sequence or table dataset
        raise ValueError(f"synthetic {name}: {spec.title} holds no images; give image_shape")
    channels, height, width = shape
    blocks_high, blocks_wide = -(-height // PROTOTYPE_BLOCK_PIXELS), -(-width // PROTOTYPE_BLOCK_PIXELS)
    # 0..127; the offset comes with the noise
    coarse = prototype_rng.integers(0, 128, size=(spec.num_classes, channels, blocks_high, blocks_wide), dtype=np.uint8)

    train_images, train_labels = _noisy_samples(coarse, (height, width), train_size, train_rng)
    test_images, test_labels = _noisy_samples(coarse, (height, width), test_size, test_rng)
    return ArrayDataset(
        name=spec.name,
        source="synthetic",
        train_images=train_images,
        train_labels=train_labels,
        test_images=test_images,
        test_labels=test_labels,
        num_classes=spec.num_classes,
        origin=(
            (
                f"synthetic: {train_size:,} train + {test_size:,} test images standing in for {spec.title}'s "
                f"{spec.train_size:,} + {spec.test_size:,}; "
                if spec.synthetic_sizes
                else "synthetic: "
            )
            + f"{spec.num_classes} random {PROTOTYPE_BLOCK_PIXELS}x{PROTOTYPE_BLOCK_PIXELS}-block prototypes "
            f"+ uniform noise of +-{PROTOTYPE_OFFSET} grey levels, numpy SeedSequence({seed})"
        ),
        notes=(f"the whole release would not fit in memory: an epoch is {train_size:,} images",)
        if spec.synthetic_sizes
        else (),
    )


def _noisy_samples(
    coarse: np.ndarray, size: tuple[int, int], count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` samples of `size` (height, width) with balanced labels (class counts differ by at most one), shuffled:
    each its class's prototype (`coarse` blocks, blown up) plus noise."""
    labels = rng.permutation(np.arange(count) % len(coarse))
    # Full-range uint8 draws are numpy's fast path; halving them gives the noise plus its offset, 0..127.
    images = rng.integers(0, 256, size=(count, coarse.shape[1], *size), dtype=np.uint8)
    np.right_shift(images, 1, out=images)
    for start in range(0, count, SAMPLES_PER_CHUNK):
        chunk = slice(start, start + SAMPLES_PER_CHUNK)
        np.add(images[chunk], _full_size(coarse[labels[chunk]], size), out=images[chunk])  # 0..127 + 0..127: no wrap
    return images, labels.astype(np.int64)


def _full_size(coarse: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Prototypes of coarse blocks at `size` (height, width): each block PROTOTYPE_BLOCK_PIXELS a side, cropped."""
    height, width = size
    return coarse.repeat(PROTOTYPE_BLOCK_PIXELS, axis=2).repeat(PROTOTYPE_BLOCK_PIXELS, axis=3)[:, :, :height, :width]
