"""The ImageNet reference models (workloads/imagenet.py) and their dataset: the published shapes, sizes and settings,
reduced-size training on a CPU, a synthetic stand-in a laptop holds, and real images only from a folder.

    python -m pytest tests/test_imagenet.py -q
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from image_fixtures import write_image
from torch import nn
from typer.testing import CliRunner

import devicebench as db
from devicebench import RunConfig, planning
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.cli import data as data_command
from devicebench.config import ConfigError
from devicebench.data import (
    ImageFolderDataset,
    NotDownloadable,
    expected_source,
    load_dataset,
    sources,
)
from devicebench.data.augmentation import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageNetInput,
    describe,
    rebuild,
)
from devicebench.workloads import get_workload
from devicebench.workloads.imagenet import Bottleneck

REFERENCE_MODELS = ("resnet50", "resnet152", "vgg16")
# torchvision's model pages (num_params of the IMAGENET1K_V1 weights): docs.pytorch.org/vision/stable/models/
# generated/torchvision.models.{resnet50,resnet152,vgg16}.html. Rounded, as quoted: 25.6M and 60.2M for the ResNets
# (torchvision's table of classification models; He et al. 2015 give FLOPs, not parameters) and 138M for VGG-16
# (Simonyan and Zisserman 2014, table 2)
TORCHVISION_PARAMETERS = {"resnet50": 25_557_032, "resnet152": 60_192_808, "vgg16": 138_357_544}
PAPER_PARAMETERS = {"resnet50": 25.6e6, "resnet152": 60.2e6, "vgg16": 138e6}
IMAGE_BYTES = 3 * 224 * 224  # one synthetic image in memory, uint8
GIB = 2**30
cli = CliRunner()


# --- the models ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_parameter_counts_are_the_published_implementations(name):
    counted = get_workload(name).parameter_count()
    assert counted == TORCHVISION_PARAMETERS[name]
    assert abs(counted - PAPER_PARAMETERS[name]) / PAPER_PARAMETERS[name] < 0.02


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_building_on_the_meta_device_takes_no_memory(name):
    """No weight is made or initialised for real (about 0.1 s for resnet152 on two busy cores; a timed assertion
    would be noise on a shared machine, so the test holds what makes it quick: every tensor on meta)."""
    workload = get_workload(name)
    with torch.device("meta"):
        model = workload.build_model(workload.defaults)
    assert all(parameter.is_meta for parameter in model.parameters())
    assert all(buffer.is_meta for buffer in model.buffers())
    with torch.device("meta"):
        assert model(torch.zeros(2, 3, 224, 224)).shape == (2, 1000)


@pytest.mark.parametrize("name", REFERENCE_MODELS)
def test_a_reduced_image_size_trains_the_same_model_on_the_cpu(name):
    workload = get_workload(name)
    model = workload.build_model({**workload.defaults, "image_size": 64}).eval()
    with torch.no_grad():
        outputs = model(torch.rand(2, 3, 64, 64))
    assert outputs.shape == (2, 1000) and torch.isfinite(outputs).all()
    assert workload.parameter_count({**workload.defaults, "image_size": 64}) == TORCHVISION_PARAMETERS[name]


def test_vgg_pools_any_size_from_32_pixels_to_its_classifiers_7x7():
    vgg = get_workload("vgg16").build_model({**get_workload("vgg16").defaults, "image_size": 32}).eval()
    with torch.no_grad():
        for size in (32, 97):  # 32 pools to 1x1, 97 to 3x3: both averaged to the 7x7 the classifier takes
            features = vgg.features(torch.rand(1, 3, size, size))
            assert vgg.classifier[0](features).shape == (1, 512, 7, 7)
    assert vgg.classifier[2].in_features == 512 * 7 * 7


@pytest.mark.parametrize(
    "value, refused",
    [("16", "image_size must be at least 32 pixels"), ("4096", "image_size=4096 is above its bound of 1,024")],
)
def test_an_absurd_image_size_is_refused_before_anything_is_built(value, refused):
    with pytest.raises(ConfigError, match=refused):
        RunConfig(workloads=("resnet50",), overrides=(f"image_size={value}",))
    assert (
        RunConfig(workloads=("vgg16",), overrides=("image_size=64",)).hyperparameters_for(get_workload("vgg16"))[
            "image_size"
        ]
        == 64
    )


def test_resnet_is_version_1_5_the_stride_on_the_3x3_convolution():
    model = get_workload("resnet50").build_model(get_workload("resnet50").defaults)
    blocks = [module for module in model.modules() if isinstance(module, Bottleneck)]
    assert len(blocks) == 3 + 4 + 6 + 3
    downsampling = [block for block in blocks if not isinstance(block.shortcut, nn.Identity)]
    assert len(downsampling) == 4  # the first block of each stage (stage 1's widens 64 → 256)
    for block, stride in zip(downsampling, (1, 2, 2, 2), strict=True):
        convolutions = [layer for layer in block.residual if isinstance(layer, nn.Conv2d)]
        assert [(layer.kernel_size, layer.stride) for layer in convolutions] == [
            ((1, 1), (1, 1)),
            ((3, 3), (stride, stride)),
            ((1, 1), (1, 1)),
        ]
    assert (
        len(
            [
                module
                for module in get_workload("resnet152").build_model(get_workload("resnet152").defaults).modules()
                if isinstance(module, Bottleneck)
            ]
        )
        == 3 + 8 + 36 + 3
    )


def test_initialisation_is_he_normal_over_fan_out_with_batch_norm_at_one_and_zero():
    torch.manual_seed(0)
    resnet = get_workload("resnet50").build_model(get_workload("resnet50").defaults)
    last_3x3 = [layer for layer in resnet.modules() if isinstance(layer, nn.Conv2d) and layer.kernel_size == (3, 3)][-1]
    fan_out = 512 * 3 * 3
    assert last_3x3.weight.std().item() == pytest.approx(math.sqrt(2 / fan_out), rel=0.02)
    norms = [layer for layer in resnet.modules() if isinstance(layer, nn.BatchNorm2d)]
    assert all(layer.weight.eq(1).all() and layer.bias.eq(0).all() for layer in norms)
    vgg = get_workload("vgg16").build_model(get_workload("vgg16").defaults)
    dense = [layer for layer in vgg.modules() if isinstance(layer, nn.Linear)]
    assert [layer.out_features for layer in dense] == [4096, 4096, 1000]
    assert dense[1].weight.std().item() == pytest.approx(0.01, rel=0.02) and dense[1].bias.eq(0).all()
    assert [layer.p for layer in vgg.modules() if isinstance(layer, nn.Dropout)] == [0.5, 0.5]


def test_training_settings_are_the_papers():
    resnet, vgg = get_workload("resnet50"), get_workload("vgg16")
    assert (resnet.defaults["batch_size"], resnet.defaults["epochs"], vgg.defaults["epochs"]) == (256, 90, 74)
    tiny = nn.Linear(1, 1)
    for batch, learning_rate in ((256, 0.1), (512, 0.2), (32, 0.0125)):  # 0.1 per 256 images (Goyal et al.)
        optimizer = resnet.build_optimizer(tiny, {**resnet.defaults, "batch_size": batch})
        assert isinstance(optimizer, torch.optim.SGD)
        assert optimizer.defaults["lr"] == pytest.approx(learning_rate)
        assert (optimizer.defaults["momentum"], optimizer.defaults["weight_decay"]) == (0.9, 1e-4)
    optimizer = vgg.build_optimizer(tiny, {**vgg.defaults, "batch_size": 32})  # VGG's rate is not scaled
    assert (optimizer.defaults["lr"], optimizer.defaults["momentum"], optimizer.defaults["weight_decay"]) == (
        0.01,
        0.9,
        5e-4,
    )
    for name in REFERENCE_MODELS:
        entry = get_workload(name)
        assert (entry.seed, entry.published, entry.in_suites, entry.image_shape) == (None, None, False, (3, 224, 224))
        assert isinstance(entry.build_loss(), nn.CrossEntropyLoss) and entry.dataset == "imagenet"


def test_the_input_is_scaled_resized_and_normalised_by_imagenet_statistics():
    white = torch.full((2, 3, 224, 224), 255, dtype=torch.uint8)
    inputs = ImageNetInput(size=64).test(white)
    assert inputs.shape == (2, 3, 64, 64) and ImageNetInput(size=64).output_shape((3, 224, 224)) == (3, 64, 64)
    expected = [(1 - mean) / deviation for mean, deviation in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)]
    assert inputs[0, :, 10, 10].tolist() == pytest.approx(expected, rel=1e-5)
    assert rebuild(describe(ImageNetInput(size=64))) == ImageNetInput(size=64)  # a checkpoint carries it
    assert get_workload("resnet50").example_batch({**get_workload("resnet50").defaults, "image_size": 64})[0].shape == (
        1,
        3,
        64,
        64,
    )  # FLOPs are counted at the size trained


@pytest.mark.slow
def test_a_reduced_run_trains_on_the_cpu_with_a_finite_loss():
    config = RunConfig(
        workloads=("resnet50",),
        devices="cpu",
        data="synthetic",
        overrides=("image_size=64",),
        batch_size=4,
        epochs=2,
        max_steps=2,
        max_eval_steps=1,
    )
    result = db.run(config)
    (record,) = result.runs
    assert record.status == "ok", record.error
    assert record.settings.data_source == "synthetic" and record.settings.hyperparameters["image_size"] == 64
    assert record.parameter_count == TORCHVISION_PARAMETERS["resnet50"]
    assert [(epoch.steps, epoch.samples) for epoch in record.epochs] == [(2, 8), (2, 8)]  # 2 steps of 4 images
    assert all(math.isfinite(epoch.train_loss) for epoch in record.epochs)
    assert record.epochs[0].train_loss == pytest.approx(math.log(1000), rel=0.3)  # 1,000 classes, near chance


# --- suites -------------------------------------------------------------------------------------------------------


def test_the_suites_leave_them_out_and_naming_them_runs_them():
    for suite in (None, "seeds"):
        names = {entry.name for entry in RunConfig(suite=suite).selected_workloads()}
        assert names and not names & set(REFERENCE_MODELS), suite
    assert [entry.name for entry in RunConfig(workloads=("resnet*",)).selected_workloads()] == ["resnet50", "resnet152"]


# --- the dataset --------------------------------------------------------------------------------------------------


def test_imagenet_is_registered_with_the_ilsvrc_2012_splits_and_nothing_to_download():
    spec = sources.DATASETS["imagenet"]
    assert (spec.num_classes, spec.train_size, spec.test_size, spec.files) == (1000, 1_281_167, 50_000, ())
    assert "registered users" in spec.not_downloadable and "--data-dir" in spec.not_downloadable
    assert sources.dataset_status("imagenet").state == "not downloadable"


def test_auto_stands_in_a_few_synthetic_images_and_says_so_loudly():
    train, test = sources.DATASETS["imagenet"].synthetic_sizes or (0, 0)  # checked first: uncapped is 4 GB at 32x32
    assert (train, test) == (1_280, 256)
    with pytest.warns(UserWarning, match="real ImageNet .* could not be had: devicebench cannot download it") as said:
        dataset = load_dataset("imagenet", image_shape=(3, 32, 32))  # the sizes at 224 pixels, in less memory
    assert (len(dataset.train_labels), len(dataset.test_labels)) == (train, test)
    assert (train + test) * IMAGE_BYTES < 300e6  # bytes at 224 x 224: 231 MB where the release is 1.33 M images
    assert dataset.source == "synthetic" and dataset.num_classes == 1000
    for text in (dataset.fallback_reason, str(said[0].message)):
        assert "registered users" in text and "--data-dir DIR with DIR/train/<class>" in text
        assert "Using 1,280 + 256 synthetic images" in text
    assert "1,280 train + 256 test images standing in for ImageNet (ILSVRC-2012)'s 1,281,167 + 50,000" in dataset.origin
    assert dataset.notes == ("the whole release would not fit in memory: an epoch is 1,280 images",)
    explicit = load_dataset("imagenet", "synthetic", image_shape=(3, 32, 32))
    assert len(explicit.train_labels) == 1_280 and explicit.fallback_reason is None
    source, why = expected_source("imagenet")  # what `run --dry-run` says, loading nothing
    assert source == "synthetic" and "1,280 + 256 synthetic images of its shape stand in" in why
    assert expected_source("imagenet", "real")[1].startswith(
        "devicebench cannot download ImageNet (ILSVRC-2012), so the run stops; image-net.org"
    )


def test_real_without_a_folder_of_images_is_refused_with_how_to_get_them(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^--data real for vgg16: real ImageNet \(ILSVRC-2012\) was asked for, "
        r"but devicebench cannot download it: image-net.org gives",
    ):
        RunConfig(workloads=("vgg16",), data="real")
    with pytest.raises(NotDownloadable, match=f"register .* \\({tmp_path} has no train/ folder\\)"):
        load_dataset("imagenet", "real", data_dir=tmp_path, image_shape=(3, 224, 224))
    outcome = cli.invoke(app, ["run", "resnet50", "--data", "real", "--devices", "cpu"])
    assert outcome.exit_code == EXIT_USAGE
    assert "--data-dir DIR with DIR/train/<class>/*.JPEG" in " ".join(outcome.output.split())
    assert "Traceback" not in outcome.output


def write_imagenet_like_folder(root):
    """ILSVRC-2012's layout as torchvision reads it, two classes: train/<wnid>/*.JPEG and val/<wnid>/*.JPEG."""
    rng = np.random.default_rng(0)
    for split, count in (("train", 3), ("val", 1)):
        for wnid, brightness in (("n01440764", 60), ("n01443537", 180)):
            for index in range(count):
                write_image(root / split / wnid / f"{wnid}_{index}.JPEG", brightness, rng)
    return root


def test_a_folder_of_class_subfolders_is_the_real_data(tmp_path):
    write_imagenet_like_folder(tmp_path)
    dataset = load_dataset("imagenet", "real", data_dir=tmp_path, image_shape=(3, 224, 224))
    assert isinstance(dataset, ImageFolderDataset) and dataset.source == "real"
    assert (len(dataset.train), len(dataset.test), dataset.class_names) == (6, 2, ("n01440764", "n01443537"))
    assert RunConfig(workloads=("resnet50",), data="real", data_dir=str(tmp_path)).data == "real"  # accepted


@pytest.mark.slow
def test_a_run_trains_on_a_folder_of_real_images_decoded_at_224_and_resized(tmp_path):
    config = RunConfig(
        workloads=("resnet50",),
        devices="cpu",
        data="real",
        data_dir=str(write_imagenet_like_folder(tmp_path)),
        overrides=("image_size=32",),
        batch_size=3,
        epochs=2,
        max_steps=2,
        max_eval_steps=1,
        workers=0,
    )
    (record,) = db.run(config, progress=False).runs
    assert record.status == "ok", record.error
    assert record.settings.data_source == "real"
    assert [(epoch.steps, epoch.samples, epoch.eval_samples) for epoch in record.epochs] == [(2, 6, 2)] * 2
    assert all(math.isfinite(epoch.train_loss) for epoch in record.epochs)


def test_vgg16_is_refused_where_its_training_state_cannot_fit(monkeypatch):
    """138 M parameters: weights, gradients and SGD's momentum in fp32 need 1.5 GiB before any activation."""
    memory = SimpleNamespace(available=1 * GIB)
    monkeypatch.setattr(planning, "psutil", SimpleNamespace(virtual_memory=lambda: memory))
    needed = TORCHVISION_PARAMETERS["vgg16"] * 4 * 3 / GIB
    with pytest.raises(
        ConfigError,
        match=rf"vgg16 on cpu: its 138,357,544 parameters need {needed:.1f} GiB to "
        r"train \(weights, gradients and 1 optimizer state copy, 4 bytes each\) "
        r"and cpu has 1.0 GiB free",
    ):
        planning.plan(RunConfig(workloads=("vgg16",), devices="cpu", data="synthetic"))


def test_data_list_and_fetch_say_it_cannot_be_downloaded(monkeypatch, tmp_path):
    listing = cli.invoke(app, ["data", "list", "--data-dir", str(tmp_path)])
    assert listing.exit_code == 0
    assert re.search(r"│ imagenet\s.*│\s+- │ not downloadable", listing.output)
    named = cli.invoke(app, ["data", "fetch", "imagenet", "--data-dir", str(tmp_path)])
    assert named.exit_code == EXIT_FAILED_RUN and "could not fetch imagenet" in named.output
    assert "registered users" in " ".join(named.output.split())
    monkeypatch.setattr(data_command, "DATASETS", {"imagenet": sources.DATASETS["imagenet"]})
    within_all = cli.invoke(app, ["data", "fetch", "all", "--data-dir", str(tmp_path)])
    assert within_all.exit_code == 0 and "imagenet: devicebench cannot download it" in within_all.output
    assert not any(tmp_path.iterdir())  # nothing was written
