"""benchmarks/gpu_validation.py: its --cpu-smoke run end to end (every part run or skipped with its reason, the
runs' JSON, the summary), and the budget machinery driven with tiny commands of our own (a part that overruns is
stopped, one that does not fit is skipped, a part may use the time earlier parts left but not what later ones need,
a failure makes the exit status 1).

    python -m pytest tests/test_gpu_validation.py -q
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from devicebench.workloads import list_workloads

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks are scripts, not a package; they import each other this way
import gpu_validation  # noqa: E402
from gpu_validation import (  # noqa: E402
    PARTS,
    SMOKE,
    STATUSES,
    TIME_LIMIT_S,
    WORKLOADS,
    Machine,
    Part,
    exit_status,
    judge,
    key_figures,
    pytest_counts,
    run_figures,
    run_parts,
    why_not,
)

SMOKE_RUNS = {"seed": ["mnist-cnn2"], "tuned": ["cifar10-mlp"]}


# --- the smoke run, end to end ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `--cpu-smoke` run for the whole module (about 35 s on 2 cores): its exit status, output and files."""
    out = tmp_path_factory.mktemp("smoke")
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_validation.py"), "--cpu-smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    json_files, markdown_files = sorted(out.glob("gpu-validation-*.json")), sorted(out.glob("gpu-validation-*.md"))
    document = json.loads(json_files[0].read_text()) if json_files else None
    return {
        "completed": completed,
        "json_files": json_files,
        "markdown_files": markdown_files,
        "document": document,
        "parts": {part["name"]: part for part in (document or {}).get("parts", [])},
    }


@pytest.mark.slow
def test_the_smoke_run_passes_and_writes_its_json_and_its_summary_named_after_the_hardware(smoke):
    completed = smoke["completed"]
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    (json_file,), (markdown_file,) = smoke["json_files"], smoke["markdown_files"]
    document = smoke["document"]
    name = f"gpu-validation-{gpu_validation.slug(document['machine']['cpu']['model'])}"
    assert (json_file.stem, markdown_file.stem) == (name, name)  # no GPU: named after the CPU
    assert document["mode"] == "cpu-smoke" and document["failed"] == []
    assert 0 < document["wall_s"] < document["time_limit_s"] == TIME_LIMIT_S
    assert f"written to {json_file}" in completed.stdout


@pytest.mark.slow  # shares the smoke run's 35 s with the slow test above: one suite pays for it, once
def test_every_part_of_the_plan_has_a_status_in_the_plan_s_order(smoke):
    assert list(smoke["parts"]) == [part.name for part in PARTS]
    for part in smoke["parts"].values():
        assert part["status"] in STATUSES, part
        assert part["status"] in ("pass", "skipped"), (part["name"], part["reason"], part["output_tail"])


@pytest.mark.slow  # shares the smoke run's 35 s with the slow test above: one suite pays for it, once
def test_each_run_part_trained_its_workloads_on_the_cpu_with_steady_throughput(smoke):
    for name, workloads in SMOKE_RUNS.items():
        part = smoke["parts"][name]
        assert part["status"] == "pass" and part["exit_code"] == 0
        assert "--devices" in part["command"] and part["command"][part["command"].index("--devices") + 1] == "cpu"
        runs = part["result"]["runs"]
        assert [run["workload"] for run in runs] == workloads
        for run in runs:
            assert run["status"] == "ok" and run["device"] == "cpu"
            assert run["summary"]["steady_samples_per_s"] > 0
            assert [(epoch["phase"], epoch["steps"]) for epoch in run["epochs"]] == [("warmup", 3), ("steady", 3)]
            assert run["settings"]["mode"] == name
        assert all(f"{workload} cpu: " in part["key_figures"] for workload in workloads)
        assert re.search(r"[\d,]+ samples/s, epoch [\d.]+ s", part["key_figures"])


@pytest.mark.slow  # shares the smoke run's 35 s with the slow test above: one suite pays for it, once
def test_the_fingerprint_the_calibration_and_the_gpu_tests_are_recorded(smoke):
    document, parts = smoke["document"], smoke["parts"]
    assert document["machine"] == parts["devices"]["result"] and document["machine"]["cpu"]["logical_cores"] >= 1
    # devicebench's own: a plugin another test installs may show in the subprocess and not in this process
    assert sorted(entry["name"] for entry in parts["list"]["result"] if entry["origin"] == "devicebench") == sorted(
        entry.name for entry in list_workloads() if entry.origin == "devicebench"
    )
    cpu = parts["calibrate"]["result"]["devices"]["cpu"]
    assert cpu["matmul"]["fp32"]["rate"] > 0 and parts["calibrate"]["command"][-3:] == ["cpu", "--quick", "--json"]
    counts = parts["pytest-gpu"]["result"]
    assert counts["skipped"] > 0 and counts.get("failed", 0) == 0
    if not torch.cuda.is_available():
        assert "passed" not in counts  # every GPU test skips without a GPU


@pytest.mark.slow  # shares the smoke run's 35 s with the slow test above: one suite pays for it, once
def test_the_parts_that_make_no_sense_on_a_cpu_are_skipped_with_their_reason(smoke):
    skipped = {name: reason for name, reason in SMOKE.items() if isinstance(reason, str)}
    assert {"engine-vs-plain", "resnet50", "compile", "nproc"} <= set(skipped)
    for name, reason in skipped.items():
        part = smoke["parts"][name]
        assert (part["status"], part["reason"], part["wall_s"]) == ("skipped", f"GPU plan only: {reason}", None)
    assert sorted(smoke["document"]["skipped"]) == sorted(skipped)


@pytest.mark.slow  # shares the smoke run's 35 s with the slow test above: one suite pays for it, once
def test_the_summary_has_a_row_for_every_part_with_its_status_and_figures(smoke):
    text = smoke["markdown_files"][0].read_text()
    assert "| part | status | seconds (budget) | key figures |" in text
    for part in smoke["parts"].values():
        (row,) = [line for line in text.splitlines() if line.startswith(f"| {part['name']} | {part['status']} |")]
        assert (part["key_figures"] or part["reason"]).replace("|", "\\|") in row
    assert "## What failed" not in text


# --- the plan --------------------------------------------------------------------------------------------------


def test_the_gpu_plan_fits_eight_minutes_in_the_order_asked_and_trains_every_workload():
    names = [part.name for part in PARTS]
    assert names == [  # what the next GPU run most needs to tell first (issue 40)
        "devices",
        "engine-vs-plain",
        "resnet50",
        "calibrate",
        "pytest-gpu",
        "list",
        "seed",
        "tuned",
        "compile",
        "nproc",
    ]
    assert list(SMOKE) == names  # the smoke run has a word for every part
    assert TIME_LIMIT_S == 480 and sum(part.budget_s for part in PARTS) <= TIME_LIMIT_S - 10  # 10 s for the script
    for part in PARTS:  # each budget is what --plan shows it is made of: a process's start first, a GPU run's fit
        assert part.budget_s == math.ceil(sum(seconds for _, seconds in part.costs)) and part.costs[0][0] == "start"
        if "run" in part.command and "cuda" in part.command:
            assert dict(part.costs)["fit"] == gpu_validation.CACHED_FIT_S, part.name
    first_fit = dict(PARTS[1].costs)["fit"]  # engine-vs-plain's first tuned process: the plan's first GPU run
    assert first_fit == gpu_validation.FIRST_FIT_S + gpu_validation.CACHED_FIT_S
    planned = {name for part in PARTS for name in part.workloads}
    registry = {entry.name for entry in list_workloads() if entry.origin == "devicebench"}
    assert planned <= registry  # a renamed workload breaks the plan here, not on the GPU machine
    assert registry - planned == set(gpu_validation.LEFT_OUT)  # a new workload must get a part, or a reason
    for part in [*PARTS, *(entry for entry in SMOKE.values() if isinstance(entry, Part))]:
        assert (WORKLOADS in part.command) == bool(part.workloads), part.name


# --- the budget machinery, on tiny commands ------------------------------------------------------------------


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def part(name: str, code: str, budget_s: float, **fields) -> Part:
    return Part(name, "script", python(code), budget_s, **fields)


CHILD = (
    "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], 'w').write('stopped'), sys.exit(3))); "
    "time.sleep(60)"
)
WAITS_FOR_ITS_CHILD = f"""\
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}, sys.argv[1]])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(child.wait()))  # as devicebench waits for its loader workers
time.sleep(60)
"""
LEAVES_A_CHILD = """\
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
"""


def gone(pid: int, timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_part_that_overruns_is_stopped_with_its_whole_process_group_and_recorded_timed_out(tmp_path):
    stopped = tmp_path / "child-stopped"
    sleeper = Part("sleeper", "script", (*python(WAITS_FOR_ITS_CHILD), str(stopped)), 1.0)
    (outcome,) = run_parts([sleeper], tmp_path, time_limit_s=1.5)
    assert outcome.status == "timed out" and 1.0 < outcome.wall_s < 3.0
    assert outcome.allowed_s == pytest.approx(1.5, abs=0.1)
    assert outcome.reason == f"stopped after {outcome.wall_s:.0f} s (allowed {outcome.allowed_s:.0f} s)"
    # SIGTERM reached the child too, not only the process started (a rank, a loader worker), and both had time
    # to finish: the child wrote its file and exited 3, and its parent, which waited for it, with its status
    assert stopped.read_text() == "stopped" and outcome.exit_code == 3
    assert exit_status([outcome]) == 1


def test_what_a_part_leaves_running_is_killed_when_it_ends(tmp_path):
    pid_file = tmp_path / "child.pid"
    (outcome,) = run_parts([Part("leaver", "script", (*python(LEAVES_A_CHILD), str(pid_file)), 5.0)], tmp_path)
    assert outcome.status == "pass" and outcome.wall_s < 4
    assert gone(int(pid_file.read_text()))


def test_a_part_deaf_to_sigterm_is_killed_after_the_grace(tmp_path):
    deaf = part("deaf", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)", 1.0)
    (outcome,) = run_parts([deaf], tmp_path, time_limit_s=1.2)
    assert outcome.status == "timed out" and outcome.exit_code == -9
    assert outcome.wall_s < outcome.allowed_s + 0.5  # SIGKILL within its time: the grace is part of it


def test_a_part_that_does_not_fit_in_the_time_left_is_skipped_saying_how_much_was_left(tmp_path):
    quick, big = part("quick", "print('done')", 1.0), part("big", "print('never')", 100.0)
    outcomes = run_parts([quick, big], tmp_path, time_limit_s=5.0)
    assert [outcome.status for outcome in outcomes] == ["pass", "skipped"]
    reason = outcomes[1].reason
    assert re.fullmatch(r"not enough time left: \d s left, its budget is 100 s", reason), reason
    assert int(reason.split()[4]) <= 5 and outcomes[1].wall_s is None
    assert exit_status(outcomes) == 0  # a skip is no failure
    assert (tmp_path / "logs" / "quick.log").read_text() == "done\n"


@pytest.mark.slow
def test_a_part_may_use_what_earlier_parts_left_but_not_what_later_parts_need(tmp_path):
    fast, slow = part("fast", "pass", 3.0), part("slow", "import time; time.sleep(2)", 1.0)
    outcomes = run_parts([fast, slow], tmp_path, time_limit_s=4.0)
    assert [outcome.status for outcome in outcomes] == ["pass", "pass"]  # 2 s of a 1 s budget: fast left 3 s
    assert outcomes[1].allowed_s > 3.0
    slow, later = part("slow", "import time; time.sleep(5)", 1.0), part("later", "pass", 4.0)
    outcomes = run_parts([slow, later], tmp_path, time_limit_s=6.0)
    assert [outcome.status for outcome in outcomes] == ["timed out", "pass"]  # later's 4 s were kept for it
    assert outcomes[0].allowed_s == pytest.approx(2.0, abs=0.1)  # its 1 s, and the 1 s no later part needs


def test_a_failing_part_fails_the_validation_with_its_last_words(tmp_path):
    broken = part("broken", "import sys; print('loading', flush=True); sys.exit('no GPU here')", 5.0)
    fine = part("fine", "pass", 5.0)
    outcomes = run_parts([broken, fine], tmp_path, time_limit_s=20.0)
    assert [outcome.status for outcome in outcomes] == ["fail", "pass"]  # one failure does not stop the rest
    assert outcomes[0].exit_code == 1 and outcomes[0].reason == "exit code 1: no GPU here"
    assert exit_status(outcomes) == 1 and exit_status(outcomes[1:]) == 0


def test_parts_are_skipped_without_the_gpus_or_the_workloads_they_need_or_when_not_selected(tmp_path):
    one_gpu = Machine(
        fingerprint={"accelerators": [{"kind": "cuda", "name": "H100"}]},
        workloads=[{"name": "gbdt-synthetic", "unavailable": "needs xgboost"}],
    )
    parts = {part.name: part for part in PARTS}
    assert why_not(parts["nproc"], one_gpu, None) == "1 CUDA GPU here: it needs 2 (--nproc over every GPU)"
    assert why_not(parts["compile"], Machine(), None) == "0 CUDA GPUs here: it needs 1"
    no_transformer = Machine(
        fingerprint=one_gpu.fingerprint, workloads=[{"name": "imdb-transformer", "unavailable": "needs a plugin"}]
    )
    assert why_not(parts["compile"], no_transformer, None) == "imdb-transformer cannot run here: needs a plugin"
    assert why_not(parts["seed"], one_gpu, None) is None
    assert why_not(parts["seed"], one_gpu, {"nproc"}) == "not selected (--only)"
    assert why_not(parts["devices"], one_gpu, {"nproc"}) is None  # the others need what it finds

    echo = Part("echo", "script", (*python("import sys; print(*sys.argv[1:])"), WORKLOADS), 5.0, ("a", "b"))
    machine = Machine(workloads=[{"name": "b", "unavailable": "needs a plugin"}])
    (outcome,) = run_parts([echo], tmp_path, machine=machine)
    assert outcome.status == "pass" and outcome.command[-1:] == ["a"] and outcome.output_tail == "a\n"
    assert outcome.notes == ["b left out: needs a plugin"]


def a_run(**changes) -> dict:
    settings = {"mode": "seed", "precision": "fp32", "compiled": False, "world_size": 1}
    run = {
        "workload": "mnist-cnn2",
        "device": "cuda:0",
        "status": "ok",
        "error": None,
        "tuning_note": None,
        "flops_per_sample": 2e9,
        "peak_tflops": 40.0,
        "compile_recompiles": None,
        "compile_graph_breaks": None,
        "settings": settings,
        "summary": {"steady_samples_per_s": 5000.0, "steady_epoch_time_s": 0.5},
        "epochs": [
            {"phase": "warmup", "samples_per_s": 100.0},
            {"phase": "steady", "samples_per_s": 4000.0},
            {"phase": "steady", "samples_per_s": 6000.0},
        ],
    }
    return {**run, **changes}


def test_a_run_that_did_not_end_ok_or_a_compile_that_ran_eagerly_fails_its_part():
    assert judge("run", 0, {"runs": [a_run()]}) == []
    diverged = a_run(status="diverged", error="loss became nan at step 7 (epoch 2)")
    assert judge("run", 0, {"runs": [a_run(), diverged]}) == [
        "mnist-cnn2 on cuda:0: diverged: loss became nan at step 7 (epoch 2)"
    ]
    eager = a_run(tuning_note="torch.compile left 1 function(s) to run eagerly")
    assert judge("compile", 0, {"runs": [eager]}) == [
        "mnist-cnn2 on cuda:0: not compiled: torch.compile left 1 function(s) to run eagerly"
    ]
    assert judge("run", 0, {"runs": []}) == ["no runs in its JSON"]
    idle = a_run(plausibility_flags="device-idle", plausibility_note="cuda:0 was 1.0% busy while training: ...")
    assert judge("run", 0, {"runs": [idle]}) == [
        "mnist-cnn2 on cuda:0: flagged device-idle: cuda:0 was 1.0% busy while training: ..."
    ]
    assert judge("run", 1, None, "Error: no GPU") == ["exit code 1: Error: no GPU", "no result JSON"]
    assert judge("pytest", 0, None) == ["no pytest summary line"]
    assert judge("estimate", 0, {"runs": [a_run()], gpu_validation.ESTIMATED: None}) == [
        "its output has no line of what the estimate said beforehand"
    ]
    assert judge("run", 0, {"runs": [{"workload": "mnist-cnn2"}]}) == [
        "its JSON is not shaped as expected (KeyError 'device')"
    ]  # the other parts still run


def test_a_command_that_cannot_start_fails_its_part_and_the_next_one_still_runs(tmp_path):
    missing = Part("missing", "script", (str(tmp_path / "no-such-program"),), 5.0)
    outcomes = run_parts([missing, part("fine", "pass", 5.0)], tmp_path)
    assert [outcome.status for outcome in outcomes] == ["fail", "pass"]
    assert outcomes[0].reason.startswith("could not run it: [Errno 2] No such file or directory")


def test_a_run_s_figures_are_its_steady_throughput_its_mfu_and_what_compile_did():
    compiled = a_run(
        settings={"mode": "tuned", "precision": "bf16", "compiled": True, "world_size": 2},
        compile_recompiles=1,
        compile_graph_breaks=0,
    )
    # MFU: 2 GFLOP a sample x 5,000 samples/s (the median steady epoch) = 10 TFLOP/s, of 2 x 40 TFLOP/s
    assert run_figures({"runs": [compiled]}) == (
        "mnist-cnn2 cuda:0 x2: 5,000 samples/s, epoch 0.50 s (<1 s), "
        "MFU 12.5%, bf16, compiled, recompiles 1, graph breaks 0"
    )
    graphed = a_run(
        settings={"mode": "tuned", "precision": "fp32", "compiled": False, "world_size": 1, "step_graph": True}
    )
    assert run_figures({"runs": [graphed]}).endswith("MFU 25.0%, fp32, CUDA graph")
    uncalibrated = a_run(peak_tflops=None, summary={"steady_samples_per_s": 812.34, "steady_epoch_time_s": 1.5})
    assert run_figures({"runs": [uncalibrated]}) == "mnist-cnn2 cuda:0: 812 samples/s, epoch 1.50 s"


def test_the_other_parts_figures_are_their_ceilings_their_verdict_and_their_ratios():
    calibration = {
        "devices": {
            "cuda:0": {
                "matmul": {"fp32": {"rate": 51.234}, "tf32": {"rate": 378.9}, "bf16": {"rate": 702.4}},
                "memory_copy": {"rate": 2950.6},
            }
        }
    }
    assert key_figures("calibrate", calibration) == "cuda:0: fp32 51.2, tf32 379, bf16 702 TFLOP/s, copy 2,951 GB/s"
    sides = {
        "samples_per_s": {
            "mnist-cnn2": {
                "plain-resident": [900.0, 1000.0, 1100.0],
                "plain-graph": [3000.0],
                "seed": [950.0],
                "tuned": [2500.0],
            }
        }
    }
    assert key_figures("engine-vs-plain", sides) == (
        "mnist-cnn2: plain-resident 1,000 samples/s; plain-graph 3.00x, seed 0.95x, tuned 2.50x"
    )
    assert key_figures("run", {"runs": [{}]}) == "(figures unreadable: KeyError 'summary')"  # and the rest goes on


def test_a_run_beside_its_estimate_shows_the_line_run_printed_of_it_even_where_the_terminal_wrapped_it(tmp_path):
    output = (
        "How much faster ...\nresnet50 on cuda:0 (NVIDIA H200): measured 1,234 samples/s; estimated beforehand 1,500\n"
        "(1,100–2,000 at 80%), fp32: inside the interval\n"
    )
    line = "resnet50 on cuda:0 (NVIDIA H200): measured 1,234 samples/s; estimated beforehand 1,500 (1,100–2,000 at 80%), fp32: inside the interval"
    assert gpu_validation.estimated_beforehand(output) == line
    assert gpu_validation.estimated_beforehand(
        "x on cuda:0 (H): measured 5 samples/s; estimated beforehand 9 (no interval), tf32: 1.8x slower than estimated"
    ).endswith("1.8x slower than estimated")
    assert gpu_validation.estimated_beforehand("resnet50 on cuda:0: failed") is None
    result_file = tmp_path / "resnet50.json"
    result_file.write_text(json.dumps({"runs": [a_run(workload="resnet50")]}))
    parts = {part.name: part for part in PARTS}
    result = gpu_validation.read_result(parts["resnet50"], result_file, output)
    assert (
        key_figures("estimate", result) == f"resnet50 cuda:0: 5,000 samples/s, epoch 0.50 s (<1 s), MFU 25.0%; {line}"
    )


def test_pytest_s_summary_line_becomes_counts():
    output = (
        "....s\n== slowest durations ==\n12.3s call tests/test_gpu.py::x\n"
        "1 failed, 11 passed, 2 skipped, 977 deselected, 2 warnings, 1 error in 140.52s (0:02:20)\n"
    )
    assert pytest_counts(output) == {
        "failed": 1,
        "passed": 11,
        "skipped": 2,
        "deselected": 977,
        "warning": 2,
        "error": 1,
    }
    assert pytest_counts("ImportError while loading conftest\n") is None
