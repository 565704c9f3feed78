"""gnmt, NVIDIA's GNMT v2 in plain PyTorch: its size at the README's shapes, counted by hand; its interface with the
engine (one tensor of source then target tokens in, a distribution at each target position out); a decoder that
sees no later target token; that it learns; and the sizes it refuses. Only the parameter count is at full size, on
the meta device; everything that computes is tiny."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from devicebench.engine.flops import training_flops_per_sample
from devicebench.workloads import ModelTooLarge, get_workload
from devicebench.workloads.outputs import SequenceCrossEntropy, predicted_classes

GNMT = get_workload("gnmt")
TINY = {**GNMT.defaults, "vocab_size": 16, "source_length": 7, "target_length": 5, "width": 64}  # 4 layers still


def tiny_batch(samples: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Random source-then-target token ids and random labels, one at each target position."""
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(
        0, TINY["vocab_size"], (samples, TINY["source_length"] + TINY["target_length"]), generator=generator
    )
    labels = torch.randint(0, TINY["vocab_size"], (samples, TINY["target_length"]), generator=generator)
    return tokens, labels


def test_parameters_at_the_defaults_are_those_of_the_readme_shapes():
    """NVIDIA's README gives no parameter count, so it is summed here from the shapes its "Default configuration"
    and train.py's defaults give: hidden size 1024 for every LSTM, the embedding and the attention; 4 layers in
    encoder and decoder; one embedding shared by both; the 32,000-token BPE vocabulary of scripts/wmt16_en_de.sh."""
    width, vocab = 1024, 32_000

    def lstm(inputs: int) -> int:  # 4 gates, each an inputs x width and a width x width matrix and two biases
        return 4 * (inputs * width + width * width + 2 * width)

    embedding = vocab * width  # shared by source and target: counted once
    encoder = 2 * lstm(width) + lstm(2 * width) + 2 * lstm(width)  # 1st bidirectional; 2nd reads both directions
    decoder = lstm(width) + 3 * lstm(2 * width)  # 2nd to 4th read the layer below and the attention context
    attention = width * width + width * width + width + 1 + width  # W_query, W_key, the vector, its scale, bias
    classifier = width * vocab + vocab
    assert embedding + encoder + decoder + attention + classifier == 160_015_617
    assert GNMT.parameter_count() == 160_015_617
    assert GNMT.num_classes is None  # a class at each target position: the runner checks no class count


def test_a_training_step_counts_three_forward_passes_of_the_matrix_products():
    """FLOPs per sample at the defaults, as the engine counts them on the meta device from the workload's example
    batch (100 tokens in, 50 labels): 2 per weight per token in the LSTMs and the classifier, the attention's
    projections and its target x source products; the backward pass twice the forward."""
    width, vocab, source, target = 1024, 32_000, 50, 50
    encoder_weights = 2 * 4 * width * (width + width) + 4 * width * (2 * width + width) + 2 * 4 * width * (2 * width)
    decoder_weights = 4 * width * (width + width) + 3 * 4 * width * (2 * width + width)
    forward = (
        2 * encoder_weights * source
        + 2 * decoder_weights * target
        + 2 * width * width * (target + source)  # the query and key projections
        + 2 * (2 * target * source * width)  # the scores against the vector, the context from the weights
        + 2 * width * vocab * target
    )  # the classifier
    assert forward == 12_724_224_000
    assert training_flops_per_sample(GNMT, dict(GNMT.defaults)) == pytest.approx(3 * forward, rel=0.01)


def test_the_default_model_builds_on_the_meta_device_without_a_weight_in_memory():
    with torch.device("meta"):
        model = GNMT.build_model(GNMT.defaults)
    tensors = list(model.parameters()) + list(model.buffers())
    assert tensors and all(tensor.is_meta for tensor in tensors)  # 640 MB of float32 weights, had they been real


def test_one_tensor_in_a_distribution_at_each_target_position_out():
    model = GNMT.build_model(TINY)
    tokens, labels = tiny_batch(samples=3)
    logits = model(tokens)
    assert logits.shape == (3, TINY["target_length"], TINY["vocab_size"])
    assert predicted_classes(logits, GNMT.output).shape == labels.shape
    assert SequenceCrossEntropy()(logits, labels).item() == pytest.approx(
        torch.log(torch.tensor(16.0)).item(), rel=0.05
    )  # near chance at the start


def test_no_target_position_sees_a_later_target_token_and_every_one_sees_the_source():
    """Teacher forcing is only honest when position t reads the target up to t: change the decoder's input at
    position 3 and positions 0 to 2 keep their logits, 3 and 4 change; change one source token and all change."""
    torch.manual_seed(0)
    model = GNMT.build_model(TINY).eval()  # no dropout: a difference comes from the inputs alone
    tokens, _ = tiny_batch(samples=2)
    changed_target, changed_source = tokens.clone(), tokens.clone()
    changed_target[:, TINY["source_length"] + 3] = (tokens[:, TINY["source_length"] + 3] + 1) % TINY["vocab_size"]
    changed_source[:, 4] = (tokens[:, 4] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        original, after_target, after_source = model(tokens), model(changed_target), model(changed_source)
    moved_by_target = (after_target - original).abs().amax(dim=(0, 2))  # the largest change at each position
    moved_by_source = (after_source - original).abs().amax(dim=(0, 2))
    assert moved_by_target[:3].eq(0).all() and (moved_by_target[3:] > 1e-6).all()
    assert (moved_by_source > 1e-6).all()  # through the attention, at every position


def test_the_layers_are_wired_as_the_readme_says():
    """Residual connections from the 3rd layer on, in the encoder and the decoder; the same attention context
    concatenated with the input of every decoder layer after the 1st; each LSTM's input and output, seen by hooks."""
    model = GNMT.build_model(TINY).eval()  # no dropout: a layer's input is the output below it, exactly
    seen: dict[nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}
    for lstm in (module for module in model.modules() if isinstance(module, nn.LSTM)):
        lstm.register_forward_hook(lambda module, inputs, outputs: seen.update({module: (inputs[0], outputs[0])}))
    with torch.no_grad():
        model(tiny_batch(samples=2)[0])
    width = TINY["width"]
    encoder = [seen[lstm] for lstm in (model.encoder.bidirectional, *model.encoder.unidirectional)]
    assert torch.equal(encoder[1][0], encoder[0][1])  # the 2nd layer reads the 1st's two directions as they are
    assert torch.equal(encoder[2][0], encoder[1][1])  # no residual around the 2nd
    assert torch.allclose(encoder[3][0], encoder[2][1] + encoder[2][0])  # the 3rd adds its input to its output
    decoder = [seen[lstm] for lstm in (model.decoder.attending, *model.decoder.with_context)]
    below, context = zip(*((inputs[..., :width], inputs[..., width:]) for inputs, _ in decoder[1:]))
    assert all(torch.equal(each, context[0]) for each in context)  # one context, computed once, fed to each layer
    assert torch.equal(below[0], decoder[0][1]) and torch.equal(below[1], decoder[1][1])
    assert torch.allclose(below[2], decoder[2][1] + below[1])  # the 3rd decoder layer's residual


def test_a_tiny_gnmt_learns_a_batch_at_the_readme_learning_rate():
    torch.manual_seed(0)
    model = GNMT.build_model(TINY)  # training mode: dropout 0.2 as in the README
    optimizer = GNMT.build_optimizer(model, TINY)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["lr"] == 2e-3
    loss_function = GNMT.build_loss()
    tokens, labels = tiny_batch()
    losses = []
    for _ in range(30):
        loss = loss_function(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]  # from ln 16 = 2.77 to about 1.05


def test_the_workload_declares_what_the_engine_and_the_data_need():
    defaults = GNMT.defaults
    assert (defaults["batch_size"], defaults["epochs"], defaults["dropout"]) == (128, 6, 0.2)
    assert (defaults["source_length"], defaults["target_length"], defaults["vocab_size"]) == (50, 50, 32_000)
    assert not GNMT.in_suites and GNMT.seed is None and GNMT.published is None
    assert GNMT.tokens_per_sample(defaults) == 100  # NVIDIA's meter: source tokens plus the decoder's
    assert GNMT.data_request({**defaults, "target_length": 30}) == {
        "vocab_size": 32_000,
        "sequence_length": 80,
        "task": "translation",
        "target_length": 30,
    }


@pytest.mark.parametrize(
    ("size", "said"),
    [
        ({"layers": 10**6}, "gnmt: layers=1000000 is above its bound of 16"),
        ({"width": 10**6}, "gnmt: width=1000000 is above its bound of 8,192"),
        ({"source_length": 10**9}, "gnmt: source_length=1000000000 is above its bound of 1,024"),
        ({"target_length": 10**9}, "gnmt: target_length=1000000000 is above its bound of 1,024"),
        ({"vocab_size": 10**12}, "gnmt: vocab_size=1000000000000 is above its bound of 262,144"),
    ],
    ids=["layers", "width", "source", "target", "vocabulary"],
)
def test_absurd_sizes_are_refused_before_anything_is_built(size, said):
    with pytest.raises(ModelTooLarge, match=said):
        GNMT.parameter_count({**GNMT.defaults, **size})


@pytest.mark.parametrize(
    ("size", "said"),
    [
        ({"layers": 1}, "gnmt: layers must be at least 2, got 1"),
        ({"width": 0}, "gnmt: width must be at least 1, got 0"),
        ({"target_length": 0}, "gnmt: target_length must be at least 1, got 0"),
        ({"vocab_size": 1}, "gnmt: vocab_size must be at least 2, got 1"),
        ({"dropout": 1.0}, "gnmt: dropout is a probability below 1, got 1.0"),
    ],
    ids=["layers", "width", "target", "vocabulary", "dropout"],
)
def test_sizes_too_small_for_a_gnmt_are_refused_in_one_line(size, said):
    with pytest.raises(ValueError, match=said):
        GNMT.build_model({**TINY, **size})


def test_a_sample_without_target_tokens_is_refused():
    with pytest.raises(ValueError, match="gnmt takes 7 source tokens then the target's, got 7 tokens a sample"):
        GNMT.build_model(TINY)(torch.zeros(2, 7, dtype=torch.long))
