"""The small benchmarks' arguments: a wrong name or an unreadable file is a usage error naming it, not a
traceback; and `definitions.py --compare` names the workloads whose fingerprints differ and in what."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks are scripts, not a package

import definitions  # noqa: E402
import tuning_switches  # noqa: E402


def usage_error(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err


def test_an_unknown_workload_is_a_usage_error_naming_it(capsys):
    for main, argv in ((definitions.main, ["nosuch"]), (tuning_switches.main, ["mnist-cnn2", "nosuch"])):
        said = usage_error(main, argv, capsys)
        assert "unknown workload 'nosuch'; known workloads: " in said and "(see `devicebench list`)" in said
        assert " mnist-cnn2, " in said  # the registry's names, after any an earlier test registered
    said = usage_error(tuning_switches.main, ["mnist-cnn2", "--precisions", "fp32,fp16"], capsys)
    assert "tuned mode trains fp32 or bf16, not fp16" in said


def test_compare_refuses_a_missing_or_foreign_file_and_names_what_differs(tmp_path, capsys):
    here = tmp_path / "here.json"
    assert definitions.main(["mnist-cnn2", "cifar10-mlp", "--output", str(here)]) == 0
    capsys.readouterr()
    assert "cannot be read" in usage_error(
        definitions.main, ["--compare", str(tmp_path / "no.json"), str(here)], capsys
    )
    (tmp_path / "other.json").write_text("[1, 2]")
    foreign = [str(tmp_path / "other.json"), str(here)]
    assert "is not a file written with --output" in usage_error(definitions.main, ["--compare", *foreign], capsys)
    made = json.loads(here.read_text())
    made["torch"] = "2.11.0"
    made["workloads"]["mnist-cnn2"]["fingerprint"] = "000000000000"
    made["workloads"]["mnist-cnn2"]["described"]["initialisation"] = []
    there = tmp_path / "there.json"
    there.write_text(json.dumps(made))
    assert definitions.main(["--compare", str(here), str(there)]) == 1
    said = capsys.readouterr().out
    assert "against 2.11.0: 1 definitions differ" in said
    assert "mnist-cnn2: " in said and "differs in initialisation" in said and "cifar10-mlp" not in said
