"""What the seeds' published CPU and GPU figures say about this CPU: the arithmetic, the caveats, and `run`."""

from __future__ import annotations

import dataclasses

from result_fixtures import machine, run, session
from typer.testing import CliRunner

from devicebench.cli import app
from devicebench.reproduce import factor_text, published_outlook, reproductions
from devicebench.results.compare import compare
from devicebench.workloads import get_workload

SHORT_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "2", "--max-eval-steps", "1"]


def test_factor_text_keeps_two_significant_figures():
    assert [factor_text(value) for value in (0.496, 3.26, 9.96, 23.4, 234.0)] == ["0.50x", "3.3x", "10x", "23x", "230x"]


def test_cifar10_mlp_places_this_cpu_against_the_posts_cpu_and_gpu():
    workload = get_workload("cifar10-mlp")
    figures = workload.published.samples_per_s
    outlook = published_outlook(workload, 420.0, workload.defaults["batch_size"], "real")
    assert outlook.startswith("cifar10-mlp: this CPU ran 420 samples/s, ")
    assert f"{factor_text(420.0 / figures['cpu'])} the post's CPU ({figures['cpu']:,.0f} samples/s)" in outlook
    assert factor_text(420.0 / figures["cpu"]) == "0.50x"  # 420 of the post's 50,000 / 59 s
    assert f"the post's GPU was {factor_text(figures['gpu'] / figures['cpu'])} its CPU" in outlook
    assert f"so about {factor_text(figures['gpu'] / 420.0)} this one" in outlook
    assert "Keras, not PyTorch, on hardware of its day" in outlook
    assert "`devicebench estimate cifar10-mlp` predicts named GPUs" in outlook
    assert "batch" not in outlook and "synthetic" not in outlook and "capped" not in outlook  # like with like


def test_a_gpu_figure_comes_from_the_cpu_figure_and_the_speedup_when_only_those_were_published():
    workload = get_workload("catdog-deep")  # about 3 images/s on the CPU and 100x on the GPU, no GPU figure
    published = workload.published
    assert "gpu" not in published.samples_per_s
    outlook = published_outlook(workload, 6.0, workload.defaults["batch_size"], "real")
    expected = published.samples_per_s["cpu"] * published.speedup / 6.0
    assert f"so about {factor_text(expected)} this one" in outlook


def test_cifar10_cnn_says_its_published_throughput_was_at_another_batch_size():
    workload = get_workload("cifar10-cnn")
    assert workload.published.batch_size == 512 and workload.defaults["batch_size"] == 128
    outlook = published_outlook(workload, 100.0, workload.defaults["batch_size"], "real")
    assert "the post measured at batch 512, this run at 128" in outlook


def test_a_batch_size_other_than_the_seeds_is_mentioned():
    workload = get_workload("cifar10-mlp")
    assert "the post measured at batch 32, this run at 64" in published_outlook(workload, 420.0, 64, "real")


def test_synthetic_data_and_capped_epochs_are_mentioned():
    workload = get_workload("cifar100-mlp")
    outlook = published_outlook(workload, 420.0, 32, "synthetic", max_steps=2)
    assert "synthetic data (speeds are real)" in outlook and "epochs capped at 2 steps" in outlook


def test_mnist_gave_only_a_speedup_so_no_cpu_comparison_is_possible():
    workload = get_workload("mnist-cnn2")
    assert "cpu" not in workload.published.samples_per_s
    outlook = published_outlook(workload, 420.0, 50, "real")
    assert "the post gave no CPU throughput, so its 8x cannot be carried to this CPU" in outlook
    assert "the post's CPU" not in outlook  # no invented figure


def test_nothing_published_gives_no_outlook():
    without = dataclasses.replace(get_workload("cifar10-mlp"), published=None)
    assert published_outlook(without, 420.0, 32, "real") is None
    nothing_usable = get_workload("catdog-original")  # neither a speedup nor a CPU figure
    assert published_outlook(nothing_usable, 420.0, 32, "real") is None


def test_a_reproduction_carries_the_outlook_of_its_cpu_row():
    result = session(machine("laptop", "aaaa1111"), [run("cpu", [12, 10, 10], workload="cifar10-mlp", batch_size=32)])
    (entry,) = reproductions(compare([result]))
    assert entry.outlook == published_outlook(get_workload("cifar10-mlp"), 100.0, 32, "synthetic", max_steps=10)
    assert "this CPU ran 100 samples/s" in entry.outlook


def test_run_leads_its_end_with_the_answer_and_the_outlook_it_rests_on():
    result = CliRunner().invoke(app, ["run", "cifar10-mlp", *SHORT_RUN])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the sentence wraps at the terminal's width
    assert "cifar10-mlp: this CPU ran" in text and "the post's CPU (847 samples/s)" in text
    assert "the post's GPU was 6.6x its CPU, so about" in text and "synthetic data (speeds are real)" in text
    assert text.startswith("How much faster would a GPU train these here?")  # the answer first, then the tables
    assert text.index("cifar10-mlp: this CPU ran") < text.index("Samples/s")
    assert text.count("cifar10-mlp: this CPU ran") == 1  # not repeated after the tables
