"""Preprocessing of uint8 batches: Rescale, the Keras ImageDataGenerator augmentation, the TF CIFAR distortion.

Covered: scaling to [0, 1]; which preprocessings count as augmenting; that `test` is never random; that
`train` is a function of the generator's seed alone; what the Keras flip, zoom and border fill do to known
images; the CIFAR crop sizes, the centre crop and per-image standardisation (including its floor for a
constant image and its removal of a brightness shift); and the describe/rebuild round trip used by checkpoints.
Distorted a batch at a time (tuned mode, data/device_augment.py): each image comes out as it would alone given the
same draws, and the crops, flips, contrast factors, shears and zooms recovered from what the per-image loader path and
the batch path make follow the same laws (one-sample and two-sample tests at fixed seeds); on CUDA, the batches are
made on the device without a host synchronisation.

    python -m pytest tests/test_augmentation.py -q
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from devicebench.data.arrays import ArrayDataset
from devicebench.data.augmentation import (
    PIXEL_SCALE,
    CifarDistortion,
    ImageNetInput,
    KerasAugmentation,
    Preprocessing,
    Rescale,
    Unchanged,
    describe,
    rebuild,
)
from devicebench.data.device_augment import DeviceAugmentedBatches
from devicebench.data.pipeline import ArrayImages, HostBatches, PreprocessedImages, batches_for

CIFAR_SIZE = 32  # pixels per side of a CIFAR image
CROP = 24  # pixels per side of the TF tutorial's crop
CROP_OFFSETS = CIFAR_SIZE - CROP + 1  # positions a random crop may start at, per axis
CPU = torch.device("cpu")


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


def windows_found(image: torch.Tensor, distorted: torch.Tensor) -> torch.Tensor:
    """(top, left, flipped) of the 24x24 window of `image` (C, 32, 32) that standardises to each of `distorted`
    (N, C, 24, 24), one row each: the nearest of every window, which must match it to float tolerance."""
    windows = [
        (top, left, flipped) for top in range(CROP_OFFSETS) for left in range(CROP_OFFSETS) for flipped in (0, 1)
    ]
    cut = [image[:, top : top + CROP, left : left + CROP] for top, left, _ in windows]
    candidates = torch.stack([window.flip(-1) if flipped else window for window, (_, _, flipped) in zip(cut, windows)])
    standardised = CifarDistortion().test(candidates).flatten(1)  # 24x24: no crop
    distances = torch.cdist(
        distorted.flatten(1).double(), standardised.double()
    )  # float32's matmul form is off by 0.03
    closest, nearest = distances.min(dim=1)
    assert closest.max() < 1e-3, "a distorted image that is no window of the image"
    return torch.tensor(windows)[nearest]


def test_cifar_random_crops_are_windows_of_the_image_that_differ_across_seeds() -> None:
    # With the contrast factor pinned to 1, a training input is a (maybe flipped) window, standardised.
    image = random_pixels(1, 3, CIFAR_SIZE, CIFAR_SIZE)
    crop_and_flip_only = CifarDistortion(contrast_low=1.0, contrast_high=1.0)

    distorted = torch.cat([crop_and_flip_only.train(image, seeded(seed)) for seed in range(6)])
    found = {tuple(window) for window in windows_found(image[0], distorted).tolist()}

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


# ---------------------------------------------------------------------------------------------------------------
# A batch at a time, on the device (tuned mode)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread, as a loader worker has: on a busy machine two threads on one small image mostly wait for
    each other (65 ms an image, against 2 ms on one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_only_the_augmentations_that_distort_can_distort_on_the_device() -> None:
    assert CifarDistortion().device_augments and KerasAugmentation().device_augments
    assert not CifarDistortion(augment=False).device_augments
    assert not KerasAugmentation(shear=0, zoom=0, horizontal_flip=False).device_augments
    assert not any(kind.device_augments for kind in (Rescale(), ImageNetInput(), Unchanged()))


def test_cifar_batch_distortion_is_each_image_distorted_alone_with_its_own_draws() -> None:
    images = random_pixels(12, 3, CIFAR_SIZE, CIFAR_SIZE)
    distortion = CifarDistortion()
    draws = distortion.draw(images, seeded(1))

    batched = distortion.distort(images, draws)

    assert len(set(draws.rows.tolist())) > 1 and len(set((draws.uniforms[:, 0] < 0.5).tolist())) == 2
    for index, (top, left, (flip, brightness, contrast)) in enumerate(zip(*draws)):
        alone = distortion.distort(images[index : index + 1], type(draws)(*(draw[index : index + 1] for draw in draws)))
        assert torch.equal(batched[index], alone[0])
        # the seeds' way, written out: a slice of the image, mirrored, shifted, contrasted about each channel's mean
        window = images[index, :, top : top + CROP, left : left + CROP].float()
        window = (window.flip(-1) if flip < 0.5 else window) + (brightness * 2 - 1) * 63
        channel_means = window.mean(dim=(1, 2), keepdim=True)
        window = (window - channel_means) * (0.2 + contrast * 1.6) + channel_means
        assert torch.allclose(batched[index], CifarDistortion().test(window[None])[0], atol=1e-5)


def test_keras_batch_distortion_is_each_image_distorted_alone_with_its_own_draws(one_thread: None) -> None:
    images = random_pixels(12, 3, 20, 28)
    augmentation = KerasAugmentation()
    draws = augmentation.draw(images, seeded(2))

    batched = augmentation.distort(images, draws)

    for index in range(len(images)):
        alone = augmentation.distort(images[index : index + 1], draws[index : index + 1])
        assert torch.allclose(batched[index], alone[0], rtol=0, atol=1e-6)
    assert not torch.allclose(batched[0], augmentation.distort(images[:1], draws[1:2])[0], atol=1e-3)


SAMPLES = 900  # distortions drawn each way per law: 100 per crop offset
SURE = 1e-6  # the p-value below which a law is refused: the draws are seeded, so a pass holds for good


def distorted_both_ways(
    preprocessing: Preprocessing, image: torch.Tensor, device: torch.device = CPU
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAMPLES copies of `image` (C, H, W) distorted for training: image by image, each from a seed of its own, as
    loader workers do (seed mode); and a batch at a time on `device` from one generator there, as tuned mode does."""
    images = image.expand(SAMPLES, *image.shape).contiguous()
    labels = np.zeros(SAMPLES, dtype=np.int64)
    items = PreprocessedImages(ArrayImages(images.numpy()), labels, preprocessing, training=True, seed=3)
    one_by_one = torch.stack([items[(1, index)][0] for index in range(SAMPLES)])
    gathered = HostBatches(images, labels, 128, device, preprocessing=Unchanged(), seed=3, resident=True)
    batches = DeviceAugmentedBatches(gathered, preprocessing, device, seed=3)
    return one_by_one, torch.cat([inputs.cpu() for inputs, _ in batches.epoch(1)])  # copies: the order does not show


def assert_both_follow(law: stats.rv_continuous, one_by_one: torch.Tensor, batched: torch.Tensor) -> None:
    """Both samples are drawn from `law` (Kolmogorov-Smirnov), and from one and the same law (two-sample)."""
    for samples in one_by_one, batched:
        assert stats.kstest(samples.numpy(), law.cdf).pvalue > SURE
    assert stats.ks_2samp(one_by_one.numpy(), batched.numpy()).pvalue > SURE


def assert_both_uniform(values: int, one_by_one: torch.Tensor, batched: torch.Tensor) -> None:
    """Both samples are uniform over 0..values-1 (chi-square) and from one and the same law (contingency table)."""
    counts = [torch.bincount(samples, minlength=values) for samples in (one_by_one, batched)]
    for count in counts:
        assert len(count) == values and stats.chisquare(count.numpy()).pvalue > SURE
    assert stats.chi2_contingency(torch.stack(counts).numpy()).pvalue > SURE


def assert_crops_and_flips_follow_the_same_laws_image_by_image_and_a_batch_at_a_time(device: torch.device) -> None:
    image = random_pixels(1, 3, CIFAR_SIZE, CIFAR_SIZE)[0]
    crop_and_flip_only = CifarDistortion(contrast_low=1.0, contrast_high=1.0)  # a window of the image, standardised

    made = distorted_both_ways(crop_and_flip_only, image, device)

    one_by_one, batched = (windows_found(image, distorted) for distorted in made)
    for column, values in enumerate((CROP_OFFSETS, CROP_OFFSETS, 2)):  # top, left: 9 offsets each; flipped or not
        assert_both_uniform(values, one_by_one[:, column], batched[:, column])


def test_cifar_crops_and_flips_follow_the_same_laws_image_by_image_and_a_batch_at_a_time(one_thread: None) -> None:
    assert_crops_and_flips_follow_the_same_laws_image_by_image_and_a_batch_at_a_time(torch.device("cpu"))


def contrast_factors(image: torch.Tensor, distorted: torch.Tensor) -> torch.Tensor:
    """The contrast factor each of `distorted` (the whole of `image`, uncropped) was made with. Contrast scales each
    channel's deviations from its mean and keeps the means; brightness and standardisation shift and scale both
    alike: so the factor is the ratio of the deviations' projection to the channel means' projection."""
    pixels = image.float()
    means = pixels.mean(dim=(1, 2), keepdim=True)
    deviations = (pixels - means).flatten()
    channel_means = (means - means.mean()).expand_as(pixels).flatten()
    flattened = distorted.flatten(1)
    return (flattened @ deviations / deviations.dot(deviations)) / (
        flattened @ channel_means / channel_means.dot(channel_means)
    )


def test_cifar_contrast_factors_follow_the_same_law_image_by_image_and_a_batch_at_a_time(one_thread: None) -> None:
    half = random_pixels(3, CIFAR_SIZE, CIFAR_SIZE // 2) // 2 + torch.tensor([0, 60, 120], dtype=torch.uint8).view(
        3, 1, 1
    )
    image = torch.cat([half, half.flip(-1)], dim=-1)  # mirror-symmetric, so a flip cannot show; channels apart
    contrast_only = CifarDistortion(crop=CIFAR_SIZE)  # nothing to crop

    one_by_one, batched = (contrast_factors(image, made) for made in distorted_both_ways(contrast_only, image))

    assert_both_follow(stats.uniform(loc=0.2, scale=1.6), one_by_one, batched)  # contrast drawn from [0.2, 1.8]


RAMP_STEP = 8  # grey levels per pixel of the ramps the Keras distortions are read from


def keras_draws_found(distorted: torch.Tensor) -> torch.Tensor:
    """(shear angle, zoom of rows, zoom of columns, flipped) that made each of `distorted`, a square image whose
    channel 0 rises along its columns and channel 1 down its rows by RAMP_STEP a pixel. Bilinear sampling keeps a
    ramp exact, so the slopes at the centre are the map's: output column -> (cos(angle) * zoom_columns, -sin(angle)
    * zoom_columns) in (column, row) of the input, output row -> (0, zoom_rows), mirrored when flipped."""
    middle = distorted.shape[-1] // 2
    slope = PIXEL_SCALE / (2 * RAMP_STEP)  # a pixel's value, differenced over two pixels, in ramp steps
    columns_across = (distorted[:, 0, middle, middle + 1] - distorted[:, 0, middle, middle - 1]) * slope
    rows_across = (distorted[:, 1, middle, middle + 1] - distorted[:, 1, middle, middle - 1]) * slope
    rows_down = (distorted[:, 1, middle + 1, middle] - distorted[:, 1, middle - 1, middle]) * slope
    flipped = columns_across < 0  # cos(angle) * zoom is positive: only a mirror turns the ramp around
    sign = torch.where(flipped, -1.0, 1.0)
    angle = torch.atan2(-rows_across * sign, columns_across * sign)
    return torch.stack([angle, rows_down, torch.hypot(columns_across, rows_across), flipped.float()], dim=1)


def test_keras_shears_zooms_and_flips_follow_the_same_laws_image_by_image_and_a_batch_at_a_time(
    one_thread: None,
) -> None:
    ramp = torch.arange(0, CIFAR_SIZE * RAMP_STEP, RAMP_STEP)
    image = torch.stack([ramp.view(1, -1).expand(CIFAR_SIZE, -1), ramp.view(-1, 1).expand(-1, CIFAR_SIZE)])
    image = torch.cat([image, torch.zeros_like(image[:1])]).to(torch.uint8)  # 0..248 down the rows and across
    augmentation = KerasAugmentation(shear=0.2, zoom=0.2)

    one_by_one, batched = (keras_draws_found(made) for made in distorted_both_ways(augmentation, image))

    assert_both_follow(stats.uniform(loc=-0.2, scale=0.4), one_by_one[:, 0], batched[:, 0])  # radians
    for column in 1, 2:  # rows and columns zoomed apart, each by a factor in [0.8, 1.2]
        assert_both_follow(stats.uniform(loc=0.8, scale=0.4), one_by_one[:, column], batched[:, column])
    assert_both_uniform(2, one_by_one[:, 3].long(), batched[:, 3].long())


def test_device_batches_draw_anew_for_every_batch_and_epoch_and_again_alike_for_the_same_seed_and_epoch(
    one_thread: None,
) -> None:
    images = random_pixels(1, 3, CIFAR_SIZE, CIFAR_SIZE).expand(64, -1, -1, -1).contiguous()  # one image, 64 times
    labels = torch.zeros(64, dtype=torch.int64)

    def epoch(seed: int, number: int) -> list[torch.Tensor]:
        gathered = HostBatches(images, labels, 16, torch.device("cpu"), preprocessing=Unchanged(), seed=seed)
        return [
            inputs
            for inputs, _ in DeviceAugmentedBatches(gathered, CifarDistortion(), gathered.device, seed).epoch(number)
        ]

    first = epoch(seed=5, number=1)

    assert [len(inputs) for inputs in first] == [16] * 4 and first[0].shape[1:] == (3, CROP, CROP)
    assert all(torch.equal(made, again) for made, again in zip(first, epoch(seed=5, number=1)))
    assert not torch.allclose(first[0], first[1], atol=1e-3)  # the same images, distorted apart
    for other in epoch(seed=5, number=2), epoch(seed=6, number=1):
        assert not torch.allclose(first[0], other[0], atol=1e-3)


def test_in_memory_images_are_distorted_a_batch_at_a_time_only_where_asked_and_the_preprocessing_can() -> None:
    images = random_pixels(24, 3, CIFAR_SIZE, CIFAR_SIZE).numpy()
    labels = np.arange(24, dtype=np.int64) % 10
    dataset = ArrayDataset("cifar10", "synthetic", images[:16], labels[:16], images[16:], labels[16:], 10)

    def made(preprocessing: Preprocessing, device_augment: bool) -> tuple[str, str]:
        train, test = batches_for(
            dataset, (3, 32, 32), preprocessing, 8, CPU, workers=2, seed=0, device_augment=device_augment
        )
        train.close()
        test.close()
        return type(train).__name__, type(test).__name__

    assert made(CifarDistortion(), device_augment=True) == ("DeviceAugmentedBatches", "HostBatches")
    assert made(KerasAugmentation(), device_augment=True) == ("DeviceAugmentedBatches", "HostBatches")
    assert made(CifarDistortion(), device_augment=False) == ("LoaderBatches", "LoaderBatches")  # seed mode
    assert made(CifarDistortion(augment=False), device_augment=True) == ("LoaderBatches", "LoaderBatches")


@pytest.mark.slow  # ~5 s: a cifar10-cnn's set-up (its FLOPs counted, its weights drawn) and four steps
def test_a_tuned_cifar10_cnn_run_trains_on_batches_distorted_a_batch_at_a_time(monkeypatch) -> None:
    run, train_batches = tuned_cifar10_cnn_run(monkeypatch, CPU)

    assert run.status == "ok", run.error
    assert run.settings.workers == 0  # no loader processes: the training process distorts each batch
    assert [epoch.samples for epoch in run.epochs] == [2 * 8] * 2
    assert all(math.isfinite(epoch.train_loss) for epoch in run.epochs)
    inputs, labels = next(train_batches.epoch(1))
    assert inputs.shape == (8, 3, CROP, CROP) and inputs.dtype == torch.float32 and labels.shape == (8,)
    assert torch.allclose(inputs.mean(dim=(1, 2, 3)), torch.zeros(8), atol=1e-4)  # standardised image by image


def tuned_cifar10_cnn_run(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> tuple[Any, Any]:
    """(the record, the training batches) of a tuned cifar10-cnn run of 2 epochs of 2 steps at batch 8 on 32 random
    CIFAR-sized images, its tuning the plainest candidate without a trial: the batches are the point here."""
    from devicebench import RunConfig, planning, runner, session_choices  # the runner imports torch's heavier parts

    made = []

    def batches_for(*arguments: Any, **keywords: Any) -> Any:
        made.append(real_batches_for(*arguments, **keywords))
        return made[-1]

    real_batches_for = runner.batches_for
    monkeypatch.setattr(runner, "batches_for", batches_for)
    monkeypatch.setattr(session_choices, "choose_tuning", lambda options, build, batches, watch: (options[0], ""))
    images = random_pixels(48, 3, CIFAR_SIZE, CIFAR_SIZE).numpy()
    labels = np.arange(48, dtype=np.int64) % 10
    dataset = ArrayDataset("cifar10", "synthetic", images[:32], labels[:32], images[32:], labels[32:], 10)
    config = RunConfig(
        workloads=("cifar10-cnn",),
        devices=str(device),
        data="synthetic",
        epochs=2,
        max_steps=2,
        max_eval_steps=1,
        batch_size=8,
        mode="tuned",
        compile="off",
    )
    (job,) = planning.plan(config).jobs
    record = runner.new_record(job, dataset, 0)
    runner.train_record(record, job, dataset)
    ((train_batches, _),) = made
    assert isinstance(train_batches, DeviceAugmentedBatches)
    return record, train_batches


# ---------------------------------------------------------------------------------------------------------------
# On CUDA (python -m pytest -m gpu; benchmarks/gpu_validation.py runs these)
# ---------------------------------------------------------------------------------------------------------------

on_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")


@pytest.mark.gpu
@on_cuda
def test_on_cuda_a_tuned_cifar10_cnn_run_distorts_its_batches_on_the_device(monkeypatch) -> None:
    run, train_batches = tuned_cifar10_cnn_run(monkeypatch, torch.device("cuda"))

    assert run.status == "ok", run.error
    assert run.settings.workers == 0 and run.settings.device_resident and train_batches.resident
    assert all(math.isfinite(epoch.train_loss) for epoch in run.epochs)
    inputs, labels = next(train_batches.epoch(1))
    assert inputs.device.type == labels.device.type == "cuda" and inputs.shape == (8, 3, CROP, CROP)


@pytest.mark.gpu
@on_cuda
@pytest.mark.parametrize(
    ("preprocessing", "shape"), [(CifarDistortion(), (128, 3, 32, 32)), (KerasAugmentation(), (32, 3, 64, 64))]
)
def test_on_cuda_a_batch_is_distorted_without_the_host_waiting_for_the_device(
    preprocessing: Preprocessing, shape: tuple[int, ...]
) -> None:
    images = random_pixels(*shape).cuda()
    generator = torch.Generator("cuda").manual_seed(0)
    preprocessing.train(images, generator)  # the first call loads the kernels
    torch.cuda.synchronize()

    torch.cuda.set_sync_debug_mode("error")  # any operation that waits for the device raises
    try:
        distorted = preprocessing.train(images, generator)
    finally:
        torch.cuda.set_sync_debug_mode("default")

    assert distorted.device.type == "cuda" and bool(torch.isfinite(distorted).all())


@pytest.mark.gpu
@on_cuda
def test_on_cuda_crops_and_flips_follow_the_same_laws_as_image_by_image_on_the_host(one_thread: None) -> None:
    assert_crops_and_flips_follow_the_same_laws_image_by_image_and_a_batch_at_a_time(torch.device("cuda"))
