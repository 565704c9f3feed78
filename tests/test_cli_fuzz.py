"""Fuzzing the command line: whatever a user types, devicebench answers with a documented exit status, never a
traceback, and a refusal says what is wrong.

Hypothesis builds commands from each command's real options (read from the Typer app, so a new option is fuzzed
without a change here) with hostile values: empty, negative, huge and non-numbers, unicode, paths that do not exist,
folders and junk files where files are wanted, malformed --set, --devices, --price and --batch-size. The property:
no unhandled exception, an exit status of 0, 1, 2 or 130, and "error:" with a message on every refusal (status 2).
Nothing trains for long: run and sweep always get a tiny synthetic setup on the CPU and only values that keep it
tiny; reproduce and calibrate always get one value that must be refused, so they never start measuring.
The second half pins each crash the fuzzing found, with the message the user now gets.

    python -m pytest tests/test_cli_fuzz.py -q
"""

from __future__ import annotations

import re
import tempfile
import typing
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from devicebench.cli import EXIT_FAILED_RUN, EXIT_INTERRUPTED, EXIT_USAGE, app

cli = CliRunner()
COMMANDS = typer.main.get_command(app).commands  # name -> the command as typer built it, with the real options
DOCUMENTED_EXIT_STATUSES = {0, EXIT_FAILED_RUN, EXIT_USAGE, EXIT_INTERRUPTED}
# our refusals print "error: MESSAGE"; click's own (a value that is not an int, an unknown option) a panel titled Error
REFUSAL = re.compile(r"error:\s*\S|─ Error ─+╮\s*│ \S")
TINY_RUN = [
    "--data",
    "synthetic",
    "--devices",
    "cpu",
    "--epochs",
    "2",
    "--max-steps",
    "1",
    "--max-eval-steps",
    "1",
    "--quiet",
]
FUZZ_SETTINGS = dict(
    deadline=None,
    database=None,  # no .hypothesis folder in the checkout
    # the autouse fixtures (a temporary results database) are shared by a test's examples, on purpose
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# the profile's examples over hypothesis' 100: 1 in CI's profile, 10 in `--hypothesis-profile explore` (conftest.py)
SCALE = max(1, settings.default.max_examples // 100)

HUGE = "99999999999999999999999"  # beyond int64: no database or torch call can hold it
JUST_TOO_LARGE = str(2**63)
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=8)  # no shell
# can pass a NUL byte or a lone surrogate
INTEGERS = st.sampled_from(["0", "-5", "1", "2", "٣", HUGE, JUST_TOO_LARGE, "", "abc", "1e3", "nan", "inf", "2.5"])
FLOATS = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "0.5", "1", "1.5", HUGE, "", "abc"])
PLACES = ("missing folder", "folder", "junk file", "empty file", "new file", "")  # made by make_places
PATHS = st.sampled_from(PLACES).map(lambda name: ("place", name))
STRINGS = st.one_of(st.sampled_from(["", " ", "ü", "日本", "=", ",", "[", "*", "-", "..", "a" * 300]), TEXT)
DEVICES = st.one_of(
    st.sampled_from(
        [
            "cpu",
            "CPU",
            " cpu , cpu ",
            "auto",
            "cuda:99",
            "cpu,,cpu",
            "gpu",
            "",
            ",",
            "cuda:" + HUGE,
            "cpu:1",
            "mps:7",
            "tpu",
            "cpu;cuda",
            "ü",
        ]
    ),
    TEXT,
)
PRICES = st.one_of(
    st.sampled_from(
        [
            "cpu=",
            "cpu=-1",
            "=3",
            "cpu=abc",
            "cpu=nan",
            "cpu=inf",
            ",",
            "",
            "gpu=1",
            "cpu=1,cpu=2",
            "cpu=0.10,cuda=2.50",
            "cuda:1=4",
            "cpu==1",
            "x.toml",
        ]
    ),
    TEXT,
    PATHS,
)
SETTINGS = st.sampled_from(
    [
        "=",
        "a==b",
        "depth=",
        "learning_rate=",
        "learning_rate=nan",
        "learning_rate=-1",
        "learning_rate=0.01",
        "learning_rate=,",
        "batch_size=0",
        "batch_size=1e3",
        "batch_size=" + HUGE,
        "epochs=3",
        "adam_epsilon=inf",
        "ü=1",
        "learning_rate",
    ]
)
COMMON_VALUES = {"--devices": DEVICES, "--price": PRICES, "--set": SETTINGS}
# run and sweep: every value that passes keeps training tiny (no download, no tuning trials, no extra processes)
TINY_VALUES = {
    **COMMON_VALUES,
    "--data": st.sampled_from(["synthetic", "", "imaginary", "ü", "x:y", "os:getcwd"]),
    "--model": st.sampled_from(["", "x", "x:y", "no_such_module_zz:build", ":", "os:getcwd"]),
    "--loss": st.sampled_from(["", "mse", "x:y", "ü"]),
    "--optimizer": st.sampled_from(["", "sgd", "x:y", "ü"]),
    "--mode": st.sampled_from(["seed", "", "fast", ",", "ü"]),
    "--precision": st.sampled_from(["bf16", "fp64", ""]),  # each refused in seed mode, the only mode here
    "--compile": st.sampled_from(["on", "maybe", ""]),
    "--suite": st.sampled_from(["quick", "seeds", "", "huge"]),
    "--nproc": st.sampled_from(["0", "-1", "1", HUGE, "abc"]),  # never 2 or more: that would start processes
    "--nnodes": st.sampled_from(["0", "-1", "1", HUGE]),
    "--batch-size": st.sampled_from(["0", "-5", "auto2", "1e3", "", "ü", HUGE, JUST_TOO_LARGE, "8", " 16 "]),
}
SWEEP_VALUES = {
    **TINY_VALUES,
    "--batch-size": st.sampled_from(["0", ",", "8,16", "", "-5", "auto", "1e3", HUGE, "8,,8", "8,ü"]),
    "--workers": st.sampled_from(["0", "-1", "", "ü", HUGE, ",", "0,0"]),
}
WORKLOADS = st.sampled_from(["mnist-cnn2", "mnist-*", "", "ü", "[", "resnet18", "cifar10-mlp", "mnist-cnn2 "])


def value_type(parameter) -> type:
    """The Python type a parameter's values are read as (a list option's: its items')."""
    annotation = parameter.type_descriptor.annotation
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is list else annotation


def values_for(parameter, overrides: dict) -> st.SearchStrategy:
    """Hostile values for `parameter`: the ones named for its flag, else by its type."""
    flag = max(parameter.opts, key=len)
    if flag in overrides:
        return overrides[flag]
    return {int: INTEGERS, float: FLOATS, Path: st.one_of(PATHS, STRINGS)}.get(value_type(parameter), STRINGS)


def option_arguments(command: str, overrides: dict, leave_out: tuple[str, ...] = ()) -> st.SearchStrategy:
    """Zero to three of `command`'s options, each with a value from values_for (a flag option: just the flag)."""
    options = [
        param
        for param in COMMANDS[command].params
        if param.param_type_name == "option" and param.opts[0] not in leave_out
    ]

    def with_value(option) -> st.SearchStrategy:
        flag = st.sampled_from(option.opts)
        if option.is_flag:
            return flag.map(lambda name: [name])
        return st.tuples(flag, values_for(option, overrides)).map(list)

    chosen = st.lists(st.sampled_from(options), max_size=3)
    return chosen.flatmap(lambda picked: st.tuples(*map(with_value, picked))).map(lambda parts: sum(parts, []))


# predict's checkpoint is never a junk file nor a name too long to look up: checkpoint.py crashes on those (see
# test_a_junk_checkpoint_is_refused below)
ARGUMENT_VALUES = {
    "model": st.one_of(
        st.sampled_from(["missing folder", "folder", "empty file", ""]).map(lambda name: ("place", name)),
        st.text(max_size=8),
    )
}


def positional_arguments(command: str) -> st.SearchStrategy:
    """Values for the command's arguments (a list argument gets one to three)."""
    arguments = [param for param in COMMANDS[command].params if param.param_type_name == "argument"]
    drawn = [
        st.lists(values_for(argument, {}), min_size=1, max_size=3)
        if argument.nargs == -1
        else ARGUMENT_VALUES.get(argument.name, values_for(argument, {})).map(lambda value: [value])
        for argument in arguments
    ]
    return st.tuples(*drawn).map(lambda parts: sum(parts, []))


def make_places(root: Path) -> dict[str, str]:
    """The paths the fuzzing names, made afresh in `root`: each a different way for a file argument to be wrong (or
    right). Afresh for every command, since one may create what the next expects missing (a run creates its --json)."""
    (root / "folder").mkdir()
    (root / "junk.json").write_text("not JSON, not SQLite, not an image\n")
    (root / "empty.json").write_bytes(b"")
    (root / "writes").mkdir()
    return {
        "missing folder": str(root / "missing" / "out.json"),
        "folder": str(root / "folder"),
        "junk file": str(root / "junk.json"),
        "empty file": str(root / "empty.json"),
        "new file": str(root / "writes" / "out.json"),
        "": "",
    }


def invoke(arguments: list):
    """Run the command line in an empty temporary folder, with ("place", NAME) values turned into real paths: a
    fuzzed name such as 'ü' is a file a command may write (and `report` writes report.html into the current folder),
    never into the checkout."""
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        patch.chdir(scratch)
        places = make_places(Path(scratch))
        resolved = [places[item[1]] if isinstance(item, tuple) else item for item in arguments]
        return cli.invoke(app, resolved), resolved


def assert_handled(result, arguments: list[str]) -> None:
    """The property: a documented exit status, no traceback, and a refusal that says what is wrong."""
    shown = f"devicebench {' '.join(map(repr, arguments))} ->\n{result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (shown, result.exc_info)
    assert "Traceback" not in result.output, shown
    assert result.exit_code in DOCUMENTED_EXIT_STATUSES, shown
    if result.exit_code == EXIT_USAGE:
        assert REFUSAL.search(result.output), shown


@settings(max_examples=60 * SCALE, **FUZZ_SETTINGS)
@given(
    command=st.sampled_from(["compare", "history", "list", "report", "export", "import", "predict", "devices"]),
    data=st.data(),
)
def test_the_commands_that_read_and_write_stored_runs_handle_any_input(command, data):
    arguments = data.draw(positional_arguments(command)) + data.draw(option_arguments(command, COMMON_VALUES))
    result, resolved = invoke([command, *arguments])
    assert_handled(result, resolved)


@pytest.mark.slow
@settings(max_examples=60 * SCALE, **FUZZ_SETTINGS)
@given(command=st.sampled_from(["run", "sweep"]), data=st.data())
def test_run_and_sweep_refuse_bad_values_and_train_good_ones(command, data):
    if command == "run":
        names = data.draw(st.lists(WORKLOADS, min_size=1, max_size=2))  # none would run the whole quick suite
        options = data.draw(option_arguments("run", TINY_VALUES))
    else:
        names = [data.draw(WORKLOADS)]
        options = data.draw(option_arguments("sweep", SWEEP_VALUES))
    # the fuzzed options come last: click keeps the last value of an option given twice, so they win
    result, resolved = invoke([command, *names, *TINY_RUN, *options])
    assert_handled(result, resolved)


MUST_BE_REFUSED = {  # for commands that would measure for minutes: one of these is always given
    "--devices": st.sampled_from(["cuda:99", "cpu,,cpu", "gpu", "", ",", "cuda:" + HUGE, "cpu:1"]),
    "--repeats": st.sampled_from(["0", "-5", HUGE, "abc"]),
    "--seed": st.sampled_from(["-1", HUGE, "x"]),
    "--threads": st.sampled_from(["0", "-2", HUGE, "10000"]),
    "--data": st.sampled_from(["", "imaginary", "x:y"]),
    "--data-dir": st.sampled_from([("place", "missing folder"), ("place", "junk file")]),
    "--mode": st.sampled_from(["", "fast", "ü"]),
    "--json": st.sampled_from([("place", "missing folder"), ("place", "folder"), ("place", "")]),
    "--db": st.sampled_from([("place", "folder"), ("place", "junk file"), ("place", "missing folder")]),
    "--tensorboard": st.sampled_from([("place", "junk file")]),
}


@settings(max_examples=30 * SCALE, **FUZZ_SETTINGS)
@given(command=st.sampled_from(["reproduce", "calibrate"]), data=st.data())
def test_reproduce_and_calibrate_refuse_a_bad_value_before_measuring(command, data):
    refusable = sorted(
        set(MUST_BE_REFUSED)
        & {
            max(param.opts, key=len)
            for param in COMMANDS[command].params
            if param.param_type_name == "option" and not param.is_flag
        }
    )
    flag = data.draw(st.sampled_from(refusable))
    bad = [flag, data.draw(MUST_BE_REFUSED[flag])]
    seeds = (
        data.draw(st.lists(st.sampled_from(["S1", "all", "S9", "", "ü"]), max_size=2)) if command == "reproduce" else []
    )
    # the other options come first, so that the bad value is the one click keeps
    others = data.draw(option_arguments(command, COMMON_VALUES, leave_out=(flag,)))
    # and should one be let through by mistake, the shortest measurement there is
    shortest = ["--quick", "--data", "synthetic", "--devices", "cpu"] if command == "reproduce" else ["--quick"]
    result, resolved = invoke([command, *seeds, *shortest, *others, *bad])
    assert_handled(result, resolved)
    assert result.exit_code == EXIT_USAGE, result.output


# The crashes and silent acceptances the fuzzing found, each with what the user is told now.
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["run", "mnist-cnn2", "--devices", "cuda:" + HUGE], f"device 'cuda:{HUGE}' is not available on this machine"),
        (["calibrate", "--devices", "cuda:" + HUGE], "is not available on this machine. Devices present: cpu"),
        (["run", "mnist-cnn2", "--seed", "-1"], "--seed must be 0 or more, got -1"),
        (["run", "mnist-cnn2", "--seed", HUGE], f"--seed {HUGE} is too large: at most {2**63 - 1}"),
        (["run", "mnist-cnn2", "--batch-size", HUGE], f"--batch-size {HUGE} is too large"),
        (["run", "mnist-cnn2", "--set", "batch_size=" + HUGE], f"--set batch_size='{HUGE}' is too large"),
        (["run", "mnist-cnn2", "--threads", HUGE], "logical cores, and more threads than cores only compete for them"),
        (["run", "mnist-cnn2", "--workers", HUGE], "use --workers"),
        (["run", "mnist-cnn2", "--node-rank", "3"], "--node-rank is for training in several processes; add --nproc N"),
        (["run", "mnist-cnn2", "--per-device-batch"], "--per-device-batch is for training in several processes"),
        (["sweep", "mnist-cnn2", "--set", "learning_rate=,"], "--set 'learning_rate=,' is not KEY=VALUE[,VALUE...]"),
        (["compare", "--last", HUGE], "Invalid value for '--last'"),
        (["history", "--last", HUGE], "Invalid value for '--last'"),
        (
            ["compare", "--price", "cpu=inf"],
            "--price 'cpu=inf': the price of cpu must be a finite number, zero or more",
        ),
        (["compare", "--price", ""], "--price '' names no prices; write e.g. --price cpu=0.10,cuda=2.50"),
        (["compare", "--price", ","], "--price ',' names no prices"),
        (["compare", "--price", "cpu=1,cpu=2"], "--price 'cpu=1,cpu=2' prices cpu more than once"),
        (["compare", "--price", "=3"], "'=3' is not DEVICE=PRICE"),
        (["report", "--out", ""], "cannot write --out .: it is a folder; name a file inside it"),
    ],
)
def test_what_the_fuzzing_found_is_refused_with_the_fix(arguments, message):
    if arguments[0] in ("run", "sweep"):  # tiny, should anything be let through by mistake
        arguments = [*arguments[:2], *TINY_RUN, *arguments[2:]]
    result = cli.invoke(app, arguments)
    assert result.exit_code == EXIT_USAGE, result.output
    assert message in " ".join(result.output.split()), result.output  # rich may fold a long message


def test_a_folder_where_a_file_is_written_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    for flag in ("--json", "--save"):
        result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, flag, str(tmp_path)])
        assert result.exit_code == EXIT_USAGE
        assert f"cannot write {flag} {tmp_path}: it is a folder; name a file inside it" in result.output
    (tmp_path / "runs.json").mkdir()
    export = cli.invoke(app, ["export", str(tmp_path / "runs.json")])
    assert export.exit_code == EXIT_USAGE
    assert f"cannot write to {tmp_path / 'runs.json'}: it is a folder" in export.output


def test_a_file_or_a_missing_folder_where_a_folder_is_read_is_refused_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    file = tmp_path / "notes.txt"
    file.write_text("a file")
    for flag in ("--data-dir", "--tensorboard"):
        result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, flag, str(file)])
        assert result.exit_code == EXIT_USAGE
        assert f"{flag} {file} is a file, not a folder" in result.output
    missing = tmp_path / "pets"
    result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--data-dir", str(missing)])
    assert result.exit_code == EXIT_USAGE
    assert f"--data-dir {missing} does not exist: check the path, or create the folder first" in result.output
    assert not missing.exists()  # a mistyped folder is not made, nor filled with a download


@pytest.mark.parametrize("name", ["model.pt", pytest.param("m" * 300, id="a-name-too-long")])
def test_a_junk_checkpoint_is_refused(tmp_path, name):
    junk = tmp_path / name
    if len(name) < 255:
        junk.write_text("hello junk\n")
    result = cli.invoke(app, ["predict", str(junk), str(tmp_path / "digit.png")])
    assert result.exit_code == EXIT_USAGE and "error:" in result.output
