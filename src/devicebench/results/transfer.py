"""The export and import files: JSON (the `Result` dicts, importable again) or CSV (one row per epoch), and the
checked reading of an export or a `devicebench run --json` file back into `Result`s, one session at a time.

    devicebench export laptop.json --machine laptop && devicebench import laptop.json --db other.sqlite
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import itertools
import json
import re
import typing
import unicodedata
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from devicebench.errors import DevicebenchError
from devicebench.files import UnusableFile, require_regular_file
from devicebench.results.pooling import ID_MARK
from devicebench.results.schema import (
    READABLE_SCHEMA_VERSIONS,
    SCHEMA_VERSION,
    UTC_TIME_FORMAT,
    InvalidResult,
    Result,
    RunSettings,
    RunStatus,
    finite_or_none,
    write_atomically,
)
from devicebench.results.store_rows import EPOCH_COLUMNS, LIST_EPOCH_COLUMNS, json_or_none

EXPORT_KIND = "devicebench-export"
FINISHED_STATUSES = tuple(status for status in typing.get_args(RunStatus) if status != "running")
MACHINE_IDENTITY_KEYS = ("machine_id", "machine_name", "hostname")  # the fingerprint keys the store indexes
CLOCK_SKEW = datetime.timedelta(days=1)  # how far ahead of this machine's clock another machine's may be
# Run and session ids as devicebench writes them (32 hex digits) and tests name them: letters, digits, `-` and `_`.
# No space or line break (`forget " "` could never name it) and no character `history` would not show as typed.
ID_PATTERN = re.compile(r"[0-9A-Za-z_-]{1,64}")


class ResultsFileError(DevicebenchError, ValueError):
    """A file to import is missing, is not JSON, or holds no devicebench results this version can read."""


def export_document(results: Iterable[Result]) -> dict[str, Any]:
    """What an export JSON file holds; `devicebench import` reads it back."""
    return {"schema_version": SCHEMA_VERSION, "kind": EXPORT_KIND, "results": [result.to_dict() for result in results]}


def write_json_export(path: Path, results: list[Result]) -> None:
    write_atomically(path, json.dumps(finite_or_none(export_document(results)), indent=2, allow_nan=False) + "\n")


# One CSV row per epoch: the run's identity, its machine and device, its settings, then the epoch's figures
CSV_RUN_FIELDS = (
    "run_id",
    "workload",
    "seed_experiment",
    "device",
    "device_name",
    "repeat",
    "started_utc",
    "status",
    "error",
    "definition",  # the workload definition's fingerprint: rows of two definitions are two experiments
)
SETTINGS_COLUMNS = tuple(field.name for field in dataclasses.fields(RunSettings))
CSV_COLUMNS = ("result_id", "machine_name", "machine_id", *CSV_RUN_FIELDS, *SETTINGS_COLUMNS, *EPOCH_COLUMNS)


# What starts a formula in a spreadsheet (OWASP, "CSV Injection"): a name such as =cmd|' /C calc'!A0 would run
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def write_csv_export(path: Path, results: list[Result]) -> None:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    writer.writerows({column: _spreadsheet_text(value) for column, value in row.items()} for row in _csv_rows(results))
    write_atomically(path, text.getvalue())


def _spreadsheet_text(value: Any) -> Any:
    """A text cell that a spreadsheet would take for a formula, with a ' before it, as OWASP advises, so that it is
    shown as the text it is; a number, negative ones too, stays a number (only text can carry a formula)."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _csv_rows(results: list[Result]) -> Iterator[dict[str, Any]]:
    for result in results:
        for run in result.runs:
            identity = {
                "result_id": result.result_id,
                "machine_name": result.machine["machine_name"],
                "machine_id": result.machine["machine_id"],
                **{column: getattr(run, column) for column in CSV_RUN_FIELDS},
            }
            settings = dataclasses.asdict(run.settings)
            settings["hyperparameters"] = json.dumps(settings["hyperparameters"])  # one cell
            for epoch in run.epochs:
                figures = finite_or_none(dataclasses.asdict(epoch))
                yield {
                    **identity,
                    **settings,
                    **figures,
                    **{column: json_or_none(figures[column]) for column in LIST_EPOCH_COLUMNS},
                }


KEPT_CONTROL_CHARACTERS = "\n\t"  # line breaks and tabs in error messages are text; every other one is not
# Characters that are invisible yet change what is shown: bidirectional controls (U+202E turns "gpu-box" around to
# read as another name) and zero-width ones (two names that look the same but are not)
INVISIBLE_CHARACTERS = frozenset(
    "\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2066\u2067\u2068\u2069\ufeff"
)


def printable(value: Any) -> Any:
    """`value` (parsed JSON) with control characters taken out of every string: a name from another machine's file
    must not reach the terminal as an escape sequence (ESC ]8 links, cursor moves, a cleared screen), nor as
    invisible characters that reorder or disguise it (INVISIBLE_CHARACTERS)."""
    if isinstance(value, str):
        if value.isascii() and value.isprintable():  # most text, at once: no control character, nothing invisible
            return value
        return "".join(
            character
            for character in value
            if character in KEPT_CONTROL_CHARACTERS
            or (unicodedata.category(character) != "Cc" and character not in INVISIBLE_CHARACTERS)
        )
    if isinstance(value, dict):
        return {printable(key): printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [printable(item) for item in value]
    return value


def read_results_file(path: Path, *, now_utc: str | None = None) -> list[Result]:
    """The sessions in an export file or in a `devicebench run --json` file, all of them (stream_results_file reads
    them one at a time)."""
    return list(stream_results_file(path, now_utc=now_utc))


def stream_results_file(path: Path, *, now_utc: str | None = None) -> Iterator[Result]:
    """The sessions in an export file or in a `devicebench run --json` file, one at a time as the file is read, so
    that an export of any size is never whole in memory; every field checked (results.schema's Result.from_dict).
    `now_utc`, the time now (engine.timing.wall_clock_utc()): a session or run started more than CLOCK_SKEW after it
    is refused too. Nothing in the file is trusted: ResultsFileError says what is wrong, naming a wrong field by its
    path, when the reading reaches it, after the sessions before it. Store them in one transaction
    (Store.import_results), which the error rolls back: one wrong field anywhere refuses the whole file."""
    try:
        require_regular_file(path, "the results file")
        file = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except UnusableFile as error:
        raise ResultsFileError(str(error)) from None
    except OSError as error:
        raise ResultsFileError(f"cannot read {path} ({error.strerror})") from None
    with file:
        try:
            yield from _results_in(path, _JsonReader(file), now_utc)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ResultsFileError(f"{path} is not valid JSON ({error})") from None
        except RecursionError:
            raise ResultsFileError(
                f"{path} is not a devicebench results file: its JSON is nested too deeply to be one"
            ) from None
        except OSError as error:
            raise ResultsFileError(f"cannot read {path} ({error.strerror})") from None


def _results_in(path: Path, reader: _JsonReader, now_utc: str | None) -> Iterator[Result]:
    """The checked sessions of the JSON object `reader` is at: an export's `results` one by one, as they come, the
    other members whole (a `run --json` file is one session: its members are the session's fields)."""
    if reader.peek() != "{":
        reader.value()  # not JSON: its error; JSON, but not an object: neither kind of file
        raise ResultsFileError(f"{path} is neither a devicebench export nor a `devicebench run --json` file")
    reader.take("{")
    members: dict[str, Any] = {}
    streamed = False  # whether an export's results were read (and checked) one by one
    while reader.peek() != "}":
        if members or streamed:
            reader.take(",")
        name = reader.value()
        if not isinstance(name, str):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", str(name), 0)
        reader.take(":")
        if name == "results" and members.get("kind", EXPORT_KIND) == EXPORT_KIND and reader.peek() == "[":
            _check_version(path, members)  # when it came first, as exports write it
            reader.take("[")
            for index in itertools.count():
                if reader.peek() == "]":
                    break
                if index:
                    reader.take(",")
                yield _checked_result(path, reader.value(), f"results[{index}]", now_utc)
            reader.take("]")
            streamed = True
        else:
            members[name] = reader.value()
    reader.take("}")
    if reader.peek():
        raise json.JSONDecodeError("Extra data", reader.peek(), 0)
    exported = members.get("kind") == EXPORT_KIND
    if not (exported or "runs" in members) or (streamed and not exported):
        raise ResultsFileError(f"{path} is neither a devicebench export nor a `devicebench run --json` file")
    _check_version(path, {"schema_version": None, **members})
    if not exported:
        yield _checked_result(path, members, "", now_utc)  # one run's --json
    elif not streamed:
        raise ResultsFileError(
            f"{path} holds a result devicebench cannot read (results: expected a list, got "
            f"{type(members.get('results')).__name__})"
        )


def _check_version(path: Path, members: dict[str, Any]) -> None:
    """ResultsFileError unless the file's schema_version, where `members` has one, is one this devicebench reads."""
    version = members.get("schema_version", READABLE_SCHEMA_VERSIONS[0])
    if version not in READABLE_SCHEMA_VERSIONS or isinstance(version, bool):
        readable = " and ".join(map(str, READABLE_SCHEMA_VERSIONS))
        raise ResultsFileError(
            f"{path} holds results of schema version {version!r}; this devicebench reads "
            f"versions {readable}: upgrade devicebench or re-export them"
        )


def _checked_result(path: Path, item: Any, where: str, now_utc: str | None) -> Result:
    try:
        result = Result.from_dict(printable(item), where)
        _check_finished_session(result, where, now_utc)
    except (KeyError, TypeError, ValueError) as error:
        raise ResultsFileError(
            f"{path} holds a result devicebench cannot read, so nothing of it was imported ({error})"
        ) from None
    return result


READ_CHARACTERS = 1 << 20  # read from a file being imported at a time, at least


class _JsonReader:
    """JSON text read from a file a piece at a time and decoded value by value (json.JSONDecoder.raw_decode), the
    buffer growing only as far as the value being decoded: an export's sessions are decoded one at a time."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self._text = ""
        self._position = 0  # in _text, of the first character not yet consumed
        self._ended = False
        self._decoder = json.JSONDecoder()

    def _read_more(self) -> None:
        """Append the file's next piece, as long as what is buffered: a long value is tried a few times, not once a
        piece (which would be quadratic in its length)."""
        piece = self._file.read(max(READ_CHARACTERS, len(self._text) - self._position))
        self._text = self._text[self._position :] + piece
        self._position = 0
        self._ended = not piece

    def peek(self) -> str:
        """The next character that is not white space, left unconsumed; "" at the end of the file."""
        while True:
            # the pattern json's own decoder skips white space with; typeshed leaves it out
            self._position = json.decoder.WHITESPACE.match(self._text, self._position).end()  # type: ignore[attr-defined]
            if self._position < len(self._text) or self._ended:
                return self._text[self._position : self._position + 1]
            self._read_more()

    def take(self, expected: str) -> None:
        """Consume `expected`, the next character that is not white space; JSONDecodeError when it is another."""
        if self.peek() != expected:
            raise json.JSONDecodeError(f"Expecting {expected!r}", self._text, self._position)
        self._position += 1

    def value(self) -> Any:
        """Decode the next value and consume it."""
        self.peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._position)
            except json.JSONDecodeError:
                if self._ended:
                    raise
            else:  # a number at the end of the buffer may go on in the next piece
                if end < len(self._text) or self._ended:
                    self._position = end
                    return value
            self._read_more()


def _check_finished_session(result: Result, where: str, now_utc: str | None) -> None:
    """What an import needs beyond a well-formed Result: the machine's identity, finished runs only (a file is
    written once every run has ended; `devicebench run --json` marks a run cut short `interrupted`), and, given the
    time now, no time to come (a session dated 9999 would stay the latest, `--last 1`, for ever)."""
    _check_identity(result, where)
    latest = (
        None
        if now_utc is None
        else (datetime.datetime.strptime(now_utc, UTC_TIME_FORMAT) + CLOCK_SKEW).strftime(UTC_TIME_FORMAT)
    )
    times = [(_at(where, "created_utc"), result.created_utc)]
    for index, run in enumerate(result.runs):
        place = _at(where, f"runs[{index}]")
        if run.status == "running":
            raise InvalidResult(
                f"{place}.status: 'running' is not a finished run's status; a file holds runs that "
                f"ended: {', '.join(repr(status) for status in FINISHED_STATUSES)}"
            )
        times.append((f"{place}.started_utc", run.started_utc))
        for number, epoch in enumerate(run.epochs):
            if epoch.input_wait_s is not None and epoch.input_wait_s > epoch.train_time_s:
                raise InvalidResult(
                    f"{place}.epochs[{number}].input_wait_s: {epoch.input_wait_s:g} s is longer than the epoch's "
                    f"training ({epoch.train_time_s:g} s), of which it is a part"
                )
    for place, value in times:
        if latest is not None and value > latest:  # in UTC_TIME_FORMAT, text order is time order
            raise InvalidResult(
                f"{place}: {value} is more than {CLOCK_SKEW.days} day after this machine's clock "
                f"({now_utc}); a run cannot have started in the future"
            )


def _check_identity(result: Result, where: str) -> None:
    """The machine's identity, of a name no label could be taken for, and ids that `forget` can name."""
    for key in MACHINE_IDENTITY_KEYS:
        if not isinstance(result.machine.get(key), str) or not result.machine[key]:
            raise InvalidResult(
                f"{_at(where, 'machine')}.{key}: expected a non-empty string, got "
                f"{json.dumps(result.machine.get(key))[:60]}"
            )
    name = result.machine["machine_name"]
    if ID_MARK in name:  # `vm@3f2a1b` could pass for the label of another machine, and be taken as its baseline
        raise InvalidResult(
            f"{_at(where, 'machine')}.machine_name: {name!r} holds {ID_MARK}, which tables put between a machine's "
            "name and its id (vm@3f2a1b/cpu): it could pass for another machine's label; rename the machine where it "
            "ran (DEVICEBENCH_MACHINE) and export again"
        )
    ids = [("result_id", result.result_id)] + [
        (f"runs[{index}].run_id", run.run_id) for index, run in enumerate(result.runs)
    ]
    for place, value in ids:
        if not ID_PATTERN.fullmatch(value):
            raise InvalidResult(
                f"{_at(where, place)}: {json.dumps(value)[:80]} is not an id devicebench writes (up to 64 letters, "
                "digits, - and _)"
            )


def _at(where: str, field: str) -> str:
    """A field's path in the file: `results[3].runs[0]` in an export, `runs[0]` in a `run --json` file."""
    return f"{where}.{field}" if where else field
