"""Shared data fixtures: tiny files in the real release formats, and a loopback HTTP server that serves them.

python -m pytest tests/test_data_formats.py tests/test_data_sources.py tests/test_data_synthetic.py -q
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import platformdirs
import pytest
from http_fixtures import StatefulHTTPServer, serving
from hypothesis import HealthCheck, settings

from devicebench.data import ArrayDataset
from devicebench.data.formats import (
    CIFAR10_BINARY,
    CIFAR100_BINARY,
    MNIST_FILES,
    CifarLayout,
    Splits,
    read_idx,
)
from devicebench.data.sources import DATA_DIR_ENVIRONMENT_VARIABLE
from devicebench.engine.calibration_files import CALIBRATION_DIR_VARIABLE
from devicebench.environment import machine_id
from devicebench.results.schema import EpochRecord, Result, RunRecord, RunSettings
from devicebench.results.store import DB_ENVIRONMENT_VARIABLE

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_MNIST_VARIABLE = (
    "DEVICEBENCH_TEST_MNIST"  # another folder holding the real MNIST test set, for a clone elsewhere
)
SHARED_MNIST_FOLDER = Path(os.environ.get(SHARED_MNIST_VARIABLE) or REPO_ROOT.parent / "shared" / "data" / "mnist")
REAL_DATA_SKIP = "the real MNIST test set is not at"  # how every real-digit test's skip reason begins
# what to do about it, said by every such skip and by the summary: all of it here, nothing outside the repository
REAL_DATA_WHERE = (
    f"put t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz there (`devicebench data fetch mnist` downloads "
    f"them into `devicebench data path mnist`), or set ${SHARED_MNIST_VARIABLE} to their folder"
)

# ---------------------------------------------------------------------------------------------------------------
# The session's sandbox: set when pytest loads this file, before any fixture of any scope (a module-scoped
# training run included) or any test module's import. Nothing a test runs can reach the user's folders.
# ---------------------------------------------------------------------------------------------------------------

USER_FOLDERS = tuple(
    dict.fromkeys(
        Path(folder)
        for folder in (  # computed with the user's own environment
            platformdirs.user_data_dir("devicebench"),
            platformdirs.user_cache_dir("devicebench"),
            platformdirs.user_config_dir("devicebench"),
            platformdirs.user_state_dir("devicebench"),
            platformdirs.user_log_dir("devicebench"),
            SHARED_MNIST_FOLDER,
        )
    )
)
SANDBOX = Path(tempfile.mkdtemp(prefix="devicebench-tests-"))
TABLE_WIDTH = "200"  # columns of every console, in process and in subprocesses, whatever the terminal says

os.environ.update(
    {
        "HOME": str(SANDBOX / "home"),  # platformdirs and `~` resolve inside the sandbox
        "XDG_DATA_HOME": str(SANDBOX / "home" / ".local" / "share"),
        "XDG_CACHE_HOME": str(SANDBOX / "home" / ".cache"),
        "XDG_CONFIG_HOME": str(SANDBOX / "home" / ".config"),
        "XDG_STATE_HOME": str(SANDBOX / "home" / ".local" / "state"),
        DB_ENVIRONMENT_VARIABLE: str(SANDBOX / "results.sqlite"),
        DATA_DIR_ENVIRONMENT_VARIABLE: str(SANDBOX / "data"),
        CALIBRATION_DIR_VARIABLE: str(SANDBOX / "calibration"),
        "COLUMNS": TABLE_WIDTH,  # rich reads it when a console is made and when it measures one
        "LINES": "50",
        "TERM": "xterm-256color",  # not "dumb": a dumb terminal gets 80 columns whatever COLUMNS says
    }
)
for _variable in (
    "FORCE_COLOR",
    "NO_COLOR",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
    "PYTHONIOENCODING",
):
    os.environ.pop(_variable, None)  # colour and encoding come from the test, never the shell that ran pytest
(SANDBOX / "home").mkdir()

# Ctrl-C and a closed terminal as a terminal's process has them, whatever started pytest: a shell's background job
# starts with SIGINT ignored and `nohup` with SIGHUP ignored, every process a test starts would inherit that, and
# devicebench rightly keeps ignoring a signal ignored when it started (tests/test_signals.py tests that case on
# purpose). A handler of ours, unlike "ignored", is reset to the default when a child execs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# hypothesis: the same inputs on every run by default (CI); `--hypothesis-profile explore` searches afresh
settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("explore", max_examples=1000, deadline=None, database=None)
settings.load_profile(os.environ.get("DEVICEBENCH_HYPOTHESIS_PROFILE", "ci"))


def _snapshot(folders: tuple[Path, ...]) -> dict[str, tuple[int, int]]:
    """path -> (size, modification time in ns) of every file and folder under `folders`."""
    state = {}
    for folder in folders:
        for root, names, files in os.walk(folder):
            for name in [".", *names, *files]:
                path = os.path.normpath(os.path.join(root, name))
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                state[path] = (info.st_size, info.st_mtime_ns)
    return state


USER_FOLDERS_BEFORE = _snapshot(USER_FOLDERS)


def user_folder_changes() -> list[str]:
    """What the session created, changed or removed in the user's folders (empty when it kept out of them)."""
    after = _snapshot(USER_FOLDERS)
    created = [f"created {path}" for path in sorted(after.keys() - USER_FOLDERS_BEFORE.keys())]
    removed = [f"removed {path}" for path in sorted(USER_FOLDERS_BEFORE.keys() - after.keys())]
    changed = [
        f"changed {path}"
        for path in sorted(after.keys() & USER_FOLDERS_BEFORE.keys())
        if after[path] != USER_FOLDERS_BEFORE[path]
    ]
    return created + removed + changed


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The guard: the run fails if anything was written to the user's database, data or calibration folders."""
    changes = user_folder_changes()
    session.config.stash[_GUARD_KEY] = changes
    if changes:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(SANDBOX, ignore_errors=True)


_GUARD_KEY = pytest.StashKey[list]()
_real_data_skips: list[str] = []  # node ids of the tests that skipped for want of the real digits


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and REAL_DATA_SKIP in str(report.longrepr[2]):
        _real_data_skips.append(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _real_data_skips:
        terminalreporter.section("REAL DATA NOT FOUND", sep="!", red=True, bold=True)
        terminalreporter.line(
            f"{len(_real_data_skips)} test(s) on the real MNIST digits SKIPPED: the test set is not at "
            f"{SHARED_MNIST_FOLDER}: {REAL_DATA_WHERE}.",
            red=True,
            bold=True,
        )
    changes = config.stash.get(_GUARD_KEY, [])
    if changes:
        terminalreporter.section("TESTS WROTE TO THE USER'S FOLDERS", sep="!", red=True, bold=True)
        terminalreporter.line(
            "the run FAILS: no test may touch the user's database, data or calibration folders "
            f"({', '.join(map(str, USER_FOLDERS))})",
            red=True,
            bold=True,
        )
        for change in changes[:50]:
            terminalreporter.line(f"  {change}", red=True)
        if len(changes) > 50:
            terminalreporter.line(f"  ... and {len(changes) - 50} more", red=True)


REAL_TRAIN_DIGITS = 8_000  # of the 10,000 real test digits: the first train, the rest test


@pytest.fixture(scope="session")
def real_digits():
    """The real MNIST digits of the shared data folder as a dataset: 8,000 to train on, 2,000 to test."""
    images_file = SHARED_MNIST_FOLDER / "t10k-images-idx3-ubyte.gz"
    labels_file = SHARED_MNIST_FOLDER / "t10k-labels-idx1-ubyte.gz"
    if not (images_file.exists() and labels_file.exists()):
        pytest.skip(f"{REAL_DATA_SKIP} {SHARED_MNIST_FOLDER}: {REAL_DATA_WHERE}")
    images = read_idx(images_file)[:, None]  # (10000, 1, 28, 28)
    labels = read_idx(labels_file).astype("int64")
    split = REAL_TRAIN_DIGITS
    return ArrayDataset(
        "mnist",
        "real",
        images[:split],
        labels[:split],
        images[split:],
        labels[split:],
        num_classes=10,
        origin=str(SHARED_MNIST_FOLDER),
    )


IDX_TYPE_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D}


def encode_idx(array: np.ndarray) -> bytes:
    """IDX bytes for `array`, written from the format's description: magic, big-endian dims, big-endian data."""
    header = bytes([0, 0, IDX_TYPE_CODES[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_tar_gz(
    path: Path, files: dict[str, bytes], *, symlinks: dict[str, str] | None = None, folders: tuple[str, ...] = ()
) -> Path:
    """A .tar.gz holding `folders`, regular `files` (name -> bytes) and `symlinks` (name -> link target)."""
    with tarfile.open(path, "w:gz") as archive:
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return path


@dataclass(frozen=True)
class TinyRelease:
    """Release files of a few samples in `folder`, and the arrays a correct reader must return from them."""

    folder: Path
    expected: Splits


@pytest.fixture
def idx_encoder() -> Callable[[np.ndarray], bytes]:
    return encode_idx


@pytest.fixture
def tar_gz_writer() -> Callable[..., Path]:
    return write_tar_gz


@pytest.fixture
def tiny_mnist(tmp_path: Path) -> TinyRelease:
    """The four MNIST .gz files with 6 train and 4 test digits of random pixels."""
    rng = np.random.default_rng(1234)
    expected = Splits(
        train_images=rng.integers(0, 256, size=(6, 1, 28, 28), dtype=np.uint8),
        train_labels=np.array([5, 0, 4, 1, 9, 2], dtype=np.int64),
        test_images=rng.integers(0, 256, size=(4, 1, 28, 28), dtype=np.uint8),
        test_labels=np.array([7, 2, 1, 0], dtype=np.int64),
    )
    folder = tmp_path / "tiny_mnist"
    folder.mkdir()
    for role, filename in MNIST_FILES.items():
        array = getattr(expected, role)
        array = array[:, 0] if array.ndim == 4 else array.astype(np.uint8)  # files hold (N, 28, 28) and uint8
        (folder / filename).write_bytes(gzip.compress(encode_idx(array)))
    return TinyRelease(folder, expected)


def _cifar_record(labels: tuple[int, ...], image: np.ndarray) -> bytes:
    """One record as cifar.html describes it: label byte(s), then 1024 R, 1024 G, 1024 B bytes, rows in order."""
    red, green, blue = image
    return bytes(labels) + red.tobytes(order="C") + green.tobytes(order="C") + blue.tobytes(order="C")


def _tiny_cifar(tmp_path: Path, layout: CifarLayout, seed: int) -> TinyRelease:
    """A CIFAR binary archive with the real member names: 2 records per train member, 3 in the test member."""
    rng = np.random.default_rng(seed)
    members = layout.train_members + layout.test_members
    counts = [2] * len(layout.train_members) + [3]
    images = rng.integers(0, 256, size=(sum(counts), 3, 32, 32), dtype=np.uint8)
    images[0, 0], images[0, 1], images[0, 2] = 11, 22, 33  # one image whose planes a test can name
    fine_labels = rng.integers(0, layout.num_classes, size=sum(counts))
    files, start = {}, 0
    for member, count in zip(members, counts, strict=True):
        records = []
        for index in range(start, start + count):
            coarse = (fine_labels[index] + 7) % 20  # differs from the fine label, so reading the wrong byte shows
            labels = (int(fine_labels[index]),) if layout.label_bytes == 1 else (int(coarse), int(fine_labels[index]))
            records.append(_cifar_record(labels, images[index]))
        files[member] = b"".join(records)
        start += count
    top_folder = members[0].split("/")[0]
    files[f"{top_folder}/batches.meta.txt"] = b"airplane\nautomobile\n"  # the release's other files are skipped
    path = write_tar_gz(tmp_path / layout.archive_name, files, folders=(top_folder,))
    train_count = sum(counts[:-1])
    expected = Splits(
        train_images=images[:train_count],
        train_labels=fine_labels[:train_count].astype(np.int64),
        test_images=images[train_count:],
        test_labels=fine_labels[train_count:].astype(np.int64),
    )
    return TinyRelease(path.parent, expected)


@pytest.fixture
def tiny_cifar10(tmp_path: Path) -> TinyRelease:
    return _tiny_cifar(tmp_path, CIFAR10_BINARY, seed=10)


@pytest.fixture
def tiny_cifar100(tmp_path: Path) -> TinyRelease:
    return _tiny_cifar(tmp_path, CIFAR100_BINARY, seed=100)


@pytest.fixture
def shared_mnist_folder() -> Path:
    if not (SHARED_MNIST_FOLDER / MNIST_FILES["test_images"]).is_file():
        pytest.skip(f"{REAL_DATA_SKIP} {SHARED_MNIST_FOLDER}: {REAL_DATA_WHERE}")
    return SHARED_MNIST_FOLDER


# ---------------------------------------------------------------------------------------------------------------
# Loopback HTTP server
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class LoopbackServer:
    """Serves files from `folder` at `base_url`; each file can be set to misbehave in one way."""

    folder: Path
    base_url: str = ""
    requested: list[str] = field(default_factory=list)  # file names asked for, in order
    misbehaviour: dict[str, str | bytes] = field(default_factory=dict)  # name -> "404", "truncate", "stall" or bytes
    stall_released: threading.Event = field(default_factory=threading.Event)

    def publish(self, path: Path) -> str:
        """Serve a copy of `path`; returns its URL."""
        shutil.copyfile(path, self.folder / path.name)
        return self.url(path.name)

    def url(self, filename: str) -> str:
        return self.base_url + filename

    def respond_404(self, filename: str) -> None:
        self.misbehaviour[filename] = "404"

    def truncate(self, filename: str) -> None:
        """Announce the full Content-Length, send half the body, close the connection."""
        self.misbehaviour[filename] = "truncate"

    def stall(self, filename: str) -> None:
        """Send the headers, then nothing until the test ends."""
        self.misbehaviour[filename] = "stall"

    def serve_wrong_bytes(self, filename: str, body: bytes) -> None:
        self.misbehaviour[filename] = body


class _LoopbackHandler(BaseHTTPRequestHandler):
    server: StatefulHTTPServer

    def do_GET(self) -> None:  # the name http.server dispatches GET requests to
        state = self.server.state
        filename = self.path.lstrip("/")
        state.requested.append(filename)
        misbehaviour = state.misbehaviour.get(filename)
        path = state.folder / filename
        if misbehaviour == "404" or not path.is_file():
            self.send_error(404)
            return
        body = misbehaviour if isinstance(misbehaviour, bytes) else path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if misbehaviour == "truncate":
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
        elif misbehaviour == "stall":
            self.wfile.flush()
            state.stall_released.wait(timeout=10)  # seconds; the client gives up long before
        else:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # the base class's signature
        pass  # keep test output clean


@pytest.fixture
def loopback_server(tmp_path: Path) -> Iterator[LoopbackServer]:
    state = LoopbackServer(folder=tmp_path / "served")
    state.folder.mkdir()
    with serving(_LoopbackHandler, state) as state.base_url:
        yield state
        state.stall_released.set()  # a stalled response lets go before the server shuts down


@pytest.fixture
def dead_base_url() -> str:
    """A loopback URL on a port nothing listens on: connections are refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


# ---------------------------------------------------------------------------------------------------------------
# Results and the results database
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_stored_calibration(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test starts with an empty calibration folder: a calibration of the machine running the tests never
    changes what a test sees."""
    folder = tmp_path_factory.mktemp("calibration") / "stored"  # not created: calibrating creates it
    monkeypatch.setenv(CALIBRATION_DIR_VARIABLE, str(folder))
    return folder


@pytest.fixture(autouse=True)
def default_results_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's default results database is a fresh temporary file: no test ever touches the user's real one."""
    path = tmp_path_factory.mktemp("results-db") / "results.sqlite"
    monkeypatch.setenv(DB_ENVIRONMENT_VARIABLE, str(path))
    return path


SAMPLES_PER_TEST_EPOCH = 1000


def _sample_run(
    workload: str = "mnist-cnn2",
    device: str = "cpu",
    *,
    epoch_times_s: tuple[float, ...] = (2.0, 1.0, 1.25),
    started_utc: str = "2026-03-01T10:00:00Z",
    status: str = "ok",
    **fields: object,
) -> RunRecord:
    """A finished run with every field filled in; epoch i took epoch_times_s[i] s for 1000 samples, epoch 1 warm-up.

    `fields` sets any other RunRecord field (run_id, epochs, error...).
    """
    epochs = [
        EpochRecord(
            epoch=index + 1,
            phase="warmup" if index == 0 else "steady",
            steps=20,
            samples=SAMPLES_PER_TEST_EPOCH,
            train_time_s=seconds,
            samples_per_s=SAMPLES_PER_TEST_EPOCH / seconds,
            step_time_ms=seconds / 20 * 1000,
            train_loss=2.0 / (index + 1),
            train_accuracy=0.3 + 0.1 * index,
            eval_time_s=0.25,
            eval_samples=500,
            test_loss=1.5 / (index + 1),
            test_accuracy=0.5 + 0.1 * index,
        )
        for index, seconds in enumerate(epoch_times_s)
    ]
    settings = RunSettings(
        batch_size=50,
        epochs=len(epoch_times_s),
        max_steps=20,
        max_eval_steps=10,
        seed=0,
        threads=8,
        data_source="synthetic",
        tf32_matmul=True,
        hyperparameters={"learning_rate": 0.001, "layers": [32, 64], "dropout": None},
    )
    values: dict = dict(
        workload=workload,
        seed_experiment="S1",
        device=device,
        device_name=f"{device} model",
        repeat=0,
        settings=settings,
        started_utc=started_utc,
        status=status,
        epochs=epochs,
        parameter_count=3_274_634,
        model_build_s=0.5,
        end_to_end_s=sum(epoch_times_s) + 1.5,
        target_accuracy=0.6,
        time_to_target_train_s=3.0,
        time_to_target_wall_s=3.75,
        peak_device_memory_mib=None if device == "cpu" else 812.5,
        peak_rss_mib=480.25,
        energy_j=None if device == "cpu" else 1234.5,
    )
    return RunRecord(**{**values, **fields})


def _sample_result(
    machine_name: str = "laptop",
    runs: list[RunRecord] | None = None,
    *,
    created_utc: str = "2026-03-01T09:59:00Z",
    hostname: str | None = None,
) -> Result:
    """A session on a made-up machine whose fingerprint has the keys machine_fingerprint() gives."""
    machine = {
        "hostname": hostname or f"{machine_name}.local",
        "machine_name": machine_name,
        "torch": "2.13.0",
        "cpu": {"model": "Test CPU", "logical_cores": 8, "isa": {"avx2": True, "avx512f": False}},
        "memory_total_mib": 16384,
        "accelerators": [],
        "no_accelerator_reason": "made up for a test",
        "machine_id": machine_id(machine_name, "Test CPU", []),
    }
    config = {"workloads": ["mnist-cnn2"], "devices": "cpu", "repeats": 1, "suite": "quick", "threads": None}
    return Result(
        machine=machine, config=config, created_utc=created_utc, devicebench_version="0.1.0", runs=list(runs or [])
    )


@pytest.fixture
def make_run() -> Callable[..., RunRecord]:
    return _sample_run


@pytest.fixture
def make_result() -> Callable[..., Result]:
    return _sample_result


@pytest.fixture
def switches_untried(monkeypatch) -> None:
    """Tuned mode's options with the layout and the fused step as the base tuning has them (a CPU's trial of them
    left out), for a test about another choice: compile, bf16, what the run records of them."""
    from devicebench import session_choices

    monkeypatch.setattr(
        session_choices, "candidates", functools.partial(session_choices.candidates, trial_switches=False)
    )


@pytest.fixture
def force_cpu_isa(monkeypatch) -> Callable[[str], None]:
    """Make devicebench take this CPU to have exactly the named ISA flags (`force_cpu_isa("avx2")`), whatever it
    really has: the CI machine may be an AVX2-only EPYC or an AMX Xeon."""
    from devicebench import host

    def force(names: str) -> None:
        monkeypatch.setenv(host.ISA_VARIABLE, names)
        host.cpu_isa.cache_clear()

    yield force
    host.cpu_isa.cache_clear()  # before monkeypatch restores the variable: the next call detects afresh


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real checkpoint of mnist-cnn2 after one step on synthetic digits (its own database, never the user's)."""
    from typer.testing import CliRunner

    from devicebench.cli import app

    folder = tmp_path_factory.mktemp("checkpoint")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--max-eval-steps",
            "1",
            "--db",
            str(folder / "results.sqlite"),
            "--save",
            str(folder / "model.pt"),
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    return folder / "model.pt"


@pytest.fixture(scope="session")
def plugin_environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment in which the example plugin is installed, by pip, from a copy of examples/plugin, with a
    database of its own (DEVICEBENCH_DB)."""
    work = tmp_path_factory.mktemp("plugin")
    examples = Path(__file__).resolve().parent.parent / "examples"
    source = shutil.copytree(examples / "plugin", work / "source")  # pip builds in the tree: not in the checkout
    installed = work / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(installed),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(installed), os.environ.get("PYTHONPATH", "")]),
        "DEVICEBENCH_DB": str(work / "results.sqlite"),
    }
