"""Write a cats-vs-dogs-like image folder for pipeline benchmarks when the real photos cannot be downloaded.

The Microsoft PetImages photos are JPEGs of about 500x375 pixels and 33 kB on average (825 MB for 25,000
files). Decoding them is the input pipeline's main cost, so the stand-ins match that: smooth colour fields
with fine noise, saved at JPEG quality 75, about the same size and decode time as a photo. Two classes, told
apart by their dominant hue, laid out as the seeds' tutorial had them: training_set/{cats,dogs},
test_set/{cats,dogs}.

    python benchmarks/make_image_folder.py /tmp/pets --train-per-class 1000 --test-per-class 250
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

PHOTO_SIZE = (500, 375)  # width, height: the commonest size in PetImages
JPEG_QUALITY = 75  # Pillow's default, close to the photos' own
CLASS_HUES = {"cats": (150, 110, 90), "dogs": (90, 110, 150)}  # mean RGB a class's images lean to


def photo_like(rng: np.random.Generator, tint: tuple[int, int, int]) -> Image.Image:
    """A smooth random colour field (coarse blocks upsampled) plus fine noise: JPEG sizes like a photo's."""
    width, height = PHOTO_SIZE
    coarse = rng.normal(tint, 40, size=(6, 8, 3)).clip(0, 255).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse, "RGB").resize((width, height), Image.Resampling.BICUBIC))
    noise = rng.normal(0, 9, size=field.shape)
    return Image.fromarray((field + noise).clip(0, 255).astype(np.uint8), "RGB")


def write_folder(root: Path, train_per_class: int, test_per_class: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    written = 0
    for split, count in (("training_set", train_per_class), ("test_set", test_per_class)):
        for name, tint in CLASS_HUES.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                photo_like(rng, tint).save(folder / f"{name[:-1]}.{index}.jpg", quality=JPEG_QUALITY)
                written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="folder to create (training_set/ and test_set/ go inside)")
    parser.add_argument("--train-per-class", type=int, default=1000)
    parser.add_argument("--test-per-class", type=int, default=250)
    arguments = parser.parse_args()
    written = write_folder(arguments.root, arguments.train_per_class, arguments.test_per_class)
    sizes = [path.stat().st_size for path in arguments.root.rglob("*.jpg")]
    print(
        f"{written} JPEGs of {PHOTO_SIZE[0]}x{PHOTO_SIZE[1]} in {arguments.root}, "
        f"mean {sum(sizes) / len(sizes) / 1000:.0f} kB"
    )


if __name__ == "__main__":
    main()
