"""Text classification data as token arrays: words, their vocabulary and ids, a folder of your own texts, or a synthetic stand-in.

A text becomes words (`tokenize`), its words become ids in a vocabulary of the training split's most frequent
words (`build_vocabulary`), and the ids one fixed-length row (`encode`), cut and padded as Keras' `pad_sequences`
does by default. Every source comes back as a `TokenDataset` of int64 arrays, whatever its size.

The IMDB reviews are read in data/imdb.py, with these words and this encoding.

    python -c "from devicebench.data.text import synthetic_text as s; print(s(vocab_size=20000, sequence_length=200))"
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from devicebench.data.arrays import DataSource
from devicebench.data.formats import DataFormatError
from devicebench.data.sources import dataset_spec
from devicebench.files import expanded

PAD, UNKNOWN = "<pad>", "<unk>"
RESERVED_WORDS = (PAD, UNKNOWN)  # ids 0 and 1 of every vocabulary; the tokenizer never makes a word with "<"
UNKNOWN_ID = RESERVED_WORDS.index(UNKNOWN)
MIN_VOCAB_SIZE = len(RESERVED_WORDS) + 1  # padding, unknown and at least one word

HTML_TAG = re.compile(r"</?[a-z][^<>]*>")  # "<br />", IMDB's line break; "<3" and "a < b" are not tags
WORD = re.compile(r"(?:[^\W_]|')+")  # letters and digits of any script, and apostrophes: "didn't", "café", "1990's"


TEXT_FOLDER_LAYOUT = (
    "a text folder is laid out as DIR/train/<label>/*.txt and DIR/test/<label>/*.txt, one UTF-8 text per file"
)

# Synthetic reviews: a Zipf-like background of common and rare words, with a few words that give the class away.
SENTIMENT_WORDS_PER_CLASS = 25  # ids a class prefers, as "great" or "awful" mark a review; no two classes share one
SENTIMENT_WORD_FRACTION = 0.05  # of a review's words drawn from its class's own ids; the rest from the background
# Review lengths in words: log-normal with median 174 and mean 230, roughly the lengths of IMDB's reviews, so that
# about half of the rows of 200 tokens are padded in front, as real ones are.
REVIEW_WORDS_MEDIAN = 174
REVIEW_WORDS_SIGMA = 0.75  # of the natural logarithm of the length
REVIEW_WORDS_MIN = 10  # the shortest synthetic review, in words


@dataclass(frozen=True, eq=False)
class TokenDataset:
    """A whole dataset of token ids in host memory: texts to classify, or sequences with a label at each of several
    positions (data/sequences.py).

    Each row holds a text's last `sequence_length` token ids, padded at the front with 0 (`<pad>`); a word not in
    the vocabulary is 1 (`<unk>`). Labels are int64 class indices: one per text (N,), or (N, positions) for a
    sequence task, whose classes (tokens, positions) have no names.
    """

    name: str  # "imdb", or the name of your text folder
    source: DataSource  # "real" or "synthetic": shown in every table and stored in every result
    train_tokens: np.ndarray  # int64, (N, sequence_length)
    train_labels: np.ndarray  # int64, (N,), or (N, positions) for a sequence task
    test_tokens: np.ndarray  # int64, (M, sequence_length)
    test_labels: np.ndarray  # int64, (M,) or (M, positions)
    num_classes: int  # the classes one label takes
    class_names: tuple[str, ...]  # index -> name; empty for a sequence task's labels
    vocabulary: tuple[str, ...]  # token id -> word; "<pad>" and "<unk>" first
    origin: str = ""  # where the texts came from: a file path, or the generator and its seed
    fallback_reason: str | None = None  # why "auto" gave synthetic data instead of real; None when it did not

    def __post_init__(self) -> None:
        if self.vocabulary[: len(RESERVED_WORDS)] != RESERVED_WORDS:
            raise ValueError(f"{self.name}: the vocabulary must start with {RESERVED_WORDS}, got {self.vocabulary[:2]}")
        sequence_labels = self.train_labels.ndim == 2
        if len(self.class_names) != (0 if sequence_labels else self.num_classes):
            raise ValueError(
                f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes"
                + ("; a sequence task's labels (tokens, positions) have none" if sequence_labels else "")
            )
        for split, tokens, labels in (
            ("train", self.train_tokens, self.train_labels),
            ("test", self.test_tokens, self.test_labels),
        ):
            if tokens.dtype != np.int64 or tokens.ndim != 2:
                raise ValueError(f"{self.name} {split} tokens must be int64 (N, L), got {tokens.dtype} {tokens.shape}")
            expected = (len(tokens), *self.train_labels.shape[1:])  # the test split's positions are the train's
            if labels.dtype != np.int64 or labels.shape != expected or labels.ndim > 2:
                raise ValueError(f"{self.name} {split}: {len(tokens)} texts but labels {labels.dtype} {labels.shape}")
            # Checked here because an id out of range fails deep inside an Embedding (on CUDA, as a device assert).
            limits = (("token ids", tokens, len(self.vocabulary)), ("labels", labels, self.num_classes))
            for what, values, limit in limits:
                if values.size and (values.min() < 0 or values.max() >= limit):
                    raise ValueError(
                        f"{self.name} {split} {what} span {values.min()}..{values.max()}, outside 0..{limit - 1}"
                    )
        if self.train_tokens.shape[1] != self.test_tokens.shape[1]:
            lengths = self.train_tokens.shape[1], self.test_tokens.shape[1]
            raise ValueError(f"{self.name}: train rows hold {lengths[0]} tokens, test rows {lengths[1]}")

    @property
    def sequence_length(self) -> int:
        return self.train_tokens.shape[1]

    @property
    def vocab_size(self) -> int:
        """Entries of the vocabulary, "<pad>" and "<unk>" included: the size of an Embedding that takes these ids."""
        return len(self.vocabulary)

    def __repr__(self) -> str:
        return (
            f"TokenDataset({self.name!r}, source={self.source!r}, train={len(self.train_labels)}, "
            f"test={len(self.test_labels)}, sequence_length={self.sequence_length}, vocab_size={self.vocab_size}, "
            f"classes={self.num_classes}"
            + (f", fallback_reason={self.fallback_reason!r})" if self.fallback_reason else ")")
        )


# ---------------------------------------------------------------------------------------------------------------
# Words, vocabulary, token ids
# ---------------------------------------------------------------------------------------------------------------


def tokenize(text: str) -> list[str]:
    """The lower-cased words of `text`, in order.

    HTML tags (IMDB's reviews break lines with "<br />") count as spaces. A word is a run of letters, digits and
    apostrophes, so "didn't" and "1990's" stay whole while punctuation, "_" and other symbols split words;
    apostrophes at a word's ends are quotes and are dropped ("'hello'" -> "hello").
    """
    words = WORD.findall(HTML_TAG.sub(" ", text.lower()))
    return [stripped for word in words if (stripped := word.strip("'"))]


def build_vocabulary(texts: Iterable[str], size: int) -> tuple[str, ...]:
    """ "<pad>", "<unk>", then the `size - 2` most frequent words of `texts`, most frequent first and ties in
    alphabetical order, so the same texts always give the same ids. Shorter when the texts have fewer words."""
    return _vocabulary_from_tokens((tokenize(text) for text in texts), size)


def encode(texts: Iterable[str], vocabulary: Sequence[str], sequence_length: int) -> np.ndarray:
    """Token ids int64 (len(texts), sequence_length) of `texts` in `vocabulary`; a word not in it becomes 1."""
    return _encode_tokens([tokenize(text) for text in texts], vocabulary, sequence_length)


def _vocabulary_from_tokens(token_lists: Iterable[list[str]], size: int) -> tuple[str, ...]:
    check_vocab_size(size)
    counts: Counter[str] = Counter()
    for tokens in token_lists:
        counts.update(tokens)
    most_frequent = sorted(counts.items(), key=lambda word_and_count: (-word_and_count[1], word_and_count[0]))
    return RESERVED_WORDS + tuple(word for word, _ in most_frequent[: size - len(RESERVED_WORDS)])


def _encode_tokens(token_lists: Sequence[list[str]], vocabulary: Sequence[str], sequence_length: int) -> np.ndarray:
    check_sequence_length(sequence_length)
    word_ids = {word: index for index, word in enumerate(vocabulary)}
    rows = np.zeros((len(token_lists), sequence_length), dtype=np.int64)  # 0 is "<pad>"
    for row, tokens in zip(rows, token_lists):
        # Keras' pad_sequences defaults, which its IMDB examples use: truncating="pre" keeps a long text's LAST
        # tokens, padding="pre" puts the zeros in front of a short one.
        ids = [word_ids.get(word, UNKNOWN_ID) for word in tokens[-sequence_length:]]
        row[sequence_length - len(ids) :] = ids
    return rows


def check_vocab_size(size: int) -> None:
    """A vocabulary holds padding and unknown before any word (also the text models' check on --set vocab_size)."""
    if size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB_SIZE} entries ({PAD}, {UNKNOWN}, a word), got {size}")


def check_sequence_length(sequence_length: int) -> None:
    if sequence_length < 1:
        raise ValueError(f"sequence_length must be at least 1 token, got {sequence_length}")


def encode_splits(
    name: str,
    class_names: tuple[str, ...],
    train_paths_by_label: list[list[Path]],
    test_paths_by_label: list[list[Path]],
    *,
    vocab_size: int,
    sequence_length: int,
    origin: str,
) -> TokenDataset:
    """Read both splits' files, build the vocabulary from the train split alone, and encode both splits with it."""
    train_texts, train_labels = _read_labelled_texts(train_paths_by_label)
    test_texts, test_labels = _read_labelled_texts(test_paths_by_label)
    train_token_lists = [tokenize(text) for text in train_texts]
    vocabulary = _vocabulary_from_tokens(train_token_lists, vocab_size)
    return TokenDataset(
        name=name,
        source="real",
        train_tokens=_encode_tokens(train_token_lists, vocabulary, sequence_length),
        train_labels=train_labels,
        test_tokens=_encode_tokens([tokenize(text) for text in test_texts], vocabulary, sequence_length),
        test_labels=test_labels,
        num_classes=len(class_names),
        class_names=class_names,
        vocabulary=vocabulary,
        origin=origin,
    )


def _read_labelled_texts(paths_by_label: list[list[Path]]) -> tuple[list[str], np.ndarray]:
    """The texts of the files, label by label in the order given, and their labels (the index in the list)."""
    # errors="replace": a stray byte in one review should cost one character, not the whole dataset
    texts = [path.read_text(encoding="utf-8", errors="replace") for paths in paths_by_label for path in paths]
    counts = [len(paths) for paths in paths_by_label]
    return texts, np.repeat(np.arange(len(paths_by_label), dtype=np.int64), counts)


# ---------------------------------------------------------------------------------------------------------------
# Your own texts: DIR/train/<label>/*.txt and DIR/test/<label>/*.txt
# ---------------------------------------------------------------------------------------------------------------


def is_text_folder(directory: str | Path) -> bool:
    """Whether `directory` has train/<label>/ folders holding .txt files, so is a text folder, not a cache root."""
    train_folder = Path(directory) / "train"
    return train_folder.is_dir() and any(_text_files(folder) for folder in _label_folders(train_folder))


def read_text_folder(directory: str | Path, *, vocab_size: int, sequence_length: int) -> TokenDataset:
    """Your texts as token ids: labels are the train split's folders in alphabetical order, texts within a label in
    file-name order, and the vocabulary comes from the train split."""
    directory = expanded(directory, "the data folder")
    check_vocab_size(vocab_size)
    check_sequence_length(sequence_length)
    split_folders = [directory / split for split in ("train", "test")]
    for folder in split_folders:
        if not folder.is_dir():
            raise DataFormatError(f"{directory}: no {folder.name}/ folder; {TEXT_FOLDER_LAYOUT}")
    train_folder, test_folder = split_folders
    class_names = tuple(folder.name for folder in _label_folders(train_folder))
    if not class_names:
        raise DataFormatError(f"{train_folder}: no label folders; {TEXT_FOLDER_LAYOUT}")
    unknown = sorted({folder.name for folder in _label_folders(test_folder)} - set(class_names))
    if unknown:
        raise DataFormatError(
            f"{test_folder}: label folder(s) {', '.join(map(repr, unknown))} not in {train_folder}, whose labels are "
            f"{', '.join(map(repr, class_names))}; the test split's labels must be among the train split's"
        )

    train_paths, test_paths = ([_text_files(folder / name) for name in class_names] for folder in split_folders)
    empty = [name for name, paths in zip(class_names, train_paths, strict=True) if not paths]
    if empty:
        raise DataFormatError(
            f"{train_folder}: no .txt files in label folder(s) {', '.join(map(repr, empty))}; every label needs "
            f"training texts; {TEXT_FOLDER_LAYOUT}"
        )
    if not any(test_paths):
        raise DataFormatError(f"{test_folder}: no .txt files in its label folders; {TEXT_FOLDER_LAYOUT}")

    text_counts = [sum(map(len, paths)) for paths in (train_paths, test_paths)]
    return encode_splits(
        directory.resolve().name,
        class_names,
        train_paths,
        test_paths,
        vocab_size=vocab_size,
        sequence_length=sequence_length,
        origin=(
            f"{directory} (text folder: {text_counts[0]} train, {text_counts[1]} test texts, {len(class_names)} labels)"
        ),
    )


def _label_folders(split_folder: Path) -> list[Path]:
    return sorted(entry for entry in split_folder.iterdir() if entry.is_dir() and not entry.name.startswith("."))


def _text_files(label_folder: Path) -> list[Path]:
    """The .txt files right inside `label_folder`, hidden ones left out, in name order; none when it is absent."""
    if not label_folder.is_dir():
        return []
    return sorted(
        entry
        for entry in label_folder.iterdir()
        if entry.suffix.lower() == ".txt" and not entry.name.startswith(".") and entry.is_file()
    )


# ---------------------------------------------------------------------------------------------------------------
# Synthetic reviews
# ---------------------------------------------------------------------------------------------------------------


def synthetic_text(
    name: str = "imdb",
    *,
    seed: int = 0,
    vocab_size: int,
    sequence_length: int,
    train_size: int | None = None,
    test_size: int | None = None,
) -> TokenDataset:
    """A deterministic synthetic stand-in for text dataset `name`: its classes and split sizes (unless given),
    token rows shaped and padded like encoded reviews, and words that tell the classes apart."""
    spec = dataset_spec(name)
    train_size = spec.train_size if train_size is None else train_size
    test_size = spec.test_size if test_size is None else test_size
    if train_size < 1 or test_size < 1:
        raise ValueError(f"synthetic {name}: sizes must be at least 1, got train={train_size} test={test_size}")
    check_sequence_length(sequence_length)
    word_count = vocab_size - len(RESERVED_WORDS)
    if word_count < spec.num_classes:
        raise ValueError(
            f"synthetic {name}: vocab_size {vocab_size} leaves fewer words than its {spec.num_classes} classes "
            f"(besides {PAD} and {UNKNOWN})"
        )

    # Independent streams, so the test split does not change when only train_size does.
    seeds = np.random.SeedSequence(seed).spawn(3)
    vocabulary_rng, train_rng, test_rng = (np.random.default_rng(child_seed) for child_seed in seeds)
    words_per_class = min(SENTIMENT_WORDS_PER_CLASS, word_count // spec.num_classes)
    sentiment_ids = vocabulary_rng.choice(
        np.arange(len(RESERVED_WORDS), vocab_size), size=(spec.num_classes, words_per_class), replace=False
    )
    train_tokens, train_labels = _synthetic_reviews(sentiment_ids, vocab_size, sequence_length, train_size, train_rng)
    test_tokens, test_labels = _synthetic_reviews(sentiment_ids, vocab_size, sequence_length, test_size, test_rng)
    return TokenDataset(
        name=spec.name,
        source="synthetic",
        train_tokens=train_tokens,
        train_labels=train_labels,
        test_tokens=test_tokens,
        test_labels=test_labels,
        num_classes=spec.num_classes,
        class_names=spec.class_names or tuple(str(label) for label in range(spec.num_classes)),
        vocabulary=RESERVED_WORDS + tuple(f"w{index}" for index in range(len(RESERVED_WORDS), vocab_size)),
        origin=(
            f"synthetic: Zipf-like words over {word_count} ids, {SENTIMENT_WORD_FRACTION:.0%} of them from "
            f"{words_per_class} ids of the review's class, log-normal lengths around {REVIEW_WORDS_MEDIAN} words, "
            f"numpy SeedSequence({seed})"
        ),
    )


def _synthetic_reviews(
    sentiment_ids: np.ndarray, vocab_size: int, sequence_length: int, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """`count` encoded reviews with balanced labels (class counts differ by at most one), shuffled."""
    num_classes, words_per_class = sentiment_ids.shape
    labels = rng.permutation(np.arange(count) % num_classes).astype(np.int64)
    tokens = zipf_like_ids(rng, (count, sequence_length), len(RESERVED_WORDS), vocab_size)
    rows, columns = np.nonzero(rng.random((count, sequence_length)) < SENTIMENT_WORD_FRACTION)
    tokens[rows, columns] = sentiment_ids[labels[rows], rng.integers(0, words_per_class, size=len(rows))]
    lengths = rng.lognormal(np.log(REVIEW_WORDS_MEDIAN), REVIEW_WORDS_SIGMA, size=count)
    lengths = np.clip(lengths.round(), REVIEW_WORDS_MIN, sequence_length)
    tokens[np.arange(sequence_length) < (sequence_length - lengths)[:, np.newaxis]] = 0  # pre-padding, as encode does
    return tokens, labels


def zipf_like_ids(rng: np.random.Generator, shape: tuple[int, ...], low: int, high: int) -> np.ndarray:
    """int64 ids in [low, high) drawn as words of a text are: low ids common, high ones rare.

    Rank floor(R ** u), u uniform in [0, 1), falls on rank k with probability log(1 + 1/k) / log R, about 1/k as
    Zipf's law has it; rank k is id low + k - 1, so low ids are the common words, as in a real vocabulary."""
    ranks_limit = high - low + 1  # ranks 1..high - low
    ids = np.power(float(ranks_limit), rng.random(shape)).astype(np.int64)
    ids += low - 1
    return ids
