"""Every registered workload, tested from the registry: a new workload is covered without a new test."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import devicebench.workloads as registry
from devicebench.testing import check_workload
from devicebench.workloads import SEED_EXPERIMENTS, get_workload, list_workloads
from devicebench.workloads.cifar_mlp import KerasNormalizedCrossEntropy
from devicebench.workloads.optimizers import adam

WORKLOADS = list_workloads()
NAMES = [entry.name for entry in WORKLOADS]
TORCH_WORKLOADS = [entry for entry in WORKLOADS if entry.trainer is None]  # the trees are tested in test_gbdt.py
# A reference model (in_suites=False: gnmt…) is no seed's; its published figures are rows of the public record
SUITE_WORKLOADS = [entry for entry in WORKLOADS if entry.in_suites]


def test_the_seed_workloads_of_this_release_are_registered():
    assert {
        "mnist-cnn2",
        "mnist-cnn4",
        "cifar10-mlp",
        "cifar100-mlp",
        "cifar10-cnn",
        "catdog-original",
        "catdog-improved",
        "catdog-hires",
        "catdog-deep",
        "imdb-bilstm",
        "imdb-transformer",
    } <= set(NAMES)


# Settings that shrink a slow model for the contract's 30 steps on a CPU; the language models at a rate that moves
# a randomly started model within them (their fine-tuning rate of 3e-5 assumes a pre-trained one)
TINY_LANGUAGE_MODEL = {
    "layers": 2,
    "width": 64,
    "heads": 2,
    "sequence_length": 32,
    "vocab_size": 1_024,
    "learning_rate": 1e-3,
}
SMALLER = {
    "catdog-deep": {"depth": 4},  # its 32 layers: a minute
    "resnet50": {"image_size": 32},  # 224 pixels: a minute
    "gnmt": {"vocab_size": 64, "source_length": 7, "target_length": 5, "width": 64},  # 160 million parameters
    **{name: TINY_LANGUAGE_MODEL for name in ("bert-base", "bert-large", "gpt2-small")},
}
# Learning one batch takes minutes for these on two cores, even at 32 pixels (138 M parameters; 50 blocks):
# resnet50 checks their code (resnet152 is its blocks, more of them), tests/test_imagenet.py the rest
LONGER_THAN_THE_CONTRACT = ("vgg16", "resnet152")
CONTRACT_WORKLOADS = [entry for entry in WORKLOADS if entry.name not in LONGER_THAN_THE_CONTRACT]


@pytest.mark.slow
@pytest.mark.parametrize("entry", CONTRACT_WORKLOADS, ids=lambda entry: entry.name)
def test_every_workload_meets_the_contract_plugins_are_held_to(entry):
    """Builds the same on meta as for real, outputs one row per sample of the right width, learns one small
    batch at the seed's own learning rate, has its FLOPs counted (devicebench.testing, as plugins use it)."""
    check_workload(entry, SMALLER.get(entry.name))


@pytest.mark.parametrize("entry", SUITE_WORKLOADS, ids=[entry.name for entry in SUITE_WORKLOADS])
def test_devicebench_workloads_are_seed_experiments_with_published_figures(entry):
    assert entry.origin == "devicebench" and entry.seed in SEED_EXPERIMENTS
    assert entry.published is not None and entry.published.hardware and entry.published.basis


@pytest.mark.parametrize("entry", [entry for entry in WORKLOADS if not entry.in_suites], ids=lambda entry: entry.name)
def test_reference_models_run_only_when_named_and_count_their_tokens(entry):
    assert entry.origin == "devicebench" and entry.seed is None  # the field's models, not a seed post's
    if entry.output == "token_logits":  # a language model's sequence, or a translation's source and target
        assert entry.tokens_per_sample(entry.defaults) == entry.defaults.get(
            "sequence_length", entry.defaults.get("source_length", 0) + entry.defaults.get("target_length", 0)
        )


def test_the_contract_catches_a_model_that_does_not_learn_or_has_the_wrong_width():
    frozen_lr = {"learning_rate": 0.0}  # Adam at 0 never moves: the loss cannot fall
    with pytest.raises(AssertionError, match="mnist-cnn2: the loss did not fall by a fifth"):
        check_workload(get_workload("mnist-cnn2"), frozen_lr)
    narrow = registry.Workload(
        name="narrow",
        seed=None,
        dataset="mnist",
        summary="10 classes of digits, 3 outputs",
        build_model=lambda hyperparameters: nn.Sequential(nn.Flatten(), nn.Linear(784, 3)),
        defaults={"batch_size": 16, "epochs": 2, "learning_rate": 1e-3, "adam_epsilon": 1e-8},
        build_loss=nn.CrossEntropyLoss,
        build_optimizer=adam,
        image_shape=(1, 28, 28),
    )
    with pytest.raises(AssertionError, match=r"narrow: outputs of shape \(16, 3\) for 16 samples of 10 classes"):
        check_workload(narrow)


def test_models_are_the_published_architectures():
    # Conv 5x5x1x32 + Conv 5x5x32x64 + Dense 7*7*64x1024 + Dense 1024x10, with biases
    assert get_workload("mnist-cnn2").parameter_count() == 832 + 51_264 + 3_212_288 + 10_250
    # four 'SAME' pools take 28 to 2: the dense layer sees 2*2*256 features
    cnn4 = get_workload("mnist-cnn4").build_model({})
    assert cnn4.classifier[1].in_features == 2 * 2 * 256
    # 3072 → 3000 → 1000 → 10, sigmoid out
    mlp = get_workload("cifar10-mlp").build_model({})
    assert [layer.out_features for layer in mlp if isinstance(layer, nn.Linear)] == [3000, 1000, 10]
    assert isinstance(mlp[-1], nn.Sigmoid)
    mlp100 = get_workload("cifar100-mlp").build_model({})
    assert [layer.out_features for layer in mlp100 if isinstance(layer, nn.Linear)] == [512, 256, 100]


def test_training_settings_are_the_seeds():
    cnn2 = get_workload("mnist-cnn2")
    optimizer = cnn2.build_optimizer(cnn2.build_model(cnn2.defaults), cnn2.defaults)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["lr"] == 1e-4
    assert cnn2.defaults["batch_size"] == 50
    mlp10 = get_workload("cifar10-mlp")
    optimizer = mlp10.build_optimizer(mlp10.build_model(mlp10.defaults), mlp10.defaults)
    assert isinstance(optimizer, torch.optim.SGD)
    assert (optimizer.defaults["lr"], optimizer.defaults["momentum"]) == (0.01, 0.0)
    assert (mlp10.defaults["batch_size"], mlp10.defaults["epochs"]) == (32, 10)
    mlp100 = get_workload("cifar100-mlp")
    optimizer = mlp100.build_optimizer(mlp100.build_model(mlp100.defaults), mlp100.defaults)
    assert isinstance(optimizer, torch.optim.Adam)
    assert (optimizer.defaults["lr"], optimizer.defaults["eps"]) == (1e-3, 1e-7)
    assert (mlp100.defaults["batch_size"], mlp100.defaults["epochs"]) == (32, 100)


def test_keras_normalized_cross_entropy_matches_a_hand_computation():
    probabilities = torch.tensor([[0.9, 0.3, 0.3], [0.2, 0.2, 0.0]])
    labels = torch.tensor([0, 2])
    # row 1: 0.9 / 1.5 = 0.6 → -log 0.6; row 2: 0 / 0.4 = 0 → clipped to 1e-7 → -log 1e-7
    expected = (-torch.log(torch.tensor(0.6)) - torch.log(torch.tensor(1e-7))) / 2
    assert KerasNormalizedCrossEntropy()(probabilities, labels).item() == pytest.approx(expected.item(), rel=1e-5)


def test_lookup_by_name_and_pattern():
    assert get_workload("MNIST-CNN2").name == "mnist-cnn2"
    assert [entry.name for entry in list_workloads("mnist-*")] == ["mnist-cnn2", "mnist-cnn4"]
    assert {entry.name for entry in list_workloads("*mlp")} == {"cifar10-mlp", "cifar100-mlp"}
    assert list_workloads("nothing-*") == []
    with pytest.raises(KeyError, match="unknown workload 'resnet'.*mnist-cnn2"):
        get_workload("resnet")


def test_registering_a_bad_workload_is_refused():
    with pytest.raises(ValueError, match="unknown seed experiment 'S9'"):
        registry.workload(
            name="x",
            seed="S9",
            dataset="mnist",
            summary="",
            loss=nn.CrossEntropyLoss,
            optimizer=adam,
            defaults={"batch_size": 1, "epochs": 1},
            published=registry.Published(None, "", ""),
            image_shape=(1, 28, 28),
        )
    with pytest.raises(ValueError, match="lack epochs"):
        registry.workload(
            name="x",
            seed="S1",
            dataset="mnist",
            summary="",
            loss=nn.CrossEntropyLoss,
            optimizer=adam,
            defaults={"batch_size": 1},
            published=registry.Published(None, "", ""),
            image_shape=(1, 28, 28),
        )
    with pytest.raises(ValueError, match="registered twice"):
        registry.workload(
            name="mnist-cnn2",
            seed="S1",
            dataset="mnist",
            summary="",
            loss=nn.CrossEntropyLoss,
            optimizer=adam,
            defaults={"batch_size": 1, "epochs": 1},
            published=registry.Published(None, "", ""),
            image_shape=(1, 28, 28),
        )(lambda hyperparameters: nn.Identity())


def test_text_models_have_the_keras_examples_sizes():
    # Keras' summary of "Text classification with Transformer": 657,758 parameters
    assert get_workload("imdb-transformer").parameter_count() == 657_758
    # Keras' "Bidirectional LSTM on IMDB": 2,757,761; PyTorch LSTMs carry a second bias vector per direction and
    # layer (4 gates x 64 units x 2 directions x 2 layers = 1,024 more, held at zero at the start)
    assert get_workload("imdb-bilstm").parameter_count() == 2_757_761 + 1_024
    forget_bias = get_workload("imdb-bilstm").build_model(get_workload("imdb-bilstm").defaults).first.bias_ih_l0
    assert forget_bias[64:128].eq(1).all() and forget_bias[:64].eq(0).all()  # Keras' unit_forget_bias
