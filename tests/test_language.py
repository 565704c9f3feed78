"""The language reference models (bert-base, bert-large, gpt2-small) and the synthetic sequences they train on."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.data import RealDataUnreadable, expected_source, load_dataset
from devicebench.data.augmentation import Unchanged
from devicebench.data.sequences import (
    ANSWER_WORDS,
    MOST_SEQUENCES,
    MOST_TOKENS,
    SEQUENCE_WORDS,
    synthetic_sequences,
)
from devicebench.data.text import TokenDataset
from devicebench.workloads import ModelTooLarge, get_workload
from devicebench.workloads.outputs import SequenceCrossEntropy

cli = CliRunner()
NAMES = ("bert-base", "bert-large", "gpt2-small")
TINY = {"layers": 2, "width": 64, "heads": 2, "sequence_length": 32}
TINY_SET = tuple(f"{key}={value}" for key, value in TINY.items())


@pytest.fixture
def one_thread():
    """Tiny models on one thread: several threads on a shared 2-core machine took 50 times longer."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(name: str, **changes) -> tuple:
    workload = get_workload(name)
    hyperparameters = {**workload.defaults, **TINY, **changes}
    torch.manual_seed(0)
    return workload, hyperparameters, workload.build_model(hyperparameters)


# --- the models --------------------------------------------------------------------------------------------------


def test_bert_has_the_checkpoints_parameters_less_the_pooler_plus_the_span_head():
    # bert-base-uncased and bert-large-uncased as Hugging Face's BertModel counts them (pooler included):
    # 109,482,240 and 335,141,888. SQuAD fine-tuning drops the pooler (width² + width, unused by a span head)
    # and adds the span head Linear(width, 2).
    for name, checkpoint, width, paper in (
        ("bert-base", 109_482_240, 768, 110e6),
        ("bert-large", 335_141_888, 1_024, 340e6),
    ):
        counted = get_workload(name).parameter_count()
        assert counted == checkpoint - (width * width + width) + (2 * width + 2)
        assert abs(counted - paper) / paper < 0.03  # the paper's rounded "110M" and "340M"


def test_gpt2_small_has_124m_parameters_with_its_output_layer_tied_to_the_token_embedding():
    # 124,439,808 with the tied matrix counted once, as the released checkpoint holds it. The paper's table says
    # "117M": openai/gpt-2's README says its original parameter counts were wrong due to an error, and that small
    # is the model once called 117M.
    workload = get_workload("gpt2-small")
    assert workload.parameter_count() == 124_439_808
    _, _, model = tiny("gpt2-small")
    assert model.head.weight is model.tokens.weight


def test_the_models_are_built_on_the_meta_device_without_memory_in_seconds():
    import time  # the test measures; the package's own code never reads a clock outside engine/timing.py

    started = time.perf_counter()
    for name in NAMES:
        workload = get_workload(name)
        assert workload.parameter_count() > 100_000_000
        with torch.device("meta"):
            model = workload.build_model(workload.defaults)
        assert {parameter.device.type for parameter in model.parameters()} == {"meta"}
    assert time.perf_counter() - started < 20  # seconds: 0.1 s each on a quiet core; building for real takes 10x


def test_forward_shapes_are_span_scores_over_positions_and_next_token_scores_over_the_vocabulary(one_thread):
    tokens = torch.randint(0, 1_000, (3, TINY["sequence_length"]))
    for name in ("bert-base", "bert-large"):
        _, _, model = tiny(name)
        assert model(tokens).shape == (3, 2, 32)  # (N, start and end, positions)
    _, hyperparameters, gpt2 = tiny("gpt2-small")
    assert gpt2(tokens).shape == (3, 32, 50_257)  # (N, positions, vocabulary)


def test_gpt2_attends_only_to_earlier_tokens_and_bert_to_all(one_thread):
    tokens = torch.randint(0, 1_000, (1, 32))
    changed = tokens.clone()
    changed[0, 20] = (tokens[0, 20] + 1) % 1_000
    for name, causal in (("gpt2-small", True), ("bert-base", False)):
        _, _, model = tiny(name)
        model.eval()  # no dropout: the same inputs give the same outputs
        with torch.no_grad():
            before, after = model(tokens), model(changed)
        positions_axis = 1 if causal else 2
        earlier = [slice(None)] * 3
        earlier[positions_axis] = slice(0, 20)
        assert torch.equal(before[tuple(earlier)], after[tuple(earlier)]) == causal, name


def test_initialisation_is_normal_002_with_gpt2s_residual_projections_scaled_down():
    _, _, model = tiny("gpt2-small", width=256, layers=8, heads=4)
    block = model.blocks[0]
    assert block.attention.query_key_value.weight.std().item() == pytest.approx(0.02, rel=0.05)
    for projection in block.residual_projections:
        assert projection.weight.std().item() == pytest.approx(0.02 / math.sqrt(2 * 8), rel=0.05)
    assert block.attention.query_key_value.bias.abs().max().item() == 0
    _, _, bert = tiny("bert-base", width=256, heads=4)
    assert bert.blocks[0].attention.output.weight.std().item() == pytest.approx(0.02, rel=0.05)  # not scaled
    assert bert.embedding_norm.eps == 1e-12 and bert.blocks[0].feed_forward[1].approximate == "none"
    assert model.final_norm.eps == 1e-5 and block.feed_forward[1].approximate == "tanh"


def test_training_settings_are_the_published_ones():
    expected = {  # batch, lr, beta2, weight decay, sequence length
        "bert-base": (12, 3e-5, 0.999, 0.01, 384),  # google-research/bert README, SQuAD 1.1 on one 12 GB GPU
        "bert-large": (4, 3e-5, 0.999, 0.01, 384),  # NVIDIA DeepLearningExamples PyTorch BERT README, FP32
        "gpt2-small": (12, 6e-4, 0.95, 0.1, 1_024),  # nanoGPT config/train_gpt2.py and train.py
    }
    for name, (batch, rate, beta2, decay, length) in expected.items():
        workload, hyperparameters, model = tiny(name)
        optimizer = workload.build_optimizer(model, workload.defaults)
        assert isinstance(optimizer, torch.optim.AdamW)
        assert (workload.defaults["batch_size"], workload.defaults["sequence_length"]) == (batch, length)
        assert (optimizer.defaults["lr"], optimizer.defaults["betas"]) == (rate, (0.9, beta2))
        decayed, undecayed = optimizer.param_groups
        assert decayed["weight_decay"] == decay and undecayed["weight_decay"] == 0.0
        assert all(parameter.dim() >= 2 for parameter in decayed["params"])  # matrices and embeddings only
        assert all(parameter.dim() == 1 for parameter in undecayed["params"])  # biases and layer norms
        assert workload.tokens_per_sample(hyperparameters) == 32 and not workload.in_suites
        assert isinstance(workload.build_loss(), SequenceCrossEntropy) and workload.output == "token_logits"


def test_absurd_sizes_are_refused_before_anything_is_built():
    with pytest.raises(ModelTooLarge, match="layers=100000 is above its bound"):
        get_workload("gpt2-small").parameter_count({**get_workload("gpt2-small").defaults, "layers": 100_000})
    with pytest.raises(ModelTooLarge, match="sequence_length=513 is above its bound of 512"):
        get_workload("bert-base").parameter_count({**get_workload("bert-base").defaults, "sequence_length": 513})
    with pytest.raises(ModelTooLarge, match="sequence_length=1025 is above its bound of 1,024"):
        get_workload("gpt2-small").parameter_count({**get_workload("gpt2-small").defaults, "sequence_length": 1025})
    with pytest.raises(ModelTooLarge, match="19,584,188,418 parameters with width=8192, above the bound"):
        get_workload("bert-large").parameter_count({**get_workload("bert-large").defaults, "width": 8_192})
    with pytest.raises(
        ValueError, match="a width its heads divide into parts of 1 or more: got layers=12 width=768 heads=7"
    ):
        get_workload("bert-base").parameter_count({**get_workload("bert-base").defaults, "heads": 7})
    result = cli.invoke(app, ["run", "bert-base", "--set", "sequence_length=600", "--dry-run"])
    assert result.exit_code == EXIT_USAGE and "at most 512" in result.output


def test_bert_takes_shorter_sequences():
    workload, hyperparameters, model = tiny("bert-base", sequence_length=128)
    inputs, targets = workload.example_batch(hyperparameters)
    assert inputs.shape == (1, 128) and targets.shape == (1, 2)
    assert model(inputs).shape == (1, 2, 128)
    assert workload.data_request(hyperparameters) == {"vocab_size": 30_522, "sequence_length": 128, "task": "spans"}


def test_the_quick_and_seeds_suites_leave_the_language_models_out():
    for suite in ("quick", "seeds"):
        assert not set(NAMES) & {entry.name for entry in RunConfig(suite=suite).selected_workloads()}
    named = RunConfig(workloads=NAMES).selected_workloads()
    assert [entry.name for entry in named] == list(NAMES)


# --- training ----------------------------------------------------------------------------------------------------


def test_tiny_models_train_on_the_cpu_through_run_with_accuracy_over_positions():
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=NAMES,
                devices="cpu",
                data="synthetic",
                epochs=2,
                max_steps=3,
                max_eval_steps=2,
                batch_size=4,
                overrides=TINY_SET,
                threads=1,
            )
        )
    )
    assert [run.status for run in result.runs] == ["ok"] * 3, [run.error for run in result.runs]
    for run in result.runs:
        assert [(epoch.steps, epoch.samples) for epoch in run.epochs] == [(3, 12), (3, 12)]
        assert run.settings.data_source == "synthetic"
        for epoch in run.epochs:
            assert math.isfinite(epoch.train_loss) and math.isfinite(epoch.test_loss)
            assert 0 <= epoch.train_accuracy <= 1 and 0 <= epoch.test_accuracy <= 1


def test_the_loss_falls_on_the_synthetic_next_token_data_below_what_token_frequencies_alone_give(one_thread):
    """The Markov chain is learnable: within 40 steps a tiny GPT-2 predicts next tokens better than the tokens'
    frequencies can (their entropy), so it has learnt which token follows which."""
    workload, hyperparameters, model = tiny("gpt2-small", vocab_size=512, learning_rate=3e-3)
    data = synthetic_sequences("openwebtext", vocab_size=512, sequence_length=32, task="next-token")
    frequencies = np.bincount(data.train_labels.ravel()) / data.train_labels.size
    unigram_entropy = -np.sum(frequencies[frequencies > 0] * np.log(frequencies[frequencies > 0]))  # nats
    optimizer = workload.build_optimizer(model, hyperparameters)
    loss_function = workload.build_loss()
    losses = []
    for step in range(40):
        rows = slice(16 * step, 16 * step + 16)  # fresh sequences every step: it learns the chain, not a batch
        inputs, targets = (torch.from_numpy(array[rows]) for array in (data.train_tokens, data.train_labels))
        loss = loss_function(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(512), rel=0.05)  # a random model: every token about as likely
    assert np.mean(losses[-5:]) < unigram_entropy - 0.3, (unigram_entropy, losses)


# --- the synthetic sequences -------------------------------------------------------------------------------------


def test_spans_are_answers_of_answer_words_inside_the_sequence():
    data = synthetic_sequences(
        "squad", vocab_size=1_000, sequence_length=64, task="spans", train_size=200, test_size=20
    )
    assert data.train_tokens.shape == (200, 64) and data.train_labels.shape == (200, 2)
    assert data.test_labels.shape == (20, 2) and data.num_classes == 64  # the classes are positions
    starts, ends = data.train_labels.T
    assert (starts >= 0).all() and (starts <= ends).all() and (ends < 64).all() and (ends - starts < 30).all()
    positions = np.arange(64)
    inside = (positions >= starts[:, None]) & (positions <= ends[:, None])
    answer_words = np.unique(data.train_tokens[inside])
    assert len(answer_words) <= ANSWER_WORDS and not np.isin(data.train_tokens[~inside], answer_words).any()


def test_next_tokens_are_the_inputs_shifted_by_one():
    data = synthetic_sequences(
        "openwebtext", vocab_size=300, sequence_length=50, task="next-token", train_size=40, test_size=10
    )
    assert data.train_tokens.shape == data.train_labels.shape == (40, 50) and data.num_classes == 300
    assert np.array_equal(data.train_tokens[:, 1:], data.train_labels[:, :-1])
    assert data.train_tokens.min() >= len(SEQUENCE_WORDS)  # words only: no padding, unknown or start token


def test_translations_are_the_source_then_the_shifted_target_and_a_function_of_the_source():
    data = synthetic_sequences(
        "squad", vocab_size=200, sequence_length=30, task="translation", target_length=12, train_size=300, test_size=10
    )
    source, decoder_input = data.train_tokens[:, :18], data.train_tokens[:, 18:]
    assert data.train_tokens.shape == (300, 30) and data.train_labels.shape == (300, 12)
    assert (decoder_input[:, 0] == SEQUENCE_WORDS.index("<s>")).all()
    assert np.array_equal(decoder_input[:, 1:], data.train_labels[:, :-1])
    translations = {}  # one source word always gives the same target word
    for word, translated in zip(source[:, :12].ravel(), data.train_labels.ravel(), strict=True):
        assert translations.setdefault(word, translated) == translated


class WordByWord(torch.nn.Module):
    """A translation model in miniature: each target position scored from the source token at that position."""

    def __init__(self, vocab_size: int, target_length: int) -> None:
        super().__init__()
        self.target_length = target_length
        self.embedding = torch.nn.Embedding(vocab_size, 32)
        self.scores = torch.nn.Linear(32, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.scores(self.embedding(tokens[:, : self.target_length]))  # (N, target positions, vocabulary)


def test_a_translation_workload_meets_the_contract_on_the_synthetic_translations(one_thread):
    """What a GNMT workload rests on: its data request, example batch, outputs, learning and FLOPs count."""
    from devicebench.testing import check_workload
    from devicebench.workloads import Workload

    translation = Workload(
        name="word-by-word",
        seed=None,
        dataset="squad",
        summary="a translation model in miniature",
        build_model=lambda h: WordByWord(h["vocab_size"], h["target_length"]),
        defaults={
            "vocab_size": 64,
            "sequence_length": 20,
            "target_length": 8,
            "batch_size": 16,
            "epochs": 2,
            "learning_rate": 0.05,
        },
        build_loss=SequenceCrossEntropy,
        build_optimizer=lambda model, h: torch.optim.Adam(model.parameters(), 0.05),
        output="token_logits",
        build_preprocessing=lambda h: Unchanged(),
        data_options=lambda h: {
            "vocab_size": h["vocab_size"],
            "sequence_length": h["sequence_length"],
            "task": "translation",
            "target_length": h["target_length"],
        },
    )
    inputs, targets = translation.example_batch(translation.defaults)
    assert inputs.shape == (1, 20) and targets.shape == (1, 8)
    check_workload(translation)


def test_synthetic_sequences_are_seeded_and_capped_for_a_laptop():
    request = {"vocab_size": 50_257, "sequence_length": 1_024, "task": "next-token"}
    first, again = (load_dataset("openwebtext", "synthetic", seed=5, **request) for _ in range(2))
    assert np.array_equal(first.train_tokens, again.train_tokens) and np.array_equal(
        first.test_labels, again.test_labels
    )
    other = load_dataset("openwebtext", "synthetic", seed=6, **request)
    assert not np.array_equal(first.train_tokens, other.train_tokens)
    assert (len(first.train_tokens), len(first.test_tokens)) == (MOST_SEQUENCES, MOST_SEQUENCES // 8)
    arrays = (first.train_tokens, first.train_labels, first.test_tokens, first.test_labels)
    assert sum(array.nbytes for array in arrays) < 200e6  # bytes
    assert "4,096 of OpenWebText's 8,823,810 training" in first.origin
    squad = load_dataset("squad", "synthetic", vocab_size=30_522, sequence_length=384, task="spans")
    assert (len(squad.train_tokens), len(squad.test_tokens)) == (4_096, 512)
    assert "4,096 of SQuAD v1.1's 87,599 training and 512 of its 10,570 test" in squad.origin
    long = synthetic_sequences("openwebtext", vocab_size=100, sequence_length=8_192, task="next-token")
    assert len(long.train_tokens) * 8_192 <= MOST_TOKENS and len(long.train_tokens) == 512


def test_bad_sequence_requests_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="unknown sequence task 'poems'"):
        synthetic_sequences("squad", vocab_size=100, sequence_length=10, task="poems")
    with pytest.raises(ValueError, match="vocab_size must be at least 5"):
        synthetic_sequences("squad", vocab_size=4, sequence_length=10, task="spans")
    with pytest.raises(ValueError, match="target_length must leave the source at least one of the 10 tokens"):
        synthetic_sequences("squad", vocab_size=100, sequence_length=10, task="translation", target_length=10)
    with pytest.raises(ValueError, match="target_length goes with the translation task"):
        synthetic_sequences("squad", vocab_size=100, sequence_length=10, task="spans", target_length=3)


def test_token_datasets_refuse_sequence_labels_that_do_not_fit():
    tokens, labels = np.zeros((4, 8), dtype=np.int64), np.zeros((4, 2), dtype=np.int64)
    fields = {
        "name": "x",
        "source": "synthetic",
        "train_tokens": tokens,
        "test_tokens": tokens[:2],
        "num_classes": 8,
        "vocabulary": SEQUENCE_WORDS,
    }
    TokenDataset(**fields, train_labels=labels, test_labels=labels[:2], class_names=())
    with pytest.raises(ValueError, match=r"x test: 2 texts but labels int64 \(2, 3\)"):
        TokenDataset(**fields, train_labels=labels, test_labels=np.zeros((2, 3), dtype=np.int64), class_names=())
    with pytest.raises(ValueError, match="labels span 0..8, outside 0..7"):
        TokenDataset(
            **fields, train_labels=labels + np.eye(4, 2, dtype=np.int64) * 8, test_labels=labels[:2], class_names=()
        )
    with pytest.raises(ValueError, match="a sequence task's labels .* have none"):
        TokenDataset(**fields, train_labels=labels, test_labels=labels[:2], class_names=tuple("abcdefgh"))


# --- real data ---------------------------------------------------------------------------------------------------


def test_real_squad_and_openwebtext_are_refused_with_what_reading_them_needs():
    with pytest.raises(
        RealDataUnreadable, match="cannot read the real SQuAD v1.1: that needs BERT's uncased WordPiece vocabulary"
    ):
        load_dataset("squad", "real", vocab_size=30_522, sequence_length=384, task="spans")
    auto = load_dataset("openwebtext", "auto", vocab_size=100, sequence_length=16, task="next-token")
    assert auto.source == "synthetic" and "GPT-2's byte-pair encoding" in auto.fallback_reason
    assert expected_source("squad", "auto")[0] == "synthetic"
    assert expected_source("squad", "real")[1].endswith("the run stops")


def test_a_run_on_real_language_data_fails_saying_why_and_the_data_command_says_there_is_nothing_to_fetch():
    result = runner.run(
        planning.plan(
            RunConfig(workloads=("gpt2-small",), devices="cpu", data="real", epochs=1, max_steps=1, overrides=TINY_SET)
        )
    )
    [run] = result.runs
    assert run.status == "failed" and "cannot read the real OpenWebText" in run.error
    listed = cli.invoke(app, ["data", "list"])
    assert "synthetic only" in listed.output
    fetched = cli.invoke(app, ["data", "fetch", "squad"])
    assert fetched.exit_code == EXIT_FAILED_RUN and "nothing to download" in fetched.output
