"""Preprocessing of uint8 batches: Rescale, the Keras ImageDataGenerator augmentation, the TF CIFAR distortion.

Covered: scaling to [0, 1]; which preprocessings count as augmenting; that `test` is never random; that
`train` is a function of the generator's seed alone; what the Keras flip, zoom and border fill do to known
images; the CIFAR crop sizes, the centre crop and per-image standardisation (including its floor for a
constant image and its removal of a brightness shift); and the describe/rebuild round trip used by checkpoints.

    python -m pytest tests/test_augmentation.py -q
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from devicebench.data.augmentation import (
    CifarDistortion,
    KerasAugmentation,
    Rescale,
    describe,
    rebuild,
)

CIFAR_SIZE = 32  # pixels per side of a CIFAR image
CROP = 24  # pixels per side of the TF tutorial's crop
CROP_OFFSETS = CIFAR_SIZE - CROP + 1  # positions a random crop may start at, per axis


def random_pixels(*shape: int, seed: int = 0) -> torch.Tensor:
    """uint8 pixels drawn uniformly from 0..255: no symmetry, so a flip or a shifted crop shows."""
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------------
# Rescale
# ---------------------------------------------------------------------------------------------------------------


def test_rescale_maps_0_and_255_to_0_and_1_as_float32_keeping_the_shape() -> None:
    images = torch.tensor([0, 255, 51], dtype=torch.uint8).view(1, 1, 1, 3).expand(2, 3, 4, 3).contiguous()

    scaled = Rescale().test(images)

    assert scaled.dtype == torch.float32
    assert scaled.shape == images.shape
    assert scaled[..., 0].eq(0.0).all() and scaled[..., 1].eq(1.0).all()
    assert torch.allclose(scaled[..., 2], torch.tensor(0.2))
    assert images.dtype == torch.uint8 and images.max() == 255  # the input batch is left as it was


def test_rescale_does_not_augment_and_trains_on_exactly_what_it_tests_on() -> None:
    images = random_pixels(4, 3, 8, 8)

    assert Rescale().augments is False
    assert torch.equal(Rescale().train(images, seeded(0)), Rescale().test(images))
    assert Rescale().output_shape((3, 8, 8)) == (3, 8, 8)


# ---------------------------------------------------------------------------------------------------------------
# KerasAugmentation
# ---------------------------------------------------------------------------------------------------------------


def test_keras_augmentation_depends_only_on_the_generator_seed() -> None:
    images = random_pixels(8, 3, 16, 16)
    augmentation = KerasAugmentation()

    first, again = augmentation.train(images, seeded(7)), augmentation.train(images, seeded(7))
    other = augmentation.train(images, seeded(8))

    assert torch.equal(first, again)
    assert not torch.allclose(first, other, atol=1e-3)
    assert not torch.allclose(first, augmentation.test(images), atol=1e-3)  # it did distort something


def test_keras_identity_transform_reproduces_the_pixels_of_a_non_square_image() -> None:
    # shear=0, zoom=0 gives an identity theta; grid_sample at align_corners=False must then land on pixel centres.
    images = random_pixels(6, 3, 7, 11)

    out = KerasAugmentation(shear=0, zoom=0, horizontal_flip=False).train(images, seeded(0))

    assert torch.allclose(out, Rescale().test(images), rtol=0, atol=1e-6)


def test_keras_flip_alone_leaves_each_image_unchanged_or_mirrored_about_half_the_time_each() -> None:
    images = random_pixels(200, 3, 5, 6)
    scaled = Rescale().test(images)

    out = KerasAugmentation(shear=0, zoom=0, horizontal_flip=True).train(images, seeded(3))

    unchanged = (out - scaled).abs().flatten(1).amax(dim=1) <= 1e-6
    mirrored = (out - scaled.flip(-1)).abs().flatten(1).amax(dim=1) <= 1e-6
    assert not (unchanged & mirrored).any()  # the images are asymmetric, so the two cases cannot both hold
    assert (unchanged | mirrored).all()
    assert 70 <= int(mirrored.sum()) <= 130  # Binomial(200, 1/2): mean 100, standard deviation ~7


def test_keras_augmentation_keeps_values_within_0_and_1() -> None:
    images = random_pixels(32, 3, 16, 16)
    images[:, :, :, :4] = 255  # saturated and black stripes at the edges the border fill repeats
    images[:, :, :, -4:] = 0

    out = KerasAugmentation(shear=0.5, zoom=0.5).train(images, seeded(1))

    assert out.min() >= 0.0 and out.max() <= 1.0


def test_keras_zoom_fills_with_the_nearest_edge_so_a_constant_image_stays_constant() -> None:
    images = torch.full((16, 3, 12, 12), 200, dtype=torch.uint8)  # zooming out by up to 2x shows the border

    out = KerasAugmentation(shear=0, zoom=0.5, horizontal_flip=False).train(images, seeded(2))

    assert torch.allclose(out, torch.full_like(out, 200 / 255), rtol=0, atol=1e-6)  # no black borders


def test_keras_augmentation_with_nothing_to_do_does_not_augment() -> None:
    assert KerasAugmentation().augments is True
    assert KerasAugmentation(shear=0, zoom=0, horizontal_flip=False).augments is False
    assert KerasAugmentation(shear=0, zoom=0, horizontal_flip=True).augments is True
    assert KerasAugmentation(shear=0.1, zoom=0, horizontal_flip=False).augments is True


def test_keras_test_is_never_random_and_equals_rescale() -> None:
    images = random_pixels(4, 3, 10, 10)

    assert torch.equal(KerasAugmentation().test(images), Rescale().test(images))
    assert torch.equal(KerasAugmentation().test(images), KerasAugmentation().test(images))


# ---------------------------------------------------------------------------------------------------------------
# CifarDistortion
# ---------------------------------------------------------------------------------------------------------------


def test_cifar_distortion_turns_32x32_images_into_24x24_in_train_and_test() -> None:
    images = random_pixels(5, 3, CIFAR_SIZE, CIFAR_SIZE)
    distortion = CifarDistortion()

    assert distortion.train(images, seeded(0)).shape == (5, 3, CROP, CROP)
    assert distortion.test(images).shape == (5, 3, CROP, CROP)
    assert distortion.output_shape((3, CIFAR_SIZE, CIFAR_SIZE)) == (3, CROP, CROP)


def test_cifar_test_is_the_centre_crop_standardised_per_image() -> None:
    images = random_pixels(4, 3, CIFAR_SIZE, CIFAR_SIZE)
    images[1] //= 4  # a dark, low-contrast image: standardisation must still give unit deviation

    out = CifarDistortion().test(images)

    centre = images[:, :, 4:28, 4:28].float()
    expected = (centre - centre.mean(dim=(1, 2, 3), keepdim=True)) / centre.std(
        dim=(1, 2, 3), correction=0, keepdim=True
    )
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(out.mean(dim=(1, 2, 3)), torch.zeros(4), atol=1e-5)
    assert torch.allclose(out.std(dim=(1, 2, 3), correction=0), torch.ones(4), atol=1e-5)


def test_cifar_standardisation_of_a_constant_image_is_all_zeros_not_a_division_by_zero() -> None:
    images = torch.full((2, 3, CIFAR_SIZE, CIFAR_SIZE), 90, dtype=torch.uint8)

    assert torch.equal(CifarDistortion().test(images), torch.zeros(2, 3, CROP, CROP))
    assert torch.isfinite(CifarDistortion().train(images, seeded(0))).all()


def test_cifar_standardisation_removes_a_constant_offset() -> None:
    images = random_pixels(3, 3, CIFAR_SIZE, CIFAR_SIZE) // 2  # 0..127, so adding 100 cannot overflow uint8

    assert torch.allclose(CifarDistortion().test(images + 100), CifarDistortion().test(images), atol=1e-5)


def test_cifar_brightness_shift_alone_cannot_change_the_standardised_training_input() -> None:
    # TF's tutorial notes it: the shift is a constant offset (contrast scales about the shifted mean), which
    # standardisation subtracts. Same seed, so the crops, flips and contrast factors are the same draws.
    images = random_pixels(6, 3, CIFAR_SIZE, CIFAR_SIZE)

    shifted = CifarDistortion(brightness=63.0).train(images, seeded(4))
    unshifted = CifarDistortion(brightness=0.0).train(images, seeded(4))

    assert torch.allclose(shifted, unshifted, atol=1e-4)


def test_cifar_without_augment_trains_on_the_test_preprocessing() -> None:
    images = random_pixels(4, 3, CIFAR_SIZE, CIFAR_SIZE)
    distortion = CifarDistortion(augment=False)

    assert distortion.augments is False and CifarDistortion().augments is True
    assert torch.equal(distortion.train(images, seeded(0)), distortion.test(images))


def test_cifar_distortion_depends_only_on_the_generator_seed() -> None:
    images = random_pixels(4, 3, CIFAR_SIZE, CIFAR_SIZE)

    first, again = CifarDistortion().train(images, seeded(5)), CifarDistortion().train(images, seeded(5))

    assert torch.equal(first, again)
    assert not torch.allclose(first, CifarDistortion().train(images, seeded(6)), atol=1e-3)


def crop_found(image: torch.Tensor, distorted: torch.Tensor) -> tuple[int, int, bool]:
    """(top, left, flipped) of the 24x24 window of `image` (C, 32, 32) that standardises to `distorted`."""
    matches = []
    for top in range(CROP_OFFSETS):
        for left in range(CROP_OFFSETS):
            window = image[None, :, top : top + CROP, left : left + CROP]
            for flipped in (False, True):
                candidate = CifarDistortion().test(window.flip(-1) if flipped else window)[0]  # 24x24: no crop
                if torch.allclose(candidate, distorted, atol=1e-4):
                    matches.append((top, left, flipped))
    assert len(matches) == 1, f"want exactly one window matching, found {matches}"
    return matches[0]


def test_cifar_random_crops_are_windows_of_the_image_that_differ_across_seeds() -> None:
    # With the contrast factor pinned to 1, a training input is a (maybe flipped) window, standardised.
    image = random_pixels(1, 3, CIFAR_SIZE, CIFAR_SIZE)
    crop_and_flip_only = CifarDistortion(contrast_low=1.0, contrast_high=1.0)

    found = {crop_found(image[0], crop_and_flip_only.train(image, seeded(seed))[0]) for seed in range(6)}

    assert len({(top, left) for top, left, _ in found}) > 1  # the crop moves with the seed
    assert all(0 <= top < CROP_OFFSETS and 0 <= left < CROP_OFFSETS for top, left, _ in found)


# ---------------------------------------------------------------------------------------------------------------
# describe / rebuild (what a checkpoint carries)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "preprocessing",
    [
        Rescale(),
        KerasAugmentation(),
        KerasAugmentation(shear=0.1, zoom=0.3, horizontal_flip=False),
        CifarDistortion(),
        CifarDistortion(crop=20, brightness=10.0, contrast_low=0.5, contrast_high=1.5, augment=False),
    ],
    ids=repr,
)
def test_describe_then_rebuild_gives_back_the_same_preprocessing_through_json(preprocessing: object) -> None:
    description = json.loads(json.dumps(describe(preprocessing)))  # a checkpoint stores plain JSON-able data

    rebuilt = rebuild(description)

    assert type(rebuilt) is type(preprocessing)
    assert rebuilt == preprocessing
    assert description["kind"] == type(preprocessing).__name__


def test_rebuild_of_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown preprocessing 'Mixup'") as raised:
        rebuild({"kind": "Mixup", "alpha": 0.2})

    assert "Rescale, KerasAugmentation, CifarDistortion" in str(raised.value)


def test_keras_shear_moves_rows_by_the_same_angle_on_a_wide_image():
    """Shear maps output pixel (row, column) to input row - sin(angle) * column (from the centre), in pixels,
    whatever the aspect ratio: affine_grid's normalised x and y must be rescaled to one another."""
    height, width = 16, 64
    rows = torch.arange(height, dtype=torch.uint8).mul(16).view(1, 1, height, 1).expand(1, 1, height, width)
    shear = KerasAugmentation(shear=0.3, zoom=0.0, horizontal_flip=False)
    out = shear.train(rows.contiguous(), torch.Generator().manual_seed(5))[0, 0]
    draws = torch.rand(1, 4, generator=torch.Generator().manual_seed(5))  # the same draws train() made
    angle = float((draws[0, 0] * 2 - 1) * 0.3)
    assert abs(angle) > 0.05  # a shear worth measuring
    row = 8
    for column in range(20, 44):
        source_row = row - math.sin(angle) * (column - (width - 1) / 2)
        assert float(out[row, column]) == pytest.approx(source_row * 16 / 255, abs=1e-4)
