"""Text data: the tokenizer, vocabulary and Keras-style encoding; a miniature IMDB archive read, cached, served from
a loopback HTTP server and refused when unsafe; your own text folders; and synthetic reviews a model can learn.

    python -m pytest tests/test_data_text.py -q
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import tarfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from devicebench.data.download import RemoteFile, fetch
from devicebench.data.formats import DataFormatError
from devicebench.data.imdb import read_imdb
from devicebench.data.text import (
    TokenDataset,
    build_vocabulary,
    encode,
    is_text_folder,
    read_text_folder,
    synthetic_text,
    tokenize,
)

# ---------------------------------------------------------------------------------------------------------------
# Words, vocabulary, token ids
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("I didn't like it.<br /><br />The END.", ["i", "didn't", "like", "it", "the", "end"]),
        ("'Quoted' words, 'til the 1990's -- 10/10!!", ["quoted", "words", "til", "the", "1990's", "10", "10"]),
        ("A<b>BOLD</b>move<BR/>ok", ["a", "bold", "move", "ok"]),
        ("I <3 it, 5 > 2", ["i", "3", "it", "5", "2"]),  # "<3 it, 5 >" is no tag
        ("Café naïve snake_case x-ray", ["café", "naïve", "snake", "case", "x", "ray"]),
        ("  ... '' --- ", []),
    ],
)
def test_tokenize_lowercases_drops_tags_and_punctuation_and_keeps_inner_apostrophes(text, words):
    assert tokenize(text) == words


def test_vocabulary_puts_pad_and_unknown_first_then_words_by_frequency_with_ties_alphabetical():
    texts = ["b a c", "A b.", "a d", "e"]  # a: 3, b: 2, c, d, e: 1 each
    assert build_vocabulary(texts, 5) == ("<pad>", "<unk>", "a", "b", "c")
    assert build_vocabulary(reversed(texts), 6) == ("<pad>", "<unk>", "a", "b", "c", "d")  # order of texts: no matter
    assert build_vocabulary(texts, 100) == ("<pad>", "<unk>", "a", "b", "c", "d", "e")  # fewer words than asked for


@pytest.mark.parametrize("size", [2, 0, -1])
def test_vocabulary_below_three_entries_is_refused(size):
    with pytest.raises(ValueError, match="at least 3 entries"):
        build_vocabulary(["a b"], size)


def test_encode_pads_and_truncates_at_the_front_as_keras_pad_sequences_does_and_unknown_words_are_one():
    vocabulary = ("<pad>", "<unk>", "a", "b", "c")
    texts = ["a b zebra", "a b c a b c", "c b a c", "", "zebra"]
    np.testing.assert_array_equal(
        encode(texts, vocabulary, 4),
        np.array(
            [
                [0, 2, 3, 1],  # shorter: zeros in front
                [4, 2, 3, 4],  # longer: the last 4 kept (a b | c a b c)
                [4, 3, 2, 4],  # exactly 4: as it is
                [0, 0, 0, 0],
                [0, 0, 0, 1],
            ]
        ),
    )
    assert encode(texts, vocabulary, 4).dtype == np.int64
    assert encode([], vocabulary, 3).shape == (0, 3)


def test_encode_refuses_a_sequence_length_below_one():
    with pytest.raises(ValueError, match="sequence_length must be at least 1"):
        encode(["a"], ("<pad>", "<unk>", "a"), 0)


# ---------------------------------------------------------------------------------------------------------------
# TokenDataset
# ---------------------------------------------------------------------------------------------------------------


def small_token_dataset() -> TokenDataset:
    return TokenDataset(
        name="tiny",
        source="real",
        train_tokens=np.array([[0, 2], [3, 1]], dtype=np.int64),
        train_labels=np.array([0, 1], dtype=np.int64),
        test_tokens=np.array([[2, 3]], dtype=np.int64),
        test_labels=np.array([1], dtype=np.int64),
        num_classes=2,
        class_names=("no", "yes"),
        vocabulary=("<pad>", "<unk>", "x", "y"),
    )


def test_token_dataset_knows_its_sizes_and_has_a_short_repr():
    dataset = small_token_dataset()
    assert (dataset.sequence_length, dataset.vocab_size) == (2, 4)
    assert repr(dataset) == (
        "TokenDataset('tiny', source='real', train=2, test=1, sequence_length=2, vocab_size=4, classes=2)"
    )
    assert "fallback_reason='offline'" in repr(dataclasses.replace(dataset, fallback_reason="offline"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"train_tokens": np.zeros((2, 2), dtype=np.int32)}, "train tokens must be int64"),
        ({"test_tokens": np.zeros((1, 3), dtype=np.int64)}, "train rows hold 2 tokens, test rows 3"),
        ({"train_tokens": np.zeros(2, dtype=np.int64)}, r"train tokens must be int64 \(N, L\), got int64 \(2,\)"),
        ({"train_labels": np.array([0], dtype=np.int64)}, "2 texts but labels"),
        ({"test_labels": np.array([1.0])}, "1 texts but labels float64"),
        ({"train_tokens": np.array([[0, 4], [0, 0]], dtype=np.int64)}, r"token ids span 0..4, outside 0..3"),
        ({"test_labels": np.array([2], dtype=np.int64)}, r"labels span 2..2, outside 0..1"),
        ({"vocabulary": ("<unk>", "<pad>", "x", "y")}, "must start with"),
        ({"class_names": ("only",)}, "1 class names for 2 classes"),
    ],
)
def test_token_dataset_refuses_wrong_dtypes_shapes_and_ids(changes, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(small_token_dataset(), **changes)


# ---------------------------------------------------------------------------------------------------------------
# IMDB: a miniature aclImdb_v1.tar.gz with the real layout
# ---------------------------------------------------------------------------------------------------------------

MINI_IMDB_REVIEWS = {
    # ids 2, 3, 10: numeric order differs from the names' alphabetical order
    "aclImdb/train/neg/10_2.txt": b"Terrible.",
    "aclImdb/train/neg/2_3.txt": b"Boring, boring film.",
    "aclImdb/train/neg/3_1.txt": b"Terrible movie.<br /><br />Awful acting, awful plot.",
    "aclImdb/train/pos/5_9.txt": b"Great film. Great acting.",
    "aclImdb/train/pos/1_10.txt": b"A wonderful, great movie!",
    "aclImdb/test/neg/7_3.txt": b"Simply terrible: a zebra of a movie",  # simply, zebra, of: not in train/{neg,pos}
    "aclImdb/test/pos/4_8.txt": b"Great, great acting \xff",  # not UTF-8: read as U+FFFD, a symbol, so no word
}
MINI_IMDB_OTHER_FILES = {  # in the real archive too, and never read
    "aclImdb/train/unsup/0_0.txt": b"zebra zebra zebra of of simply",
    "aclImdb/imdb.vocab": b"the\nzebra\n",
    "aclImdb/README": b"Large Movie Review Dataset v1.0",
    "aclImdb/train/urls_pos.txt": b"http://www.imdb.com/title/tt0453418/usercomments\n",
    "aclImdb/train/labeledBow.feat": b"0:9 1:1\n",
}
MINI_IMDB_SIZES = {"vocab_size": 100, "sequence_length": 6}
# From train/{neg,pos} only: great 3; acting, awful, boring, film, movie, terrible 2 each; a, plot, wonderful 1 each.
MINI_IMDB_VOCABULARY = (
    "<pad>",
    "<unk>",
    "great",
    "acting",
    "awful",
    "boring",
    "film",
    "movie",
    "terrible",
    "a",
    "plot",
    "wonderful",
)
MINI_IMDB_TRAIN_TOKENS = [
    [0, 0, 0, 5, 5, 6],  # neg 2: boring boring film
    [8, 7, 4, 3, 4, 10],  # neg 3: terrible movie awful acting awful plot
    [0, 0, 0, 0, 0, 8],  # neg 10: terrible
    [0, 0, 9, 11, 2, 7],  # pos 1: a wonderful great movie
    [0, 0, 2, 6, 2, 3],  # pos 5: great film great acting
]
MINI_IMDB_TEST_TOKENS = [
    [8, 9, 1, 1, 9, 7],  # neg 7: (simply) terrible a zebra of a movie, cut to its last 6
    [0, 0, 0, 2, 2, 3],  # pos 4: great great acting
]


@pytest.fixture
def mini_imdb(tmp_path, tar_gz_writer) -> Path:
    """aclImdb_v1.tar.gz in its own data folder: five train and two test reviews, and the files around them."""
    folder = tmp_path / "imdb"
    folder.mkdir()
    return tar_gz_writer(
        folder / "aclImdb_v1.tar.gz", {**MINI_IMDB_REVIEWS, **MINI_IMDB_OTHER_FILES}, folders=("aclImdb",)
    )


def assert_is_the_mini_imdb(dataset: TokenDataset) -> None:
    assert dataset.name == "imdb" and dataset.source == "real" and dataset.class_names == ("neg", "pos")
    assert dataset.vocabulary == MINI_IMDB_VOCABULARY
    np.testing.assert_array_equal(dataset.train_tokens, MINI_IMDB_TRAIN_TOKENS)
    np.testing.assert_array_equal(dataset.train_labels, [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(dataset.test_tokens, MINI_IMDB_TEST_TOKENS)
    np.testing.assert_array_equal(dataset.test_labels, [0, 1])


def test_reviews_are_ordered_by_label_then_id_and_the_vocabulary_comes_from_train_alone(mini_imdb):
    dataset = read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    assert_is_the_mini_imdb(dataset)
    assert dataset.fallback_reason is None
    cache = mini_imdb.parent / "imdb-v100-l6.npz"
    assert str(mini_imdb) in dataset.origin and str(cache) in dataset.origin
    assert sorted(path.name for path in mini_imdb.parent.iterdir()) == ["aclImdb", "aclImdb_v1.tar.gz", cache.name]
    extracted = sorted(path.relative_to(mini_imdb.parent).as_posix() for path in mini_imdb.parent.rglob("*.txt"))
    assert extracted == sorted(MINI_IMDB_REVIEWS)  # train/unsup/, imdb.vocab, README... stay in the archive


def test_second_read_comes_from_the_cache_without_extracting_or_reading_a_review(mini_imdb):
    first = read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    shutil.rmtree(mini_imdb.parent / "aclImdb")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cache it had to ignore would warn
        second = read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    assert not (mini_imdb.parent / "aclImdb").exists()  # a rebuild would have extracted the archive again
    assert_is_the_mini_imdb(second)
    assert second.origin == first.origin
    with np.load(mini_imdb.parent / "imdb-v100-l6.npz", allow_pickle=False) as cached:
        assert cached["vocabulary"].dtype.kind == "U"  # plain unicode, not objects: loads without unpickling


def test_other_sizes_get_their_own_cache(mini_imdb):
    read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    shorter = read_imdb(mini_imdb, vocab_size=5, sequence_length=2)
    assert shorter.vocabulary == MINI_IMDB_VOCABULARY[:5]
    np.testing.assert_array_equal(shorter.test_tokens, [[1, 1], [2, 3]])  # "a movie": not among the 3 words kept
    assert (mini_imdb.parent / "imdb-v5-l2.npz").is_file() and (mini_imdb.parent / "imdb-v100-l6.npz").is_file()


def rewritten(cache: Path, **replaced: np.ndarray) -> bytes:
    """The bytes of `cache` with some of its arrays replaced (objects are written as pickles, as np.savez does)."""
    with np.load(cache, allow_pickle=False) as arrays:
        contents = {key: arrays[key] for key in arrays.files}
    np.savez(cache, **{**contents, **replaced})
    return cache.read_bytes()


ROWS_OF_THREE_TOKENS = {"train_tokens": np.zeros((5, 3), np.int64), "test_tokens": np.zeros((2, 3), np.int64)}


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda cache: b"not a zip, not an npy", id="garbage"),
        pytest.param(lambda cache: cache.read_bytes()[: cache.stat().st_size // 2], id="truncated"),
        pytest.param(lambda cache: rewritten(cache, format=np.int64(99)), id="other-format"),
        pytest.param(lambda cache: rewritten(cache, archive_bytes=np.int64(1)), id="other-archive"),
        pytest.param(lambda cache: rewritten(cache, **ROWS_OF_THREE_TOKENS), id="other-length"),
        pytest.param(lambda cache: rewritten(cache, test_labels=np.array([0, 7])), id="bad-labels"),
        pytest.param(lambda cache: rewritten(cache, vocabulary=np.array(["a"], dtype=object)), id="pickled"),
    ],
)
def test_a_corrupt_or_foreign_cache_is_ignored_with_a_warning_and_rebuilt(mini_imdb, corrupt):
    read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    cache = mini_imdb.parent / "imdb-v100-l6.npz"
    cache.write_bytes(corrupt(cache))
    with pytest.warns(UserWarning, match=f"ignoring the cache {re.escape(str(cache))}"):
        assert_is_the_mini_imdb(read_imdb(mini_imdb, **MINI_IMDB_SIZES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt: the next read takes it without a word
        assert_is_the_mini_imdb(read_imdb(mini_imdb, **MINI_IMDB_SIZES))
    assert not list(mini_imdb.parent.glob(".*.partial"))


def test_extraction_is_done_once_and_again_when_it_did_not_finish(mini_imdb):
    read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    (mini_imdb.parent / "imdb-v100-l6.npz").unlink()
    review = mini_imdb.parent / "aclImdb/train/pos/5_9.txt"
    review.write_text("zebra")
    assert "zebra" in read_imdb(mini_imdb, **MINI_IMDB_SIZES).vocabulary  # the extracted files were read again

    (mini_imdb.parent / "imdb-v100-l6.npz").unlink()
    (mini_imdb.parent / "aclImdb/.devicebench-extracted").unlink()  # as if extraction had stopped half-way
    assert_is_the_mini_imdb(read_imdb(mini_imdb, **MINI_IMDB_SIZES))
    assert review.read_bytes() == MINI_IMDB_REVIEWS["aclImdb/train/pos/5_9.txt"]


@pytest.mark.parametrize(
    ("files", "symlinks"),
    [
        pytest.param({"../escaped.txt": b"outside"}, {}, id="dot-dot"),
        pytest.param({}, {"aclImdb/train/neg/8_1.txt": "/etc/passwd"}, id="absolute-link"),
        pytest.param({}, {"aclImdb/train/neg/8_1.txt": "../../../../escaped.txt"}, id="link-outside"),
    ],
)
def test_a_member_that_would_land_outside_is_refused_naming_the_archive(tmp_path, tar_gz_writer, files, symlinks):
    folder = tmp_path / "imdb"
    folder.mkdir()
    archive = tar_gz_writer(folder / "aclImdb_v1.tar.gz", {**MINI_IMDB_REVIEWS, **files}, symlinks=symlinks)
    with pytest.raises(DataFormatError, match=rf"{re.escape(str(archive))}: refused to extract an unsafe member"):
        read_imdb(archive, **MINI_IMDB_SIZES)
    assert not (tmp_path / "escaped.txt").exists()
    assert not (folder / "aclImdb/train/neg/8_1.txt").is_symlink()
    assert not (folder / "aclImdb/.devicebench-extracted").exists()


def test_a_member_with_an_absolute_name_is_never_written_there(tmp_path, tar_gz_writer):
    folder = tmp_path / "imdb"
    folder.mkdir()
    absolute = tmp_path / "absolute.txt"
    archive = tar_gz_writer(folder / "aclImdb_v1.tar.gz", {**MINI_IMDB_REVIEWS, str(absolute): b"outside"})
    assert_is_the_mini_imdb(read_imdb(archive, **MINI_IMDB_SIZES))  # the filter makes it relative: not a review
    assert not absolute.exists()
    assert sorted(path.name for path in folder.iterdir()) == ["aclImdb", "aclImdb_v1.tar.gz", "imdb-v100-l6.npz"]


def test_without_tarfile_data_filter_nothing_is_extracted(mini_imdb, monkeypatch):
    monkeypatch.delattr(tarfile, "data_filter")
    with pytest.raises(RuntimeError, match="refusing to extract .* lacks tarfile's 'data' extraction filter"):
        read_imdb(mini_imdb, **MINI_IMDB_SIZES)
    assert not (mini_imdb.parent / "aclImdb").exists()


def test_a_damaged_archive_or_one_without_reviews_is_a_data_format_error(tmp_path, tar_gz_writer):
    damaged = tmp_path / "damaged" / "aclImdb_v1.tar.gz"
    damaged.parent.mkdir()
    damaged.write_bytes(b"\x1f\x8b\x08 this is no gzip stream")
    with pytest.raises(DataFormatError, match="not a readable .tar.gz"):
        read_imdb(damaged, **MINI_IMDB_SIZES)

    (tmp_path / "empty").mkdir()
    empty = tar_gz_writer(tmp_path / "empty" / "aclImdb_v1.tar.gz", MINI_IMDB_OTHER_FILES)
    with pytest.raises(DataFormatError, match=r"no reviews in aclImdb/train/neg/ .*<id>_<rating>\.txt"):
        read_imdb(empty, **MINI_IMDB_SIZES)


def test_sizes_are_checked_before_anything_is_extracted(mini_imdb):
    with pytest.raises(ValueError, match="at least 3 entries"):
        read_imdb(mini_imdb, vocab_size=2, sequence_length=6)
    with pytest.raises(ValueError, match="sequence_length must be at least 1"):
        read_imdb(mini_imdb, vocab_size=100, sequence_length=0)
    assert not (mini_imdb.parent / "aclImdb").exists()


def test_the_archive_downloaded_from_a_loopback_server_with_its_checksum_reads_the_same(
    loopback_server, mini_imdb, tmp_path
):
    digest = hashlib.sha256(mini_imdb.read_bytes()).hexdigest()
    remote = RemoteFile(mini_imdb.name, urls=(loopback_server.publish(mini_imdb),), checksum=f"sha256:{digest}")
    downloaded = fetch(remote, tmp_path / "cache" / "imdb", progress=False)
    assert loopback_server.requested == [mini_imdb.name]
    assert_is_the_mini_imdb(read_imdb(downloaded, **MINI_IMDB_SIZES))
    assert (downloaded.parent / "aclImdb" / "test" / "pos" / "4_8.txt").is_file()


# ---------------------------------------------------------------------------------------------------------------
# Your own texts
# ---------------------------------------------------------------------------------------------------------------


def write_texts(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


MAIL_FOLDER = {
    "train/spam/b.txt": "Buy now, buy cheap",
    "train/spam/a.txt": "Cheap pills",
    "train/spam/notes.md": "not a text: ignored",
    "train/spam/.hidden.txt": "hidden: ignored",
    "train/ham/1.txt": "Lunch at noon?",
    "test/spam/x.txt": "buy lunch now",  # test/ham/ is absent: allowed
}


def test_text_folder_labels_are_its_train_folders_alphabetically_and_texts_come_in_name_order(tmp_path):
    directory = write_texts(tmp_path / "mail", MAIL_FOLDER)
    assert is_text_folder(directory)
    dataset = read_text_folder(directory, vocab_size=20, sequence_length=4)
    assert dataset.name == "mail" and dataset.source == "real" and dataset.class_names == ("ham", "spam")
    assert dataset.vocabulary == ("<pad>", "<unk>", "buy", "cheap", "at", "lunch", "noon", "now", "pills")
    np.testing.assert_array_equal(dataset.train_tokens, [[0, 5, 4, 6], [0, 0, 3, 8], [2, 7, 2, 3]])  # 1, a, b
    np.testing.assert_array_equal(dataset.train_labels, [0, 1, 1])
    np.testing.assert_array_equal(dataset.test_tokens, [[0, 2, 5, 7]])
    np.testing.assert_array_equal(dataset.test_labels, [1])
    assert str(directory) in dataset.origin and "3 train, 1 test texts, 2 labels" in dataset.origin


def test_only_a_folder_with_texts_in_train_label_folders_is_a_text_folder(tmp_path):
    assert not is_text_folder(tmp_path / "missing")
    assert not is_text_folder(write_texts(tmp_path / "notes", {"train/ham/a.md": "x", "train/b.txt": "x"}))
    (tmp_path / "images/train/cat").mkdir(parents=True)
    (tmp_path / "images/train/cat/1.jpg").write_bytes(b"\xff\xd8")
    assert not is_text_folder(tmp_path / "images")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"train/ham/1.txt": "x"}, "no test/ folder"),
        ({"test/ham/1.txt": "x"}, "no train/ folder"),
        ({"train/ham/1.txt": "x", "test/other/1.txt": "y"}, r"label folder\(s\) 'other' not in .*'ham'"),
        ({"train/ham/1.txt": "x", "train/spam/1.md": "y", "test/ham/1.txt": "z"}, r"no .txt files in label .*'spam'"),
        ({"train/1.txt": "x", "test/1.txt": "y"}, "train: no label folders"),
        ({"train/ham/1.txt": "x", "test/ham/1.md": "y"}, "test: no .txt files in its label folders"),
    ],
)
def test_a_bad_text_folder_is_a_data_format_error_describing_the_layout(tmp_path, files, message):
    directory = write_texts(tmp_path / "texts", files)
    with pytest.raises(DataFormatError, match=message) as raised:
        read_text_folder(directory, vocab_size=10, sequence_length=4)
    if "not in" not in message:
        assert "DIR/train/<label>/*.txt and DIR/test/<label>/*.txt" in str(raised.value)


# ---------------------------------------------------------------------------------------------------------------
# Synthetic reviews
# ---------------------------------------------------------------------------------------------------------------


def test_synthetic_imdb_has_the_real_sizes_and_balanced_labels_and_rows_padded_in_front():
    dataset = synthetic_text(vocab_size=20_000, sequence_length=200)
    assert dataset.name == "imdb" and dataset.source == "synthetic" and dataset.class_names == ("neg", "pos")
    assert dataset.train_tokens.shape == (25_000, 200) and dataset.test_tokens.shape == (25_000, 200)
    assert dataset.train_tokens.dtype == np.int64 and dataset.test_labels.dtype == np.int64
    assert dataset.vocab_size == 20_000 and dataset.vocabulary[:4] == ("<pad>", "<unk>", "w2", "w3")
    assert "SeedSequence(0)" in dataset.origin
    for tokens, labels in ((dataset.train_tokens, dataset.train_labels), (dataset.test_tokens, dataset.test_labels)):
        assert (np.bincount(labels) == 12_500).all()
        padding = tokens == 0
        assert not padding[:, -1].any() and (np.diff(padding.astype(np.int8), axis=1) <= 0).all()  # only in front
        assert 0.3 < padding[:, 0].mean() < 0.8  # many reviews shorter than 200 words, as in IMDB
        assert tokens.max() < 20_000 and (tokens[~padding] >= 2).all()


def test_synthetic_text_is_deterministic_per_seed_and_its_test_split_ignores_the_train_size():
    shape = {"vocab_size": 500, "sequence_length": 40, "test_size": 50}
    first, again = synthetic_text(seed=3, train_size=100, **shape), synthetic_text(seed=3, train_size=100, **shape)
    for field_name in ("train_tokens", "train_labels", "test_tokens", "test_labels"):
        np.testing.assert_array_equal(getattr(first, field_name), getattr(again, field_name))
    assert not np.array_equal(first.train_tokens, synthetic_text(seed=4, train_size=100, **shape).train_tokens)
    np.testing.assert_array_equal(first.test_tokens, synthetic_text(seed=3, train_size=7, **shape).test_tokens)
    small = synthetic_text(vocab_size=4, sequence_length=3, train_size=5, test_size=1)  # one word per class
    assert np.abs(np.bincount(small.train_labels) - 2.5).max() <= 0.5 and small.train_tokens.max() <= 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"vocab_size": 3, "sequence_length": 10}, "vocab_size 3 leaves fewer words than its 2 classes"),
        ({"vocab_size": 100, "sequence_length": 0}, "sequence_length must be at least 1"),
        ({"vocab_size": 100, "sequence_length": 10, "train_size": 0}, "sizes must be at least 1"),
    ],
)
def test_synthetic_text_refuses_impossible_shapes(options, message):
    with pytest.raises(ValueError, match=message):
        synthetic_text(**options)


def bag_of_words(tokens: np.ndarray, vocab_size: int) -> torch.Tensor:
    """Each row's word frequencies, padding left out: what a bag-of-words classifier sees."""
    ids = torch.from_numpy(tokens)
    counts = torch.zeros(len(ids), vocab_size).scatter_add_(1, ids, torch.ones(ids.shape))
    counts[:, 0] = 0  # "<pad>" is no word; every review has at least 10 others
    return counts / counts.sum(dim=1, keepdim=True)


def test_a_bag_of_words_logistic_regression_learns_synthetic_reviews():
    dataset = synthetic_text(seed=1, vocab_size=2_000, sequence_length=200, train_size=2_000, test_size=500)
    features, labels = bag_of_words(dataset.train_tokens, dataset.vocab_size), torch.from_numpy(dataset.train_labels)
    torch.manual_seed(0)
    model = torch.nn.Linear(dataset.vocab_size, dataset.num_classes)
    # Weight decay keeps Adam from giving the many rare background words, each in a few reviews, weights as large
    # as the class words': without it this model fits the noise and tests at about 80%.
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, weight_decay=1e-4)
    for _ in range(50):  # full-batch steps
        loss = torch.nn.functional.cross_entropy(model(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        predictions = model(bag_of_words(dataset.test_tokens, dataset.vocab_size)).argmax(dim=1).numpy()
    accuracy = (predictions == dataset.test_labels).mean()
    assert accuracy > 0.9, f"test accuracy {accuracy:.3f} after 50 steps"
