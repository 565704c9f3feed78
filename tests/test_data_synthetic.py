"""Synthetic datasets: shaped like the real ones, deterministic per seed, and learnable.

python -m pytest tests/test_data_synthetic.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from devicebench.data import known_datasets, synthetic_dataset
from devicebench.data.sources import dataset_spec

IMAGE_DATASETS = [name for name in known_datasets() if dataset_spec(name).kind == "images"]  # text: test_data_text.py


@pytest.mark.parametrize("name", IMAGE_DATASETS)
def test_default_sizes_shapes_dtypes_and_balanced_labels_match_the_real_release(name):
    spec = dataset_spec(name)
    dataset = synthetic_dataset(name)
    train_size, test_size = spec.synthetic_sizes or (spec.train_size, spec.test_size)  # ImageNet's: capped
    assert dataset.source == "synthetic" and dataset.name == name and dataset.num_classes == spec.num_classes
    assert dataset.train_images.shape == (train_size, *spec.image_shape)
    assert dataset.test_images.shape == (test_size, *spec.image_shape)
    assert dataset.train_images.dtype == np.uint8 and dataset.train_labels.dtype == np.int64
    for labels, size in ((dataset.train_labels, train_size), (dataset.test_labels, test_size)):
        counts = np.bincount(labels, minlength=spec.num_classes)
        assert len(counts) == spec.num_classes and counts.min() == size // spec.num_classes
        assert counts.max() - counts.min() <= 1  # ImageNet's 1,280: 280 classes have a second image
    assert dataset.train_images[:100].std() > 30  # grey levels: real texture, not a constant image


def test_sizes_can_be_shrunk_and_stay_balanced_within_one():
    dataset = synthetic_dataset("cifar100", train_size=1234, test_size=101)
    assert len(dataset.train_labels) == 1234 and len(dataset.test_labels) == 101
    counts = np.bincount(dataset.train_labels, minlength=100)
    assert counts.max() - counts.min() <= 1


def test_sizes_below_one_are_rejected():
    with pytest.raises(ValueError, match="sizes must be at least 1"):
        synthetic_dataset("mnist", train_size=0)


def test_same_seed_gives_identical_arrays_and_another_seed_does_not():
    sizes = {"train_size": 500, "test_size": 100}
    first, again = synthetic_dataset("mnist", seed=5, **sizes), synthetic_dataset("mnist", seed=5, **sizes)
    other = synthetic_dataset("mnist", seed=6, **sizes)
    for field_name in ("train_images", "train_labels", "test_images", "test_labels"):
        np.testing.assert_array_equal(getattr(first, field_name), getattr(again, field_name))
    assert not np.array_equal(first.train_images, other.train_images)
    assert not np.array_equal(first.test_labels, other.test_labels)


def test_test_split_does_not_depend_on_the_train_size():
    small, large = synthetic_dataset("mnist", train_size=100), synthetic_dataset("mnist", train_size=1000)
    np.testing.assert_array_equal(small.test_images, large.test_images)


@pytest.mark.parametrize("name", IMAGE_DATASETS)
def test_nearest_class_mean_classifier_learns_it_far_above_chance(name):
    smaller = (3, 32, 32) if name == "imagenet" else None  # 2,000 images at 224 x 224 would take 1.2 GB as floats
    dataset = synthetic_dataset(name, seed=1, train_size=2000, test_size=500, image_shape=smaller)
    train = dataset.train_images.reshape(len(dataset.train_images), -1).astype(np.float32)
    test = dataset.test_images.reshape(len(dataset.test_images), -1).astype(np.float32)
    class_means = np.stack([train[dataset.train_labels == label].mean(axis=0) for label in range(dataset.num_classes)])
    squared_distances = (test**2).sum(1, keepdims=True) - 2 * test @ class_means.T + (class_means**2).sum(1)
    accuracy = (squared_distances.argmin(axis=1) == dataset.test_labels).mean()
    chance = 1 / dataset.num_classes
    assert accuracy > 0.9, f"{name}: accuracy {accuracy:.3f} vs chance {chance:.3f}"


def test_synthetic_images_of_a_dataset_that_holds_none_are_refused_with_what_to_give():
    with pytest.raises(ValueError, match=r"synthetic imdb: .* holds no images; give image_shape"):
        synthetic_dataset("imdb")
    assert synthetic_dataset("imdb", image_shape=(1, 4, 4), train_size=2, test_size=1).image_shape == (1, 4, 4)
