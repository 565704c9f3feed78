"""Synthetic token sequences for the language models: a stand-in for data devicebench cannot tokenize.

SQuAD and OpenWebText become token ids only through a tokenizer's vocabulary (BERT's WordPiece, GPT-2's byte-pair
encoding) that devicebench does not ship, so their runs train on these, which say so wherever they are shown. A
workload asks for them with `vocab_size`, `sequence_length` and a `task`:
- "spans" (question answering): inputs (N, L) token ids, targets (N, 2) the answer's first and last positions;
  the answer's tokens come from a small set of ids no other token uses, so where the answer is can be learnt.
- "next-token" (language modelling): inputs (N, L), targets (N, L) the tokens that follow, from a seeded Markov
  chain: half the time a token's fixed successor, otherwise a Zipf-like draw, so the loss falls as it is learnt.
- "translation" (with `target_length` Lt): inputs (N, L) the L - Lt source tokens followed by the target shifted
  right (a start token first), targets (N, Lt) the target: a seeded word-by-word dictionary of the source.
At most MOST_SEQUENCES sequences and MOST_TOKENS tokens a split stand in for the real sets, whatever their size.

    python -c "from devicebench.data.sequences import synthetic_sequences as s; print(s('squad', vocab_size=30522, sequence_length=384, task='spans'))"
"""

from __future__ import annotations

import numpy as np

from devicebench.data.sources import dataset_spec
from devicebench.data.text import (
    RESERVED_WORDS,
    UNKNOWN_ID,
    TokenDataset,
    check_sequence_length,
    zipf_like_ids,
)

TASKS = ("spans", "next-token", "translation")
START = "<s>"  # the first token of a translation's decoder input, id 2
SEQUENCE_WORDS = (*RESERVED_WORDS, START)  # ids 0, 1, 2 of every synthetic vocabulary; words follow
FIRST_WORD_ID = len(SEQUENCE_WORDS)
MIN_VOCAB_SIZE = FIRST_WORD_ID + 2  # the reserved ids and two words: a chain or a dictionary needs a choice
# A laptop's share: 4,096 training sequences (512 to test) at most, and no more tokens a split than 2^22 (32 MiB of
# int64 inputs, as much again of next-token targets): a long sequence takes fewer of them
MOST_SEQUENCES = 4_096
TEST_SHARE = 8  # the test split: an eighth of the training split's caps
MOST_TOKENS = 2**22
FOLLOW_PROBABILITY = 0.5  # next-token: how often a token is followed by its own successor
MOST_ANSWER_TOKENS = 30  # spans: an answer's longest, BERT's max_answer_length for SQuAD
ANSWER_WORDS = 64  # spans: ids that only answers use (fewer when the vocabulary is small)


def check_sequence_request(vocab_size: int, sequence_length: int, task: str, target_length: int | None = None) -> None:
    """ValueError naming what cannot be made: an unknown task, too small a vocabulary, lengths that do not fit."""
    if task not in TASKS:
        raise ValueError(f"unknown sequence task {task!r}; known: {', '.join(TASKS)}")
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be at least {MIN_VOCAB_SIZE} ({', '.join(SEQUENCE_WORDS)} and two words), "
            f"got {vocab_size}"
        )
    check_sequence_length(sequence_length)
    if (task == "translation") != (target_length is not None):
        raise ValueError("target_length goes with the translation task, and only with it")
    if task == "translation" and target_length is not None and not 1 <= target_length < sequence_length:
        raise ValueError(
            f"target_length must leave the source at least one of the {sequence_length} tokens, got {target_length}"
        )


def target_shape(sequence_length: int, task: str, target_length: int | None = None) -> tuple[int]:
    """The shape of one sample's targets: its answer's 2 ends, a next token at each position, or the target's."""
    return {"spans": (2,), "next-token": (sequence_length,), "translation": (target_length or 0,)}[task]


def synthetic_sequences(
    name: str,
    *,
    seed: int = 0,
    vocab_size: int,
    sequence_length: int,
    task: str,
    target_length: int | None = None,
    train_size: int | None = None,
    test_size: int | None = None,
) -> TokenDataset:
    """A deterministic synthetic stand-in for sequence dataset `name`, for `task` (see the module's docstring); its
    sizes are the real splits' up to the caps, unless given."""
    spec = dataset_spec(name)
    check_sequence_request(vocab_size, sequence_length, task, target_length)
    most = max(1, min(MOST_SEQUENCES, MOST_TOKENS // sequence_length))
    train_size = min(spec.train_size, most) if train_size is None else train_size
    test_size = min(spec.test_size, max(1, most // TEST_SHARE)) if test_size is None else test_size
    if train_size < 1 or test_size < 1:
        raise ValueError(f"synthetic {name}: sizes must be at least 1, got train={train_size} test={test_size}")

    # The structure (successors, answer words, dictionary) is shared by the splits; each split draws from its own
    # stream, so the test split does not change when only train_size does.
    seeds = np.random.SeedSequence(seed).spawn(3)
    structure_rng, train_rng, test_rng = (np.random.default_rng(child_seed) for child_seed in seeds)
    make, described = _TASK_MAKERS[task]
    structure = _structure(structure_rng, task, vocab_size)
    train_tokens, train_labels = make(train_rng, structure, train_size, vocab_size, sequence_length, target_length)
    test_tokens, test_labels = make(test_rng, structure, test_size, vocab_size, sequence_length, target_length)
    return TokenDataset(
        name=spec.name,
        source="synthetic",
        train_tokens=train_tokens,
        train_labels=train_labels,
        test_tokens=test_tokens,
        test_labels=test_labels,
        num_classes=sequence_length if task == "spans" else vocab_size,  # positions, or tokens
        class_names=(),
        vocabulary=SEQUENCE_WORDS + tuple(f"w{index}" for index in range(FIRST_WORD_ID, vocab_size)),
        origin=(
            f"synthetic: {train_size:,} of {spec.title}'s {spec.train_size:,} training and {test_size:,} of its "
            f"{spec.test_size:,} test sequences stand in, {described}, numpy SeedSequence({seed})"
        ),
    )


def _structure(rng: np.random.Generator, task: str, vocab_size: int) -> np.ndarray:
    """What makes a task learnable, drawn once: each id's successor (next-token), the ids only answers use (spans),
    or each id's translation (translation)."""
    if task == "spans":
        words = vocab_size - FIRST_WORD_ID
        return rng.choice(np.arange(FIRST_WORD_ID, vocab_size), size=min(ANSWER_WORDS, words // 2), replace=False)
    mapping = np.arange(vocab_size)  # the reserved ids map to themselves; they are never drawn
    mapping[FIRST_WORD_ID:] = (
        rng.permutation(np.arange(FIRST_WORD_ID, vocab_size))
        if task == "translation"
        else (rng.integers(FIRST_WORD_ID, vocab_size, size=vocab_size - FIRST_WORD_ID))
    )
    return mapping


def _words(rng: np.random.Generator, shape: tuple[int, ...], vocab_size: int) -> np.ndarray:
    return zipf_like_ids(rng, shape, FIRST_WORD_ID, vocab_size)


def _spans(
    rng: np.random.Generator,
    answer_words: np.ndarray,
    count: int,
    vocab_size: int,
    sequence_length: int,
    target_length: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    tokens = _words(rng, (count, sequence_length), vocab_size)
    tokens[np.isin(tokens, answer_words)] = UNKNOWN_ID  # only an answer holds answer words
    lengths = rng.integers(1, min(MOST_ANSWER_TOKENS, sequence_length) + 1, size=count)
    starts = (rng.random(count) * (sequence_length - lengths + 1)).astype(np.int64)  # the answer fits in the row
    positions = np.arange(sequence_length)
    inside = (positions >= starts[:, None]) & (positions < (starts + lengths)[:, None])
    tokens[inside] = rng.choice(answer_words, size=int(inside.sum()))
    return tokens, np.stack([starts, starts + lengths - 1], axis=1)  # first and last positions, both inside


def _next_tokens(
    rng: np.random.Generator,
    successors: np.ndarray,
    count: int,
    vocab_size: int,
    sequence_length: int,
    target_length: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    chain = _words(rng, (count, sequence_length + 1), vocab_size)  # the draws where a token is not followed
    follows = rng.random((count, sequence_length + 1)) < FOLLOW_PROBABILITY
    for position in range(1, sequence_length + 1):  # a step at a time along the chain, every sequence at once
        chain[:, position] = np.where(follows[:, position], successors[chain[:, position - 1]], chain[:, position])
    return np.ascontiguousarray(chain[:, :-1]), np.ascontiguousarray(chain[:, 1:])


def _translations(
    rng: np.random.Generator,
    dictionary: np.ndarray,
    count: int,
    vocab_size: int,
    sequence_length: int,
    target_length: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    assert target_length is not None  # the translation task always has one (synthetic_sequences checks)
    source_length = sequence_length - target_length
    source = _words(rng, (count, source_length), vocab_size)
    target = dictionary[source[:, np.arange(target_length) % source_length]]  # word by word, the source repeated
    start = np.full((count, 1), SEQUENCE_WORDS.index(START), dtype=np.int64)
    return np.concatenate([source, start, target[:, :-1]], axis=1), target


_TASK_MAKERS = {
    "spans": (
        _spans,
        f"Zipf-like words with an answer of 1 to {MOST_ANSWER_TOKENS} tokens from {ANSWER_WORDS} ids "
        "no other token uses",
    ),
    "next-token": (
        _next_tokens,
        f"a Markov chain whose tokens are followed by a fixed successor "
        f"{FOLLOW_PROBABILITY:.0%} of the time, by a Zipf-like draw otherwise",
    ),
    "translation": (_translations, "Zipf-like source words, translated word by word by a fixed dictionary"),
}
