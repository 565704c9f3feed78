"""Image folders written with Pillow for tests: classes told apart by brightness, so any model learns them fast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

BRIGHTNESS = {"dark": 50, "light": 150}  # grey level each class's pixels scatter around
# Noise in proportion to the brightness makes a light image a scaled-up dark one: only the level tells them
# apart, so a model must learn an offset (a bias), the thing raw 0-255 pixels overwhelm.
NOISE_PER_GREY_LEVEL = 0.3


def write_image(path: Path, brightness: int, rng: np.random.Generator, size: tuple[int, int] = (48, 40)) -> Path:
    """A colour JPEG (or PNG, by suffix) of noisy pixels around `brightness`."""
    noise = rng.normal(0, NOISE_PER_GREY_LEVEL * brightness, size=(size[1], size[0], 3))
    pixels = np.clip(brightness + noise, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels, "RGB").save(path)
    return path


def write_brightness_folder(root: Path, train_per_class: int = 24, test_per_class: int = 8, seed: int = 0) -> Path:
    """root/train/<dark|light>/*.jpg and root/test/<dark|light>/*.png, of varying sizes."""
    rng = np.random.default_rng(seed)
    for split, count, suffix in (("train", train_per_class, ".jpg"), ("test", test_per_class, ".png")):
        for name, brightness in BRIGHTNESS.items():
            for index in range(count):
                size = (int(rng.integers(30, 90)), int(rng.integers(30, 90)))
                write_image(root / split / name / f"{index}{suffix}", brightness, rng, size)
    return root
