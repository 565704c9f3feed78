"""The plan `run --dry-run` shows (report/plan.py): what each job will train on, told before anything is loaded."""

from __future__ import annotations

import textwrap

from typer.testing import CliRunner

from devicebench.cli import app

DATA_NAMED_LIKE_IMAGENET = textwrap.dedent("""
    import torch
    from torch import nn

    from devicebench.data.own import TensorData

    def build():
        return nn.Linear(4, 2)

    def load():
        return TensorData(torch.zeros(8, 4), torch.zeros(8, dtype=torch.long), name="imagenet")
""")


def test_data_of_your_own_named_like_a_known_dataset_is_yours_never_its_synthetic_stand_in(tmp_path, monkeypatch):
    """--data MODULE:FUNCTION trains on your tensors whatever you name them: the plan must not read the name as
    devicebench's ImageNet, which it cannot download, and promise synthetic images in its place."""
    (tmp_path / "namedlikeimagenet.py").write_text(DATA_NAMED_LIKE_IMAGENET)
    monkeypatch.chdir(tmp_path)
    flags = ["--model", "namedlikeimagenet:build", "--data", "namedlikeimagenet:load", "--devices", "cpu"]
    result = CliRunner().invoke(app, ["run", *flags, "--dry-run"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "│ imagenet yours │" in result.output
    assert "SYNTHETIC" not in result.output and "cannot download" not in result.output


def test_a_budgeted_plan_shows_its_epochs_as_the_most_it_may_run():
    """`run resnet50 --budget` read `90` epochs where the budget ended it after 3: the plan says ≤ 90."""
    flags = ["resnet50", "mnist-cnn2", "--devices", "cpu", "--data", "synthetic", "--budget", "2m", "--dry-run"]
    result = CliRunner().invoke(app, ["run", *flags], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "│ resnet50 │ cpu │ 256 │ ≤ 90 │ sized │" in text and "│ mnist-cnn2 │ cpu │ 50 │ ≤ 17 │ sized │" in text
    assert "it ends when its share is spent (≤ in Epochs), after 3 at least" in text
    fixed = CliRunner().invoke(app, ["run", "mnist-cnn2", "--devices", "cpu", "--epochs", "17", "--dry-run"])
    assert "≤" not in fixed.output  # no budget: every planned epoch runs
