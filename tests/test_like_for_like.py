"""A ratio of two throughputs at different batches, precisions or data is no speedup, and a figure of the published
model says nothing of a changed one: in every command that prints a speedup (`run`'s answer and tables, `compare`,
`report`, `reproduce`, `estimate`), the ratio is set like against like or says in the same line why it is not a
speedup.

    python -m pytest tests/test_like_for_like.py -q
"""

from __future__ import annotations

import dataclasses
import io

import pytest
from result_fixtures import machine, run, session
from rich.console import Console

from devicebench.report.answer import answer_parts, answers, gpu_text
from devicebench.report.html import write_report
from devicebench.report.reproduction import record_table
from devicebench.report.tables import comparison_tables
from devicebench.reproduce import factor_text, record_comparison, reproductions, rows_outlook
from devicebench.workloads import get_workload

CPU_SAMPLES_PER_S = 100.0  # result_fixtures' runs: steady epochs of 1,000 samples in 10 s


def flat(text: str) -> str:
    return " ".join(text.split())


def shown(parts) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None)  # wide: no cell folds a phrase in two
    for part in parts:
        console.print(part)
    return flat(console.file.getvalue())


def cpu_rows(workload: str, *, overrides: dict | None = None, data_source: str = "real", **settings):
    record = run("cpu", [12.0, 10.0, 10.0], workload=workload, data_source=data_source, **settings)
    record.settings = dataclasses.replace(record.settings, overrides=overrides or {})
    if overrides:
        record.settings.hyperparameters = {**get_workload(workload).defaults, **overrides}
    from devicebench.results.compare import compare

    return compare([session(machine("vm", "m1"), [record])])


# --- the post's GPU carried to this CPU, and the record's GPUs over it ----------------------------------------


def test_the_posts_gpu_over_this_cpu_at_another_batch_says_it_is_no_speedup_in_the_same_line():
    rows = cpu_rows("cifar10-cnn", batch_size=16)  # the post measured at batch 512, on real CIFAR-10
    (found,) = answers(rows)
    post_gpu = get_workload("cifar10-cnn").published.samples_per_s["gpu"]
    assert gpu_text(found) == (
        f"about {factor_text(post_gpu / CPU_SAMPLES_PER_S)} ({factor_text(post_gpu / CPU_SAMPLES_PER_S)[:-1]}–"
        f"{factor_text(post_gpu / CPU_SAMPLES_PER_S)}) (batch 512 there, 16 here: not a speedup)"
    )
    assert found.gpu_rates == "16,000"  # the post's GPU figure, beside this CPU's in the answer's table
    outlook = rows_outlook(get_workload("cifar10-cnn"), rows["cifar10-cnn"])
    assert (
        f"so about {factor_text(post_gpu / CPU_SAMPLES_PER_S)} this one (batch 512 there, 16 here: not a speedup)"
        in (outlook)
    )
    (reproduced,) = reproductions(rows)
    assert reproduced.outlook == outlook  # reproduce's lines say the same


def test_at_the_posts_own_batch_and_data_the_carried_figure_stands_as_it_is():
    rows = cpu_rows("cifar10-cnn", batch_size=512)
    (found,) = answers(rows)
    assert "not a speedup" not in gpu_text(found) and gpu_text(found).startswith("about ")


def test_the_records_gpus_over_this_cpu_are_taken_at_its_precision_and_name_the_batch():
    rows = cpu_rows("resnet50", batch_size=4, data_source="synthetic")
    (found,) = answers(rows)
    assert found.unlike.startswith("batch ") and found.unlike.endswith(", 4 here")  # fp32 and synthetic, as here
    low, high = found.gpu_rates.split("–")  # the record's slowest and fastest GPU's images/s
    assert float(low.replace(",", "")) < float(high.replace(",", ""))
    text = shown(answer_parts(rows))
    assert f"({found.unlike}: not a speedup)" in text and "GPU over this CPU" in text
    table = shown([record_table(record_comparison(get_workload("resnet50"), rows["resnet50"]))])
    assert "(other batch: not a speedup)" in table and "(other batch, precision: not a speedup)" in table
    assert "a speedup only where both ran the same batch, precision and data" in table


# --- a changed model ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "overrides", "said"),
    [
        (
            "bert-base",
            {"layers": 1, "width": 64, "heads": 1},
            "layers=1 (published 12), width=64 (published 768), heads=1 (published 12)",
        ),
        ("resnet50", {"image_size": 32}, "image_size=32 (published 224)"),
    ],
)
def test_a_changed_model_is_set_beside_no_figure_of_the_published_one(workload, overrides, said):
    rows = cpu_rows(workload, overrides=overrides, data_source="synthetic")
    comparison = record_comparison(get_workload(workload), rows[workload])
    assert comparison.figures == () and ", ".join(comparison.changed) == said
    table = shown([record_table(comparison)])
    assert f"this run set {said}: another model, so none of them is set beside it" in table
    (found,) = answers(rows)
    assert found.recorded is None and found.carried is None and gpu_text(found) == "—"
    assert found.basis == f"the published model, not this one ({said})"
    assert f"the published model, not this one ({said})" in shown(answer_parts(rows))


def test_settings_that_change_no_steps_arithmetic_keep_the_record():
    rows = cpu_rows("resnet50", overrides={"learning_rate": 0.5, "epochs": 3}, data_source="synthetic")
    assert record_comparison(get_workload("resnet50"), rows["resnet50"]).figures


def test_a_seed_with_a_changed_model_carries_no_post_figure():
    rows = cpu_rows("cifar10-cnn", overrides={"augment": False}, batch_size=512)
    (found,) = answers(rows)
    assert found.carried is None and gpu_text(found) == "—"
    assert "this run set augment=False (published True): none of the post's figures" in rows_outlook(
        get_workload("cifar10-cnn"), rows["cifar10-cnn"]
    )


@pytest.mark.parametrize("workload", ["bert-base", "gpt2-small"])
def test_a_transformer_without_width_is_refused(workload):
    with pytest.raises(ValueError, match="a width its heads divide into parts of 1 or more: got .* width=0"):
        get_workload(workload).parameter_count({**get_workload(workload).defaults, "width": 0})


# --- compare, report and run's tables: devices each at its own precision or batch ------------------------------


def test_a_speedup_between_devices_each_at_its_own_choice_says_so_beside_it(tmp_path):
    cpu, gpu = run("cpu", [2.0, 2.0, 2.0], batch_size=64), run("cuda:0", [2.0, 0.5, 0.5], batch_size=1024)
    for record in (cpu, gpu):
        record.settings.mode = "tuned"
        record.settings.batch_size_auto = True
    gpu.settings.precision = "bf16"
    results = [session(machine("box", "m1"), [cpu, gpu])]
    from devicebench.results.compare import compare

    rows = compare(results)["mnist-cnn2"]
    assert rows[1].speedup.ratio == pytest.approx(4.0)
    console = Console(file=io.StringIO(), width=400, color_system=None)
    for part in comparison_tables({"mnist-cnn2": rows}):
        console.print(part)
    (line,) = [line for line in console.file.getvalue().splitlines() if line.startswith("│ cuda:0")]
    assert "bf16 vs fp32, batch 1024 vs 64: each at its best" in line and "4.00x" in line
    page = write_report(results, tmp_path / "report.html").read_text()
    assert "each device at its best (bf16 vs fp32, batch 1024 vs 64), not the same work" in page


# --- estimate: a GPU estimated at its batch and precision over this CPU's --------------------------------------


@pytest.mark.parametrize(
    ("trained_batch", "precision", "said"),
    [
        (None, "fp32", ""),  # the CPU trained at the batch estimated, in fp32: a speedup as it stands
        (16, "fp32", " (batch 256 there, 16 here: not a speedup)"),  # a budget made the CPU's batch smaller
        (None, "amp-bf16", " (amp-bf16 there, fp32 here: not a speedup)"),
    ],
)
def test_the_estimates_speedup_says_in_its_cell_where_it_is_not_like_for_like(trained_batch, precision, said):
    from types import SimpleNamespace

    from devicebench.estimate.targets import Baseline, Estimate
    from devicebench.report.estimates import estimate_table
    from devicebench.results.datasheets import catalog_entry

    baseline = Baseline("cpu (Test CPU)", (100.0, 90.0, 110.0), "synthetic", trained_batch)
    step = SimpleNamespace(seconds=256 / 7_300.0, bound="GPU kernels", input_s=0.0)  # 7,300 samples/s: 73x
    estimate = Estimate("resnet50", catalog_entry("h100-sxm"), 256, step, None, 10, 1, baseline, precision)
    text = shown([estimate_table([estimate])])
    assert f"73x{said}" in text and (said or "not a speedup" not in text)
