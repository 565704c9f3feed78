"""The download path against a real loopback HTTP server, the cache layout, the registry, and load_dataset.

python -m pytest tests/test_data_sources.py -q
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import re
from pathlib import Path

import numpy as np
import platformdirs
import pytest

from devicebench.data import DataUnavailable, download, known_datasets, load_dataset, sources
from devicebench.data.download import RemoteFile, fetch
from devicebench.data.formats import MNIST_FILES
from devicebench.data.sources import data_root, is_cached


def sha256_of(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


@pytest.fixture
def served_file(loopback_server, tmp_path) -> tuple[str, bytes]:
    """A 3 MiB file on the loopback server (several 1 MiB chunks, so streaming is exercised); its name and bytes."""
    content = np.random.default_rng(7).integers(0, 256, size=3 * 2**20 + 123, dtype=np.uint8).tobytes()
    source = tmp_path / "payload.bin"
    source.write_bytes(content)
    loopback_server.publish(source)
    return source.name, content


def remote_for(name: str, content: bytes, *urls: str) -> RemoteFile:
    return RemoteFile(name, urls=urls, checksum=f"sha256:{sha256_of(content)}", size_bytes=len(content))


def assert_empty(folder: Path) -> None:
    leftovers = sorted(path.name for path in folder.iterdir()) if folder.exists() else []
    assert leftovers == [], f"left behind in {folder}: {leftovers}"


# --- fetch ---------------------------------------------------------------------------------------------------------


def test_good_download_is_verified_cached_and_not_fetched_twice(loopback_server, served_file, tmp_path):
    name, content = served_file
    remote = remote_for(name, content, loopback_server.url(name))
    cache = tmp_path / "cache"

    path = fetch(remote, cache, progress=False)
    assert path == cache / name and path.read_bytes() == content
    assert sorted(p.name for p in cache.iterdir()) == [name]  # no .partial beside it
    assert loopback_server.requested == [name]

    assert fetch(remote, cache, progress=False) == path
    assert loopback_server.requested == [name]  # served from the cache: the server saw no second request


def test_md5_checksums_verify_too(loopback_server, served_file, tmp_path):
    name, content = served_file
    remote = RemoteFile(name, urls=(loopback_server.url(name),), checksum=f"md5:{hashlib.md5(content).hexdigest()}")
    assert fetch(remote, tmp_path / "cache", progress=False).read_bytes() == content


def test_wrong_bytes_fail_the_checksum_and_leave_nothing(loopback_server, served_file, tmp_path):
    name, content = served_file
    wrong = bytes(len(content))  # same length, so only the checksum can catch it
    loopback_server.serve_wrong_bytes(name, wrong)
    remote = remote_for(name, content, loopback_server.url(name))
    cache = tmp_path / "cache"

    with pytest.raises(DataUnavailable) as caught:
        fetch(remote, cache, progress=False)
    message = str(caught.value)
    assert f"checksum mismatch: expected sha256:{sha256_of(content)}, got sha256:{sha256_of(wrong)}" in message
    assert_empty(cache)


def test_truncated_body_is_an_error_and_leaves_nothing(loopback_server, served_file, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "RETRY_PAUSE_S", 0.0)
    name, content = served_file
    loopback_server.truncate(name)  # every time: the cut is retried, then reported
    remote = dataclasses.replace(remote_for(name, content, loopback_server.url(name)), size_bytes=None)
    cache = tmp_path / "cache"

    with pytest.raises(DataUnavailable) as caught:
        fetch(remote, cache, progress=False)
    assert (
        f"truncated: received {len(content) // 2} of {len(content)} bytes "
        f"(gave up after {download.DOWNLOAD_ATTEMPTS} attempts)"
    ) in str(caught.value)
    assert loopback_server.requested == [name] * download.DOWNLOAD_ATTEMPTS
    assert_empty(cache)


def test_server_down_names_the_url_and_where_to_put_the_file(dead_base_url, tmp_path):
    url = dead_base_url + "payload.bin"
    remote = RemoteFile("payload.bin", urls=(url,), checksum="sha256:" + "0" * 64)
    cache = tmp_path / "cache"

    with pytest.raises(DataUnavailable) as caught:
        fetch(remote, cache, progress=False, timeout_s=5)
    message = str(caught.value)
    assert f"{url}: connection refused" in message
    assert f"put it in folder {cache} as file payload.bin" in message and str(cache / "payload.bin") in message
    assert caught.value.failures == ((url, "connection refused"),)
    assert str(pickle.loads(pickle.dumps(caught.value))) == message  # survives a trip to another process
    assert_empty(cache)


def test_progress_bar_never_writes_to_stdout(loopback_server, served_file, tmp_path, capsys):
    name, content = served_file
    fetch(remote_for(name, content, loopback_server.url(name)), tmp_path / "cache", progress=True)
    assert capsys.readouterr().out == ""


def test_no_progress_bar_and_no_blank_line_off_a_terminal(
    loopback_server, served_file, dead_base_url, tmp_path, capsys
):
    """Piped (`devicebench run | cat`), a bar cannot vanish: rich left a blank line per download tried, two of them
    at the top of the output when both mirrors failed and the run fell back to synthetic data."""
    name, content = served_file
    fetch(remote_for(name, content, loopback_server.url(name)), tmp_path / "cache", progress=True)
    with pytest.raises(DataUnavailable):
        fetch(remote_for(name, content, dead_base_url + "a", dead_base_url + "b"), tmp_path / "other", progress=True)
    assert capsys.readouterr().err == ""  # capsys's stderr is no terminal


def test_stalled_server_times_out(loopback_server, served_file, tmp_path):
    name, content = served_file
    loopback_server.stall(name)
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailable, match=r"timed out after 0\.3 s"):
        fetch(remote_for(name, content, loopback_server.url(name)), cache, progress=False, timeout_s=0.3)
    assert_empty(cache)


def test_second_mirror_is_used_when_the_first_answers_404(loopback_server, served_file, tmp_path):
    name, content = served_file
    loopback_server.respond_404("mirror-a-copy.bin")
    first, second = loopback_server.url("mirror-a-copy.bin"), loopback_server.url(name)
    path = fetch(remote_for(name, content, first, second), tmp_path / "cache", progress=False)
    assert path.read_bytes() == content
    assert loopback_server.requested == ["mirror-a-copy.bin", name]


def test_every_failed_mirror_is_reported_with_its_own_reason(loopback_server, served_file, dead_base_url, tmp_path):
    name, content = served_file
    loopback_server.respond_404(name)
    urls = (loopback_server.url(name), dead_base_url + name)
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_for(name, content, *urls), tmp_path / "cache", progress=False)
    assert caught.value.failures == ((urls[0], "HTTP 404 Not Found"), (urls[1], "connection refused"))


def test_corrupt_cached_file_is_replaced_with_a_warning(loopback_server, served_file, tmp_path):
    name, content = served_file
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / name).write_bytes(b"half a download")

    with pytest.warns(UserWarning, match=rf"{re.escape(str(cache / name))} is corrupt .*downloading it again"):
        path = fetch(remote_for(name, content, loopback_server.url(name)), cache, progress=False)
    assert path.read_bytes() == content and loopback_server.requested == [name]


def test_remote_file_rejects_malformed_checksums():
    with pytest.raises(ValueError, match="checksum must be"):
        RemoteFile("x", urls=(), checksum="sha1:" + "0" * 40)
    with pytest.raises(ValueError, match="checksum must be"):
        RemoteFile("x", urls=(), checksum="sha256:abc")


# --- cache location ---------------------------------------------------------------------------------------------


def test_data_root_prefers_argument_then_environment_then_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DEVICEBENCH_DATA", str(tmp_path / "from_env"))
    assert data_root(tmp_path / "explicit") == tmp_path / "explicit"
    assert data_root() == tmp_path / "from_env"
    monkeypatch.delenv("DEVICEBENCH_DATA")
    assert data_root() == Path(platformdirs.user_cache_dir("devicebench")) / "data"


def test_is_cached_only_when_every_file_verifies(tiny_mnist, dead_base_url, monkeypatch, tmp_path):
    point_mnist_registry_at(monkeypatch, tiny_mnist.folder, dead_base_url)
    assert not is_cached("mnist", tmp_path)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for filename in MNIST_FILES.values():
        (folder / filename).write_bytes((tiny_mnist.folder / filename).read_bytes())
    assert is_cached("mnist", tmp_path)
    (folder / MNIST_FILES["test_labels"]).write_bytes(b"\x00")
    assert not is_cached("mnist", tmp_path)


# --- registry ----------------------------------------------------------------------------------------------------


def test_registry_pins_https_urls_sizes_and_sha256_for_every_file():
    assert known_datasets() == (
        "mnist",
        "cifar10",
        "cifar100",
        "cats-vs-dogs",
        "imdb",
        "squad",
        "openwebtext",
        "wmt16",
        "covertype",
        "imagenet",
    )
    shapes = {
        name: (spec.image_shape, spec.num_classes, spec.train_size, spec.test_size)
        for name, spec in sources.DATASETS.items()
    }
    assert shapes == {
        "mnist": ((1, 28, 28), 10, 60_000, 10_000),
        "cifar10": ((3, 32, 32), 10, 50_000, 10_000),
        "cifar100": ((3, 32, 32), 100, 50_000, 10_000),
        "cats-vs-dogs": ((3, 64, 64), 2, 8_000, 2_000),  # the seeds' split of the PetImages photos
        "imdb": (None, 2, 25_000, 25_000),
        "squad": (None, 0, 87_599, 10_570),  # questions; the classes are positions of the sequence
        "openwebtext": (None, 0, 8_823_810, 4_330),  # 1,024-token sequences of its 9.0e9 and 4.4e6 tokens
        "wmt16": (None, 0, 4_500_000, 3_003),  # sentence pairs: about 4.5 million, and newstest2014's
        "covertype": (None, 7, 464_809, 116_203),  # 581,012 rows, split 80/20
        "imagenet": ((3, 224, 224), 1000, 1_281_167, 50_000),  # ILSVRC-2012; nothing to download (test_imagenet.py)
    }
    for spec in sources.DATASETS.values():
        for remote in spec.files:
            assert remote.algorithm == "sha256" and remote.size_bytes
            assert remote.urls
            assert all(url.startswith("https://") for url in remote.urls)
            assert remote.urls[0].endswith(remote.filename)  # the original; a mirror may name it otherwise
    assert [remote.filename for remote in sources.DATASETS["mnist"].files] == list(MNIST_FILES.values())
    assert sources.DATASETS["mnist"].files[0].urls == (
        "https://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz",
        "https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz",
    )


# --- load_dataset ------------------------------------------------------------------------------------------------


def point_mnist_registry_at(monkeypatch, release_folder: Path, base_url: str) -> None:
    """Make the "mnist" entry serve the tiny release: its URLs at `base_url`, its checksums those of the files."""
    files = tuple(
        remote_for(filename, (release_folder / filename).read_bytes(), base_url + filename)
        for filename in MNIST_FILES.values()
    )
    spec = dataclasses.replace(sources.DATASETS["mnist"], files=files, train_size=60, test_size=20)
    monkeypatch.setitem(sources.DATASETS, "mnist", spec)


def test_auto_downloads_and_returns_real_data(tiny_mnist, loopback_server, monkeypatch, tmp_path):
    for filename in MNIST_FILES.values():
        loopback_server.publish(tiny_mnist.folder / filename)
    point_mnist_registry_at(monkeypatch, tiny_mnist.folder, loopback_server.base_url)

    dataset = load_dataset("mnist", "auto", data_dir=tmp_path, progress=False)
    assert dataset.source == "real" and dataset.fallback_reason is None
    assert dataset.num_classes == 10 and str(tmp_path / "mnist") in dataset.origin
    np.testing.assert_array_equal(dataset.train_images, tiny_mnist.expected.train_images)
    np.testing.assert_array_equal(dataset.test_labels, tiny_mnist.expected.test_labels)
    assert sorted(loopback_server.requested) == sorted(MNIST_FILES.values())
    assert is_cached("mnist", tmp_path)


def test_auto_uses_the_cache_without_the_network(tiny_mnist, dead_base_url, monkeypatch, tmp_path):
    point_mnist_registry_at(monkeypatch, tiny_mnist.folder, dead_base_url)
    (tmp_path / "mnist").mkdir()
    for filename in MNIST_FILES.values():
        (tmp_path / "mnist" / filename).write_bytes((tiny_mnist.folder / filename).read_bytes())

    dataset = load_dataset("mnist", "auto", data_dir=tmp_path, progress=False)
    assert dataset.source == "real"
    np.testing.assert_array_equal(dataset.train_labels, tiny_mnist.expected.train_labels)


def test_auto_falls_back_to_synthetic_and_says_why(tiny_mnist, dead_base_url, monkeypatch, tmp_path):
    point_mnist_registry_at(monkeypatch, tiny_mnist.folder, dead_base_url)

    with pytest.warns(UserWarning, match="real MNIST could not be had"):
        dataset = load_dataset("mnist", "auto", data_dir=tmp_path, progress=False)
    assert dataset.source == "synthetic"
    assert dataset.image_shape == (1, 28, 28) and len(dataset.train_labels) == 60 and len(dataset.test_labels) == 20
    reason = dataset.fallback_reason
    assert reason is not None
    assert f"{dead_base_url}train-images-idx3-ubyte.gz: connection refused" in reason
    assert "using synthetic data of the same shape" in reason
    assert f"Put {', '.join(MNIST_FILES.values())} in {tmp_path / 'mnist'} or check the network" in reason


def test_real_with_the_server_down_raises(tiny_mnist, dead_base_url, monkeypatch, tmp_path):
    point_mnist_registry_at(monkeypatch, tiny_mnist.folder, dead_base_url)
    with pytest.raises(DataUnavailable, match=re.escape(str(tmp_path / "mnist"))):
        load_dataset("mnist", "real", data_dir=tmp_path, progress=False)


def test_synthetic_source_never_touches_the_cache(tmp_path):
    dataset = load_dataset("mnist", "synthetic", data_dir=tmp_path, seed=3)
    assert dataset.source == "synthetic" and dataset.fallback_reason is None and "SeedSequence(3)" in dataset.origin
    assert_empty(tmp_path)  # a download would first have created tmp_path/mnist


def test_unknown_dataset_and_source_are_rejected_with_the_choices():
    with pytest.raises(ValueError, match="unknown dataset 'svhn'; known datasets: mnist, cifar10, cifar100"):
        load_dataset("svhn")
    with pytest.raises(ValueError, match="source must be 'auto', 'real' or 'synthetic'"):
        load_dataset("mnist", "download")  # type: ignore[arg-type]


def test_a_data_folder_that_cannot_be_created_is_unavailable_not_a_crash(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    with pytest.raises(DataUnavailable, match="cannot be written .*--data-dir or \\$DEVICEBENCH_DATA"):
        load_dataset("mnist", "real", data_dir=blocker, progress=False)
    with pytest.warns(UserWarning):
        fallback = load_dataset("mnist", "auto", data_dir=blocker, progress=False)
    assert fallback.source == "synthetic" and "cannot be written" in fallback.fallback_reason
