"""Preprocessing: uint8 images in, the float inputs a model takes out, with the seeds' augmentations.

Every function takes a batch (N, C, H, W) of uint8 pixels, so the same code serves a DataLoader worker
(one image, N = 1, the seeds' way) and the in-memory fast path (a whole batch at once). `train` may draw
random distortions from the generator it is given; `test` never does. A preprocessing is a frozen dataclass
of plain values, so a checkpoint can carry it and `predict` can apply exactly what training applied.

The distortions of `KerasAugmentation` and `CifarDistortion` are drawn (`draw`) apart from being applied
(`distort`): one draw per image, each from the same laws whatever the batch's size, then applied to the whole
batch at once with no Python loop over its images and nothing read back to the host, on the device the
images and the generator are on (`device_augments`; data/device_augment.py runs them so in tuned mode).

    python -c "import torch; from devicebench.data.augmentation import KerasAugmentation as K; x = torch.full((1, 3, 8, 8), 255, dtype=torch.uint8); print(K().train(x, torch.Generator().manual_seed(0)).mean())"
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

PIXEL_SCALE = 255.0  # uint8 pixels → [0, 1], as every Keras seed did with rescale=1/255


@dataclass(frozen=True)
class Rescale:
    """Pixels divided by 255, no augmentation: what MNIST, the CIFAR MLPs and `--set augment=false` get."""

    @property
    def augments(self) -> bool:
        return False

    @property
    def device_augments(self) -> bool:
        """Whether `train` distorts a whole batch on any device, drawing on a generator there: nothing to distort."""
        return False

    def train(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.test(images)

    def test(self, images: torch.Tensor) -> torch.Tensor:
        return images.float().div_(PIXEL_SCALE)

    def output_shape(self, image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        """The shape of one model input made from an image of `image_shape` (C, H, W)."""
        return image_shape


@dataclass(frozen=True)
class KerasAugmentation(Rescale):
    """Keras `ImageDataGenerator(rescale=1/255, shear_range, zoom_range, horizontal_flip=True)`, per image.

    Keras draws for each image a shear angle in [-shear, shear], zoom factors for rows and columns in
    [1 - zoom, 1 + zoom] independently, and a coin for the flip; it resamples bilinearly and fills outside
    the image with the nearest edge pixel. `grid_sample(padding_mode="border")` is exactly that fill.
    Our reading: the shear is in radians, as Keras read `shear_range` until 2.2 (the tutorial's era); Keras
    2.2 and later read degrees, which makes 0.2 an invisible 0.2°.
    """

    shear: float = 0.2  # radians, the largest shear angle either way
    zoom: float = 0.2  # zoom factors are drawn from [1 - zoom, 1 + zoom]
    horizontal_flip: bool = True

    @property
    def augments(self) -> bool:
        return self.shear > 0 or self.zoom > 0 or self.horizontal_flip

    @property
    def device_augments(self) -> bool:
        return self.augments

    def train(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.distort(images, self.draw(images, generator))

    def draw(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One row of uniforms in [0, 1) per image, on the images' device (where `generator` must be): its shear
        angle, its zoom of rows, of columns, and its flip."""
        return torch.rand(len(images), 4, generator=generator, device=images.device)

    def distort(self, images: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        """`images` sheared, zoomed and flipped as `draws` (from `draw`) say, image by image."""
        pixels = self.test(images)
        count = len(pixels)
        angle = (draws[:, 0] * 2 - 1) * self.shear
        zoom_rows = 1 + (draws[:, 1] * 2 - 1) * self.zoom
        zoom_columns = 1 + (draws[:, 2] * 2 - 1) * self.zoom
        # Keras maps each output pixel (row, column) to the input through shear @ zoom; written for
        # affine_grid, whose coordinates are (x = column, y = row) normalised to [-1, 1] around the centre:
        theta = torch.zeros(count, 2, 3, device=pixels.device)
        theta[:, 0, 0] = torch.cos(angle) * zoom_columns
        theta[:, 1, 0] = -torch.sin(angle) * zoom_columns * pixels.shape[-1] / pixels.shape[-2]  # x, y scale apart
        theta[:, 1, 1] = zoom_rows
        grid = F.affine_grid(theta, list(pixels.shape), align_corners=False)
        pixels = F.grid_sample(pixels, grid, mode="bilinear", padding_mode="border", align_corners=False)
        if self.horizontal_flip:
            pixels = _flip_where(draws[:, 3] < 0.5, pixels)
        return pixels


class CropDraws(NamedTuple):
    """`CifarDistortion`'s random draws for a batch, one per image."""

    rows: torch.Tensor  # (N,) int64: each crop's top row, uniform over the rows a whole crop fits below
    columns: torch.Tensor  # (N,) int64: each crop's left column, likewise
    uniforms: torch.Tensor  # (N, 3) in [0, 1): the flip (below 1/2), the brightness shift, the contrast factor


@dataclass(frozen=True)
class CifarDistortion:
    """The TensorFlow CIFAR-10 tutorial's `distorted_inputs` (training) and `inputs` (evaluation).

    Training: a random 24x24 crop, a random left-right flip, brightness shifted by up to 63 grey levels,
    contrast scaled by 0.2-1.8 about each channel's mean, then per-image standardisation. Evaluation: the
    central 24x24 crop, standardised. Pixels stay on the 0-255 scale throughout, as in the tutorial (the
    standardisation makes the scale irrelevant, except for its floor on the deviation, 1/sqrt(pixels)).
    With `augment=False` training gets the evaluation preprocessing.
    """

    crop: int = 24  # pixels per side of the model's input
    brightness: float = 63.0  # grey levels, the largest shift either way
    contrast_low: float = 0.2
    contrast_high: float = 1.8
    augment: bool = True

    @property
    def augments(self) -> bool:
        return self.augment

    @property
    def device_augments(self) -> bool:
        return self.augment

    def train(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if not self.augment:
            return self.test(images)
        return self.distort(images, self.draw(images, generator))

    def draw(self, images: torch.Tensor, generator: torch.Generator) -> CropDraws:
        """One distortion per image, on the images' device (where `generator` must be)."""
        count, _, height, width = images.shape
        rows = torch.randint(0, height - self.crop + 1, (count,), generator=generator, device=images.device)
        columns = torch.randint(0, width - self.crop + 1, (count,), generator=generator, device=images.device)
        return CropDraws(rows, columns, torch.rand(count, 3, generator=generator, device=images.device))

    def distort(self, images: torch.Tensor, draws: CropDraws) -> torch.Tensor:
        """`images` cropped, flipped, brightened and contrasted as `draws` (from `draw`) say, then standardised."""
        uniforms = draws.uniforms
        crops = _windows(images, draws.rows, draws.columns, self.crop, mirrored=uniforms[:, 0] < 0.5).float()
        crops += ((uniforms[:, 1] * 2 - 1) * self.brightness).view(-1, 1, 1, 1)
        factor = (self.contrast_low + uniforms[:, 2] * (self.contrast_high - self.contrast_low)).view(-1, 1, 1, 1)
        channel_means = crops.mean(dim=(2, 3), keepdim=True)
        crops = (crops - channel_means) * factor + channel_means
        return _standardize(crops)

    def test(self, images: torch.Tensor) -> torch.Tensor:
        _, _, height, width = images.shape
        top, left = (height - self.crop) // 2, (width - self.crop) // 2
        return _standardize(images[:, :, top : top + self.crop, left : left + self.crop].float())

    def output_shape(self, image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        return (image_shape[0], self.crop, self.crop)


# The ImageNet training set's mean and deviation per channel (R, G, B) on the [0, 1] scale: what torchvision's
# reference scripts and NVIDIA's Deep Learning Examples normalise ImageNet inputs with
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class ImageNetInput:
    """The input of the ImageNet reference models: pixels scaled to [0, 1], resized (bilinear, antialiased) to
    `size` x `size` when the images are another size, each channel normalised by ImageNet's mean and deviation.

    Images are decoded at 224 x 224 (the models' own size); a smaller `size` trains the same model on smaller
    inputs, for a laptop or a test. No random crops or flips: those are the input pipeline's work, not the model's.
    """

    size: int = 224  # pixels per side of the model's input

    @property
    def augments(self) -> bool:
        return False

    @property
    def device_augments(self) -> bool:
        return False

    def train(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.test(images)

    def test(self, images: torch.Tensor) -> torch.Tensor:
        pixels = images.float().div_(PIXEL_SCALE)
        if pixels.shape[-2:] != (self.size, self.size):
            pixels = F.interpolate(
                pixels, size=(self.size, self.size), mode="bilinear", antialias=True, align_corners=False
            )
        mean = torch.tensor(IMAGENET_MEAN, device=pixels.device).view(1, -1, 1, 1)
        deviation = torch.tensor(IMAGENET_STD, device=pixels.device).view(1, -1, 1, 1)
        return (pixels - mean) / deviation

    def output_shape(self, image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        return (image_shape[0], self.size, self.size)


@dataclass(frozen=True)
class Unchanged:
    """Inputs that are not pixels (token ids): handed to the model as they are."""

    @property
    def augments(self) -> bool:
        return False

    @property
    def device_augments(self) -> bool:
        return False

    def train(self, inputs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return inputs

    def test(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape


def _windows(
    images: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor, size: int, mirrored: torch.Tensor
) -> torch.Tensor:
    """The `size` x `size` window of each image whose top left is (`rows`, `columns`), mirrored left to right where
    `mirrored`: gathered through an index grid, so a whole batch is cut at once without reading the offsets back."""
    count, channels, _, width = images.shape
    steps = torch.arange(size, device=images.device)
    window_rows = (rows.view(-1, 1) + steps).view(count, 1, size, 1).expand(count, channels, size, width)
    window_columns = columns.view(-1, 1) + torch.where(mirrored.view(-1, 1), steps.flip(0), steps)
    window_columns = window_columns.view(count, 1, 1, size).expand(count, channels, size, size)
    return images.gather(2, window_rows).gather(3, window_columns)


def _flip_where(chosen: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """`images` with the `chosen` ones mirrored left to right (a masked assignment is 1000x slower on the CPU)."""
    return torch.where(chosen.view(-1, 1, 1, 1), images.flip(-1), images)


def _standardize(pixels: torch.Tensor) -> torch.Tensor:
    """TensorFlow's `per_image_standardization`: zero mean, unit deviation per image, deviation floored."""
    per_image = pixels.flatten(1)
    floor = 1 / math.sqrt(per_image.shape[1])
    mean = per_image.mean(dim=1).view(-1, 1, 1, 1)
    deviation = per_image.std(dim=1, correction=0).clamp(min=floor).view(-1, 1, 1, 1)
    return (pixels - mean) / deviation


Preprocessing = Rescale | KerasAugmentation | CifarDistortion | ImageNetInput | Unchanged
KINDS: dict[str, type] = {
    kind.__name__: kind for kind in (Rescale, KerasAugmentation, CifarDistortion, ImageNetInput, Unchanged)
}


def describe(preprocessing: Preprocessing) -> dict[str, Any]:
    """Plain data that `rebuild` turns back into the same preprocessing (for checkpoints)."""
    return {"kind": type(preprocessing).__name__, **dataclasses.asdict(preprocessing)}


def rebuild(description: dict[str, Any]) -> Preprocessing:
    fields = dict(description)
    kind = fields.pop("kind", None)
    if kind not in KINDS:
        raise ValueError(f"unknown preprocessing {kind!r}; known: {', '.join(KINDS)}")
    return KINDS[kind](**fields)
