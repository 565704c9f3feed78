"""The per-operator profile of one training step: each kernel's FLOPs and bytes checked against sums done by hand
for a Linear and a Conv2d layer, views left out, and every registered torch workload profiled at its defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from devicebench.data.own import TensorData
from devicebench.engine import kernel_recorder
from devicebench.engine.flops import training_flops_per_sample
from devicebench.engine.kernel_recorder import ProfileError
from devicebench.engine.opcount import StepProfile, profile_training_step
from devicebench.workloads import Workload, list_workloads
from devicebench.workloads.optimizers import adam, sgd

SGD = {"batch_size": 2, "epochs": 1, "learning_rate": 0.1, "momentum": 0.0}  # plain SGD: no momentum buffer


def tiny(build_model, **fields) -> Workload:
    """A workload of 4 features and 3 classes (int64 labels) around `build_model`, trained with plain SGD."""
    data = TensorData(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long))
    return Workload(
        **{
            "name": "tiny",
            "seed": None,
            "dataset": "tiny",
            "summary": "a tiny model",
            "build_model": lambda hyperparameters: build_model(),
            "defaults": SGD,
            "build_loss": nn.CrossEntropyLoss,
            "build_optimizer": sgd,
            "load_data": lambda: data,
            **fields,
        }
    )


def operators(profile: StepProfile) -> list[str]:
    return [kernel.operator for kernel in profile.kernels]


def test_a_linear_step_is_its_kernels_with_the_flops_and_bytes_done_by_hand():
    profile = profile_training_step(tiny(lambda: nn.Linear(4, 3)), SGD)
    assert operators(profile) == [
        "aten.addmm.default",  # forward: bias + input @ weight.t()
        "aten._log_softmax.default",
        "aten.nll_loss_forward.default",  # the cross-entropy
        "aten.ones_like.default",  # backward starts from d loss / d loss = 1
        "aten.nll_loss_backward.default",
        "aten._log_softmax_backward_data.default",
        "aten.mm.default",  # the weight's gradient; none for the input, which needs no gradient
        "aten.sum.dim_IntList",  # the bias's gradient: the output gradient summed over the batch
        "aten._foreach_add_.List",  # SGD without momentum: parameters += -lr * gradients, all in one launch
    ]
    forward, _, loss, _, _, _, weight_gradient, bias_gradient, update = profile.kernels
    assert forward == kernel_recorder.Kernel(
        "aten.addmm.default",
        flops=2 * 2 * 4 * 3,  # 2 x batch x in x out = 48
        bytes_read=2 * 4 * 4 + 3 * 4 * 4 + 3 * 4,  # input, weight, bias: 92
        bytes_written=2 * 3 * 4,
        dtype="float32",
        matrix=True,
    )  # 24
    assert loss.bytes_read == 2 * 3 * 4 + 2 * 8 and loss.bytes_written == 4 + 4  # log-probabilities, int64 labels
    # → the loss and the total weight, one float32 each
    assert (weight_gradient.flops, weight_gradient.bytes_read, weight_gradient.bytes_written) == (
        2 * 3 * 2 * 4,  # 2 x out x batch x in = 48
        2 * 3 * 4 + 2 * 4 * 4,  # output gradient 2x3, input 2x4: 56
        3 * 4 * 4,
    )  # the weight's gradient 3x4: 48
    assert (bias_gradient.flops, bias_gradient.bytes_read, bias_gradient.bytes_written) == (0, 2 * 3 * 4, 3 * 4)
    assert (update.flops, update.bytes_read, update.bytes_written, update.matrix) == (
        0,
        2 * (12 + 3) * 4,  # weight and bias, then their gradients: 120
        (12 + 3) * 4,
        False,
    )  # weight and bias, updated in place: 60
    assert sum(kernel.flops for kernel in profile.kernels if kernel.matrix) == profile.flops == 48 + 48
    with FlopCounterMode(display=False) as counter:  # the same step as torch counts it
        with torch.device("meta"):
            model = nn.Linear(4, 3)
        nn.CrossEntropyLoss()(
            model(torch.empty(2, 4, device="meta")), torch.zeros(2, dtype=torch.long, device="meta")
        ).backward()
    assert counter.get_total_flops() == profile.flops
    assert profile.host_to_device_bytes == 2 * 4 * 4 + 2 * 8  # float32 inputs 2x4, int64 labels 2
    assert profile.parameter_bytes == (12 + 3) * 4
    assert profile.batch_size == 2 and profile.kernel_count == 9 and profile.notes == ()
    assert profile.summary()[:3] == [  # the most bytes first
        ("aten._foreach_add_.List", 1, 0, 120 + 60),
        ("aten.addmm.default", 1, 48, 92 + 24),
        ("aten.mm.default", 1, 48, 56 + 48),
    ]
    assert profile.bytes_moved == sum(kernel.bytes_read + kernel.bytes_written for kernel in profile.kernels)
    assert profile_training_step(tiny(lambda: nn.Linear(4, 3)), SGD, batch_size=6).kernels[0].flops == 2 * 6 * 4 * 3


def test_adam_steps_through_the_multi_tensor_kernels_after_its_state_is_made():
    hyperparameters = {"batch_size": 2, "epochs": 1, "learning_rate": 1e-3, "adam_epsilon": 1e-8}
    profile = profile_training_step(tiny(lambda: nn.Linear(4, 3), build_optimizer=adam), hyperparameters)
    optimizer = profile.kernels[8:]  # after the 8 kernels of forward, loss and backward (as above)
    parameters = (12 + 3) * 4  # bytes of weight and bias; the moments and gradients are as large
    assert [(kernel.operator, kernel.bytes_read, kernel.bytes_written) for kernel in optimizer] == [
        ("aten._foreach_lerp_.Scalar", 2 * parameters, parameters),  # first moment toward the gradients
        ("aten._foreach_mul_.Scalar", parameters, parameters),  # second moment x beta2
        ("aten._foreach_addcmul_.Scalar", 2 * parameters, parameters),  # + (1 - beta2) gradient² (read once)
        ("aten._foreach_sqrt.default", parameters, parameters),  # into new tensors
        ("aten._foreach_div_.ScalarList", parameters, parameters),  # / bias correction
        ("aten._foreach_add_.Scalar", parameters, parameters),  # + epsilon
        ("aten._foreach_addcdiv_.ScalarList", 3 * parameters, parameters),  # parameters -= step x m / denominator
    ]  # no zeros_like for the moments and no step count: state is made once, and the step counts live on the host


def test_a_convolution_costs_what_torch_formula_says():
    with_flatten = tiny(
        lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten()), load_data=None, image_shape=(3, 5, 5)
    )
    profile = profile_training_step(with_flatten, SGD)
    forward = profile.kernels[0]
    assert forward.operator == "aten.convolution.default"
    # 2 x batch x output pixels x output channels x (input channels x kernel height x kernel width), no bias
    assert forward.flops == 2 * (2 * 8 * 5 * 5) * (3 * 3 * 3) == 21_600
    assert forward.bytes_read == 2 * 3 * 5 * 5 * 4 + 8 * 3 * 3 * 3 * 4 + 8 * 4  # input, weight, bias
    assert forward.bytes_written == 2 * 8 * 5 * 5 * 4
    assert forward.matrix and forward.dtype == "float32"
    backward = [kernel for kernel in profile.kernels if kernel.operator == "aten.convolution_backward.default"]
    assert [kernel.flops for kernel in backward] == [21_600]  # the weight's gradient only: the images need none
    assert not any("view" in name or name.startswith(("aten.t.", "aten.expand")) for name in operators(profile))


class Folded(nn.Module):
    """A matrix product of 3-D inputs, as attention layers do: matmul folds them to 2-D with view and unfolds the
    product with _unsafe_view, a view whose schema does not say so; flatten(1) is one more view."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(4, 3))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return (inputs.unsqueeze(1) @ self.weight).flatten(1)


def test_views_are_not_kernels(monkeypatch):
    names = operators(profile_training_step(tiny(Folded), SGD))
    assert names[0] == "aten.mm.default"  # the product, on the inputs viewed as 2x4
    assert "aten.view.default" not in names and "aten._unsafe_view.default" not in names
    monkeypatch.setattr(kernel_recorder, "UNDECLARED_VIEWS", frozenset())  # without the exception it would count
    assert "aten._unsafe_view.default" in operators(profile_training_step(tiny(Folded), SGD))


def test_an_optimizer_that_cannot_step_on_meta_is_retried_then_left_out():
    def needs_numbers(model, hyperparameters):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        original = optimizer.step
        optimizer.step = lambda: [parameter.sum().item() for parameter in model.parameters()] and original()
        return optimizer

    profile = profile_training_step(tiny(lambda: nn.Linear(4, 3), build_optimizer=needs_numbers), SGD)
    assert len(profile.notes) == 2 and "profiled without the optimizer" in profile.notes[1]
    assert operators(profile)[-1] == "aten.sum.dim_IntList"  # the bias's gradient, then nothing


def test_a_step_of_your_own_that_reads_numbers_is_profiled_on_the_cpu():
    def step_with_item(model, batch, optimizer):
        inputs, labels = batch
        loss = nn.functional.cross_entropy(model(inputs), labels)
        if loss.item() > 1e9:  # needs a real number: the meta device has none
            return loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    profile = profile_training_step(tiny(lambda: nn.Linear(4, 3), train_step=step_with_item), SGD)
    assert len(profile.notes) == 1 and profile.notes[0].startswith(
        "FLOPs counted on random inputs: one step of 2 samples could not run on the meta device"
    )
    assert profile.kernels[0].operator == "aten.addmm.default" and profile.kernels[0].flops == 48
    assert operators(profile)[-1] == "aten._foreach_add_.List"  # foreach on the CPU too, as on a GPU
    assert profile.flops == 48 + 48


def conv_step_with_item(model, batch, optimizer):
    """A step of your own that reads a number: profiled on the CPU, whose kernels depend on its vector ISA."""
    inputs, labels = batch
    loss = nn.functional.cross_entropy(model(inputs.view(-1, 1, 2, 2)).flatten(1), labels)
    if loss.item() > 1e9:
        return loss
    loss.backward()
    optimizer.step()
    return loss


ON_THE_CPU = """
import json, sys, torch
from torch import nn
sys.path.insert(0, sys.argv[1])
from test_opcount import SGD, conv_step_with_item, tiny
from devicebench.engine.opcount import profile_training_step
profile = profile_training_step(tiny(lambda: nn.Conv2d(1, 3, 2), train_step=conv_step_with_item), SGD)
kernels = [[kernel.operator, kernel.flops, kernel.bytes_read, kernel.bytes_written] for kernel in profile.kernels]
print(json.dumps({"isa": torch.backends.cpu.get_cpu_capability(), "notes": profile.notes, "kernels": kernels}))
"""


@pytest.mark.slow
def test_a_profile_on_the_cpu_is_the_same_whatever_its_vector_isa():
    """ATEN_CPU_CAPABILITY=default forces torch's plain kernels; unset, it takes the CPU's widest (AVX2 on an EPYC,
    AVX-512 on a Xeon). The dispatcher sees the same operators either way: the counts do not depend on the ISA."""
    profiles = {}
    for capability in ("default", None):
        environment = {key: value for key, value in os.environ.items() if key != "ATEN_CPU_CAPABILITY"}
        if capability:
            environment["ATEN_CPU_CAPABILITY"] = capability
        completed = subprocess.run(
            [sys.executable, "-c", ON_THE_CPU, str(Path(__file__).parent)],
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert completed.returncode == 0, completed.stderr
        profiles[capability] = json.loads(completed.stdout.splitlines()[-1])
    assert profiles["default"]["isa"] == "DEFAULT" and profiles[None]["isa"] != "DEFAULT"
    assert "ran on the CPU on random numbers" in profiles["default"]["notes"][0]
    assert profiles["default"]["kernels"] == profiles[None]["kernels"]
    # 2 FLOPs a multiply-add x batch 2 x 3 outputs of 1x1 x (1 channel x a 2x2 window)
    assert profiles["default"]["kernels"][0][:2] == ["aten.convolution.default", 2 * 2 * 3 * 1 * 2 * 2]


class Branchy(nn.Module):
    """A wide path of 4x64x3 or a narrow one of 4x3, chosen by the sign of its batch's sum: its data's values."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 3))
        self.narrow = nn.Linear(4, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.wide(inputs) if inputs.sum() > 0 else self.narrow(inputs)


@pytest.mark.parametrize(
    "reads",
    [
        lambda inputs: inputs.sum() > 0,  # a Python `if` on a tensor
        lambda inputs: inputs.max().item() > 0,
        lambda inputs: inputs.flatten().tolist()[0] > 0,
        lambda inputs: len(torch.nonzero(inputs)) > 0,  # a shape that depends on the values
        lambda inputs: torch.masked_select(inputs, inputs > 0).numel() > 0,
    ],
    ids=["if", "item", "tolist", "nonzero", "masked_select"],
)
def test_a_model_whose_branches_follow_its_data_is_counted_on_random_inputs_and_says_so(reads, monkeypatch):
    monkeypatch.setattr(
        Branchy, "forward", lambda self, inputs: self.wide(inputs) if reads(inputs) else self.narrow(inputs)
    )
    profile = profile_training_step(tiny(Branchy), SGD)
    assert len(profile.notes) == 1 and profile.notes[0].startswith("FLOPs counted on random inputs:"), profile.notes
    assert "its count may differ on real data" in profile.notes[0]
    forward = sum(kernel.flops for kernel in profile.kernels if kernel.operator == "aten.addmm.default")
    assert forward in (2 * 2 * (4 * 64 + 64 * 3), 2 * 2 * 4 * 3)  # one path or the other: whichever random took


def test_the_flops_per_sample_of_a_model_that_branches_on_its_data_are_left_out_with_why(caplog):
    assert training_flops_per_sample(tiny(Branchy), SGD) is None
    message = " ".join(caplog.text.split())
    assert (
        "FLOPs per sample of tiny not counted, so its runs show no TFLOP/s: one step could not run on the meta "
        "device (RuntimeError: Tensor.item() cannot be called on meta tensors)" in message
    )
    assert "as happens when the model reads its data's values" in message


def test_a_step_of_your_own_that_fails_everywhere_names_the_workload():
    def broken(model, batch, optimizer):
        raise RuntimeError("no step today")

    with pytest.raises(ProfileError, match=r"training step of tiny: RuntimeError: no step today on the meta device"):
        profile_training_step(tiny(lambda: nn.Linear(4, 3), train_step=broken), SGD)


TORCH_WORKLOADS = [entry for entry in list_workloads() if entry.trainer is None]


@pytest.mark.parametrize("entry", TORCH_WORKLOADS, ids=[entry.name for entry in TORCH_WORKLOADS])
def test_every_torch_workload_profiles_at_its_defaults(entry):
    hyperparameters = dict(entry.defaults)
    if "sequence_length" in hyperparameters:  # the profile records an LSTM as cuDNN's few fused kernels, but
        hyperparameters["sequence_length"] = 20  # training_flops_per_sample counts it per token: 200 take 8 s
    profile = profile_training_step(entry, hyperparameters)
    assert profile.kernel_count > 0 and profile.notes == () and profile.batch_size == hyperparameters["batch_size"]
    model = entry.build_model(hyperparameters)
    # cuDNN also computes the gradient of a recurrent layer's initial state, which torch per step skips: one step's
    # state gradient more (tests/test_opcount_rnn.py counts it exactly)
    recurrent = any(isinstance(module, nn.RNNBase) for module in model.modules())
    per_sample = training_flops_per_sample(entry, hyperparameters)  # forward, loss and backward only
    if per_sample is not None:  # the optimizer's kernels have no FLOPs: the totals agree
        assert profile.flops == pytest.approx(per_sample * profile.batch_size, rel=0.03 if recurrent else 1e-6)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    assert profile.parameter_bytes == 4 * parameters  # float32
    assert all(kernel.matrix == (kernel.flops > 0) for kernel in profile.kernels)
    assert not any(
        kernel.operator.startswith(("aten.view.", "aten.empty", "aten._unsafe_view.")) for kernel in profile.kernels
    )


def test_a_model_that_is_not_torch_has_no_profile():
    [trees, *_] = [entry for entry in list_workloads() if entry.trainer is not None]
    assert profile_training_step(trees, dict(trees.defaults)) is None
