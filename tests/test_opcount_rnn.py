"""Recurrent layers in the step profile: each nn.LSTM, nn.GRU and nn.RNN call is recorded as cuDNN's fused kernels
(two forward, two data-gradient and one weight-gradient kernel per layer and direction), whatever the sequence's
length, with the shapes the real layer returns, a gradient for every weight, and the FLOPs of the per-time-step
count torch's formulas give, plus the one state gradient cuDNN computes and torch skips.

    python -m pytest tests/test_opcount_rnn.py -q
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from devicebench.data.own import TensorData
from devicebench.engine import fused_recurrence, kernel_recorder
from devicebench.engine.opcount import StepProfile, profile_training_step
from devicebench.workloads import Workload, get_workload
from devicebench.workloads.optimizers import sgd

STEPS, BATCH, WIDTH = 12, 4, 16  # tokens, sequences, features and hidden units of the small recurrent models
SGD = {"batch_size": BATCH, "epochs": 1, "learning_rate": 0.1, "momentum": 0.0}  # one _foreach_add_: no state
FUSED = ("cudnn_rnn.forward", "cudnn_rnn.backward_data", "cudnn_rnn.backward_weight")
RECURRENT = {
    "lstm": (nn.LSTM, {}),
    "gru": (nn.GRU, {}),
    "rnn_tanh": (nn.RNN, {}),
    "rnn_relu": (nn.RNN, {"nonlinearity": "relu"}),
}
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


class Recurrent(nn.Module):
    """Linear → two recurrent layers (bidirectional unless told) → the mean over time → Linear to 3 classes; the
    Linear first, so the recurrent input needs a gradient as an embedding's does. `seen` gets the shapes of what
    the recurrent layers return."""

    def __init__(
        self,
        kind: str = "lstm",
        seen: list | None = None,
        bidirectional: bool = True,
        batch_first: bool = True,
        **options,
    ) -> None:
        super().__init__()
        recurrent, defaults = RECURRENT[kind]
        self.inward = nn.Linear(WIDTH, WIDTH)
        self.recurrent = recurrent(
            WIDTH, WIDTH, num_layers=2, bidirectional=bidirectional, batch_first=batch_first, **defaults, **options
        )
        self.outward = nn.Linear((2 if bidirectional else 1) * (options.get("proj_size") or WIDTH), 3)
        self.seen, self.batch_first = seen, batch_first

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        sequence = self.inward(inputs if self.batch_first else inputs.transpose(0, 1))
        output, states = self.recurrent(sequence)
        if self.seen is not None:
            self.seen.append(
                [tuple(tensor.shape) for tensor in (output, *(states if isinstance(states, tuple) else (states,)))]
            )
        return self.outward(output.mean(dim=1 if self.batch_first else 0))


def sequences(build_model, **fields) -> Workload:
    """A workload of BATCH sequences of STEPS x WIDTH features and 3 classes, trained with plain SGD."""
    data = TensorData(torch.zeros(8, STEPS, WIDTH), torch.zeros(8, dtype=torch.long))
    return Workload(
        **{
            "name": "sequences",
            "seed": None,
            "dataset": "tiny",
            "summary": "a small recurrent model",
            "build_model": lambda hyperparameters: build_model(),
            "defaults": SGD,
            "build_loss": nn.CrossEntropyLoss,
            "build_optimizer": sgd,
            "load_data": lambda: data,
            **fields,
        }
    )


def fused(profile: StepProfile) -> list[kernel_recorder.Kernel]:
    return [kernel for kernel in profile.kernels if kernel.operator in FUSED]


def operator_counts(profile: StepProfile) -> dict[str, int]:
    return {name: sum(kernel.operator == name for kernel in profile.kernels) for name in FUSED}


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "steps_first"])
@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "one_way"])
@pytest.mark.parametrize("kind", RECURRENT)
def test_a_fused_layer_returns_the_shapes_the_real_layer_returns(kind, bidirectional, batch_first):
    seen: list = []
    profile = profile_training_step(sequences(lambda: Recurrent(kind, seen, bidirectional, batch_first)), SGD)
    torch.manual_seed(0)
    real: list = []
    Recurrent(kind, real, bidirectional, batch_first)(torch.randn(BATCH, STEPS, WIDTH))  # on the CPU, computed
    assert seen == real and len(real) == 1
    directions = 2 if bidirectional else 1
    assert operator_counts(profile) == {
        "cudnn_rnn.forward": 2 * 2 * directions,  # 2 layers, a pair per direction
        "cudnn_rnn.backward_data": 2 * 2 * directions,
        "cudnn_rnn.backward_weight": 2 * directions,
    }
    assert all(kernel.matrix and kernel.flops > 0 and kernel.dtype == "float32" for kernel in fused(profile))
    [update] = [kernel for kernel in profile.kernels if kernel.operator == "aten._foreach_add_.List"]
    assert update.bytes_written == profile.parameter_bytes  # every parameter, the recurrent weights too, has a gradient


def test_an_lstm_is_cudnns_kernels_with_the_flops_and_bytes_done_by_hand():
    profile = profile_training_step(sequences(Recurrent), SGD)
    gates = 4 * WIDTH  # G: input, forget, cell and output gates
    positions = STEPS * BATCH  # T x B = 48
    states = 2 * BATCH * WIDTH  # h and c: 128 elements
    names = [kernel.operator for kernel in profile.kernels]
    first = names.index("cudnn_rnn.forward")
    assert names[first - 3 : first] == ["aten.addmm.default", "aten.zeros.default", "aten.zeros.default"]  # h0, c0
    assert names[first : first + 8] == ["cudnn_rnn.forward"] * 8  # 2 layers x 2 directions x (projection, recurrence)
    projection, recurrence = profile.kernels[first : first + 2]
    assert (projection.flops, projection.bytes_read, projection.bytes_written) == (
        2 * positions * gates * WIDTH,  # the input x W_ih of all 12 steps in one GEMM: 98,304
        4 * (positions * WIDTH + gates * WIDTH + 2 * gates),  # input, W_ih, two biases (float32): 7,680
        4 * positions * gates,
    )  # the gates' pre-activations: 12,288
    assert (recurrence.flops, recurrence.bytes_read, recurrence.bytes_written) == (
        2 * positions * gates * WIDTH,  # h x W_hh at every step: 98,304
        4 * (positions * gates + gates * WIDTH + states),  # pre-activations, W_hh, h0 and c0: 16,896
        4 * (positions * WIDTH + states + positions * gates),
    )  # outputs, h_n and c_n, the reserve space: 15,872
    second_layer = profile.kernels[first + 4]
    assert second_layer.flops == 2 * positions * gates * (2 * WIDTH)  # reads both directions of the first layer
    backward = [kernel for kernel in profile.kernels if kernel.operator.startswith("cudnn_rnn.backward")]
    assert [kernel.operator for kernel in backward] == ["cudnn_rnn.backward_data"] * 8 + [
        "cudnn_rnn.backward_weight"
    ] * 4  # the data gradients of both layers, then the weights'
    assert [kernel.flops for kernel in backward[:2]] == [  # the second layer's first: backward runs top down
        2 * positions * gates * WIDTH,
        2 * positions * gates * 2 * WIDTH,
    ]  # recurrence, then the input's gradient
    assert backward[-1].flops == 2 * positions * gates * (WIDTH + WIDTH)  # the first layer's W_ih and W_hh
    assert backward[-1].bytes_written == 4 * (gates * WIDTH + gates * WIDTH + 2 * gates)
    assert profile.kernel_count < 40


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_the_fused_flops_are_the_per_step_count_plus_the_first_steps_state_gradient(kind):
    """Torch unrolled computes no gradient for the zero initial state (it needs none); cuDNN's backward does:
    2 x B x G x H FLOPs per layer and direction more, and nothing else differs."""
    workload = sequences(lambda: Recurrent(kind))
    profile = profile_training_step(workload, SGD)
    unrolled = profile_training_step(workload, SGD, fuse_recurrent_layers=False)
    assert unrolled.kernel_count > 10 * profile.kernel_count and not fused(unrolled)
    layers_and_directions = 2 * 2
    assert profile.flops - unrolled.flops == layers_and_directions * 2 * BATCH * (GATES[kind] * WIDTH) * WIDTH
    assert profile.flops == pytest.approx(unrolled.flops, rel=0.03)


def test_imdb_bilstm_is_a_few_dozen_kernels_whatever_its_length():
    imdb = get_workload("imdb-bilstm")
    profile = profile_training_step(imdb, dict(imdb.defaults))  # 200 tokens: 29,610 kernels unrolled
    assert imdb.defaults["sequence_length"] == 200 and profile.kernel_count < 100
    assert operator_counts(profile) == {
        "cudnn_rnn.forward": 8,
        "cudnn_rnn.backward_data": 8,  # 2 BiLSTM layers
        "cudnn_rnn.backward_weight": 4,
    }
    [lerp] = [kernel for kernel in profile.kernels if kernel.operator == "aten._foreach_lerp_.Scalar"]
    assert lerp.bytes_written == profile.parameter_bytes  # Adam's first moment: every parameter has a gradient
    shorter = profile_training_step(imdb, {**imdb.defaults, "sequence_length": 20})
    assert shorter.kernel_count == profile.kernel_count  # no kernel per token
    unrolled = profile_training_step(imdb, {**imdb.defaults, "sequence_length": 20}, fuse_recurrent_layers=False)
    assert unrolled.kernel_count > 2_500
    assert shorter.flops == pytest.approx(unrolled.flops, rel=0.03)


def test_gnmt_is_one_forward_pair_per_layer_and_direction():
    gnmt = get_workload("gnmt")
    hyperparameters = {**gnmt.defaults, "width": 64}
    profile = profile_training_step(gnmt, hyperparameters)
    layers, width = hyperparameters["layers"], 64
    steps, batch, gates = hyperparameters["source_length"], hyperparameters["batch_size"], 4 * width
    assert steps == hyperparameters["target_length"] == 50
    # the encoder's bidirectional layer (2 directions) and its 3 others, then the decoder's 4 layers
    layers_and_directions = 2 + (layers - 1) + layers
    assert operator_counts(profile) == {
        "cudnn_rnn.forward": 2 * layers_and_directions,
        "cudnn_rnn.backward_data": 2 * layers_and_directions,
        "cudnn_rnn.backward_weight": layers_and_directions,
    }

    def pair(input_width: int) -> list[float]:  # the input projection, then the recurrence
        return [2 * steps * batch * gates * input_width, 2 * steps * batch * gates * width]

    encoder = pair(width) * 2 + pair(2 * width) + pair(width) * (layers - 2)  # the 2nd reads both directions
    decoder = pair(width) + pair(2 * width) * (layers - 1)  # the later layers read the attention's context too
    assert [kernel.flops for kernel in profile.kernels if kernel.operator == "cudnn_rnn.forward"] == encoder + decoder
    [lerp] = [kernel for kernel in profile.kernels if kernel.operator == "aten._foreach_lerp_.Scalar"]
    assert lerp.bytes_written == profile.parameter_bytes  # every LSTM parameter has a gradient for Adam


def test_a_step_on_the_cpu_records_the_same_fused_kernels():
    def step_with_item(model, batch, optimizer):
        inputs, labels = batch
        loss = nn.functional.cross_entropy(model(inputs), labels)
        if loss.item() > 1e9:  # needs a real number: the meta device has none, so the step runs on the CPU
            return loss
        loss.backward()
        optimizer.step()
        return loss

    on_cpu = profile_training_step(sequences(Recurrent, train_step=step_with_item), SGD)
    assert len(on_cpu.notes) == 1 and on_cpu.notes[0].startswith("FLOPs counted on random inputs")
    on_meta = profile_training_step(sequences(Recurrent), SGD)
    assert fused(on_cpu) == fused(on_meta) and len(fused(on_cpu)) == 20
    assert on_cpu.flops == on_meta.flops


@pytest.mark.parametrize(
    "build_model",
    [
        lambda: Recurrent(proj_size=8, bidirectional=False),  # an LSTM with projections: a third weight
        lambda: Packing(),
    ],
    ids=["projections", "packed"],
)
def test_a_layer_cudnn_is_not_modelled_for_runs_per_step_as_before(build_model):
    profile = profile_training_step(sequences(build_model), SGD)
    assert not fused(profile) and profile.notes == ()
    products = [kernel for kernel in profile.kernels if kernel.operator in ("aten.mm.default", "aten.addmm.default")]
    assert len(products) > 2 * STEPS  # the recurrence's products, step by step


class Packing(nn.Module):
    """A packed sequence through an LSTM: its batch may shrink step by step, which the fused kernels do not model."""

    def __init__(self) -> None:
        super().__init__()
        self.recurrent, self.outward = nn.LSTM(WIDTH, WIDTH, batch_first=True), nn.Linear(WIDTH, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        lengths = torch.full((inputs.shape[0],), inputs.shape[1])  # on the host, as packing wants them
        _, (final, _) = self.recurrent(nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True))
        return self.outward(final[0])


def test_fused_kernels_count_toward_the_most_a_step_may_launch(monkeypatch):
    # the Linear, h0 and c0, then the first fused kernel
    monkeypatch.setattr(kernel_recorder, "MOST_KERNELS_PER_STEP", 4)
    with pytest.raises(kernel_recorder.ProfileError, match="more than 4 kernels"):
        profile_training_step(sequences(Recurrent), SGD)
    monkeypatch.setattr(kernel_recorder, "MOST_KERNELS_PER_STEP", 40)
    assert profile_training_step(sequences(Recurrent), SGD).kernel_count <= 40


def test_a_gru_in_evaluation_keeps_no_reserve_space_and_counts_its_own_dtype():
    call = fused_recurrence.RecurrentCall(
        gates=3,
        layers=1,
        directions=1,
        steps=10,
        batch=2,
        input_width=5,
        hidden=4,
        biases=False,
        training=False,
        dtype=torch.bfloat16,
    )
    forward, data, weight = fused_recurrence.fused_recurrent_kernels(call)
    gates, positions, state = 3 * 4, 10 * 2, 2 * 4  # G = 12, T x B = 20, one state of B x H
    projection, recurrence = forward
    assert projection.bytes_read == 2 * (positions * 5 + gates * 5)  # no biases; bfloat16: 2 bytes an element
    assert recurrence.bytes_written == 2 * (positions * 4 + state)  # outputs and h_n, no reserve space
    assert data[0].bytes_read == 2 * (positions * 4 + state + gates * 4)  # no reserve space to read back
    assert [kernel.flops for kernel in forward + data + weight] == [
        2 * positions * gates * 5,
        2 * positions * gates * 4,  # forward: projection, recurrence
        2 * positions * gates * 4,
        2 * positions * gates * 5,  # data: recurrence, then the input's gradient
        2 * positions * gates * (5 + 4),
    ]  # weights
    assert {kernel.dtype for kernel in forward + data + weight} == {"bfloat16"}
    assert all(kernel.matrix for kernel in forward + data + weight)
