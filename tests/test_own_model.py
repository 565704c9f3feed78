"""Your own model: the Python API and `devicebench run --model/--data` train it on the seeds' engine, the same way.

python -m pytest tests/test_own_model.py -q
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import TensorDataset
from typer.testing import CliRunner

import devicebench as db
from devicebench.cli import EXIT_USAGE, app
from devicebench.data.own import TensorData, TorchData, as_own_data
from devicebench.report.progress import RichReporter
from devicebench.results.store import Store
from devicebench.workloads import get_workload, list_workloads
from devicebench.workloads.own import OwnModelError, own_workload

cli = CliRunner()
FEATURES, CLASSES = 6, 3
QUICK = dict(devices="cpu", epochs=3, batch_size=16, progress=False)


def tensors(samples: int = 160, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A learnable problem: the class is the largest of three fixed projections of the inputs."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    labels = (inputs @ torch.randn(FEATURES, CLASSES, generator=generator)).argmax(dim=1)
    train = samples * 3 // 4
    return inputs[:train], labels[:train], inputs[train:], labels[train:]


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def forward(self, inputs):
        return self.layers(inputs)


# forward 2 x weights, backward twice that, less the first layer's gradient for its inputs (nothing needs it)
TINY_NET_FLOPS = 3 * 2 * (FEATURES * 32 + 32 * CLASSES) - 2 * FEATURES * 32


class PlainLoss:
    """A loss written as a plain class (not a torch.nn.Module), whose instances are called with (outputs, targets)."""

    def __call__(self, outputs, targets):
        return nn.functional.cross_entropy(outputs, targets)


def loss_only_step(model, batch, optimizer):
    """The usual step written as a user's own, handing back only the loss."""
    loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def epochs_of(result: db.Result) -> list:
    """Every epoch's steps, samples, losses and accuracies, one flat list (what pytest.approx compares)."""
    return [
        value
        for record in result.runs
        for epoch in record.epochs
        for value in (
            epoch.steps,
            epoch.samples,
            epoch.train_loss,
            epoch.train_accuracy,
            epoch.test_loss,
            epoch.test_accuracy,
        )
    ]


def test_the_api_trains_your_model_and_its_loss_falls():
    result = db.run(
        model=TinyNet, data=db.TensorData(*tensors()), optimizer=lambda p: torch.optim.Adam(p, 1e-2), **QUICK
    )
    [record] = result.runs
    assert (record.workload, record.status, record.seed_experiment) == ("TinyNet", "ok", "")
    assert [epoch.steps for epoch in record.epochs] == [8, 8, 8]  # 120 training samples in batches of 16
    assert record.epochs[-1].train_loss < record.epochs[0].train_loss * 0.8
    assert record.epochs[-1].test_accuracy > 1 / CLASSES + 0.2  # well above chance on the 40 test samples
    assert record.parameter_count == FEATURES * 32 + 32 + 32 * CLASSES + CLASSES
    assert record.flops_per_sample == TINY_NET_FLOPS
    assert record.settings.data_source == "real" and record.settings.hyperparameters["batch_size"] == 16


def test_the_api_and_the_command_line_give_the_same_numbers_for_the_same_model_and_seed(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(
        textwrap.dedent(f"""
        import torch
        from torch import nn
        from devicebench import TensorData

        def build():
            return nn.Sequential(nn.Linear({FEATURES}, 32), nn.ReLU(), nn.Linear(32, {CLASSES}))

        def load():
            generator = torch.Generator().manual_seed(0)
            inputs = torch.randn(160, {FEATURES}, generator=generator)
            labels = (inputs @ torch.randn({FEATURES}, {CLASSES}, generator=generator)).argmax(dim=1)
            return TensorData(inputs[:120], labels[:120], inputs[120:], labels[120:])
    """)
    )
    monkeypatch.chdir(tmp_path)  # --model modules are imported from the folder devicebench runs in
    out = tmp_path / "cli.json"
    command = cli.invoke(
        app,
        [
            "run",
            "--model",
            "mymodels:build",
            "--data",
            "mymodels:load",
            "--devices",
            "cpu",
            "--epochs",
            "3",
            "--batch-size",
            "16",
            "--seed",
            "7",
            "--optimizer",
            "sgd",
            "--set",
            "learning_rate=0.05",
            "--quiet",
            "--json",
            str(out),
        ],
    )
    assert command.exit_code == 0, command.output
    from_cli = db.Result.read_json(out)

    import mymodels  # the same factories, handed over as objects

    from_api = db.run(
        model=mymodels.build, data=mymodels.load(), optimizer=lambda p: torch.optim.SGD(p, lr=0.05), seed=7, **QUICK
    )
    assert epochs_of(from_api) == pytest.approx(epochs_of(from_cli), rel=1e-6)
    assert from_cli.runs[0].workload == "mymodels:build" and from_cli.config["model"] == "mymodels:build"
    assert from_cli.runs[0].settings.hyperparameters["learning_rate"] == 0.05


def test_a_registered_workload_through_the_api_equals_the_command_line(tmp_path):
    out = tmp_path / "cli.json"
    flags = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1"]
    command = cli.invoke(app, ["run", "mnist-cnn2", *flags, "--quiet", "--json", str(out)])
    assert command.exit_code == 0, command.output
    from_api = db.run(
        "mnist-cnn2", devices="cpu", data="synthetic", epochs=2, max_steps=3, max_eval_steps=1, progress=False
    )
    assert epochs_of(from_api) == pytest.approx(epochs_of(db.Result.read_json(out)), rel=1e-6)


def test_a_torch_dataset_is_batched_exactly_as_the_same_tensors():
    x_train, y_train, x_test, y_test = tensors()
    as_tensors = db.run(model=TinyNet, data=db.TensorData(x_train, y_train, x_test, y_test), name="tiny", **QUICK)
    as_datasets = db.run(
        model=TinyNet, data=(TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)), name="tiny", **QUICK
    )
    assert epochs_of(as_datasets) == pytest.approx(epochs_of(as_tensors), rel=1e-6)
    assert as_datasets.runs[0].settings.workers == 0  # as torch's DataLoader: the verdict says when more would help


def test_a_model_instance_is_copied_so_every_repeat_starts_from_the_same_weights():
    model = TinyNet()
    before = [parameter.clone() for parameter in model.parameters()]
    result = db.run(model=model, data=tensors(), repeats=2, **QUICK)
    first, second = result.runs
    assert [epoch.train_loss for epoch in first.epochs] == [epoch.train_loss for epoch in second.epochs]
    assert all(torch.equal(old, new) for old, new in zip(before, model.parameters()))  # yours is never trained


def test_a_train_step_of_your_own_is_called_every_step_and_timed_like_any_step():
    calls = []

    def clipped_step(model, batch, optimizer):
        inputs, labels = batch
        calls.append(len(inputs))
        outputs = model(inputs)
        loss = nn.functional.cross_entropy(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss, outputs

    result = db.run(
        model=TinyNet,
        data=db.TensorData(*tensors()),
        train_step=clipped_step,
        optimizer=lambda p: torch.optim.Adam(p, 1e-2),
        **QUICK,
    )
    [record] = result.runs
    assert record.status == "ok"
    epoch = [16] * 7 + [8]  # 120 samples in batches of 16; the last batch is kept
    assert calls == [2] + epoch * 3  # one step on the meta device counts its FLOPs, then every step of every epoch
    assert record.flops_per_sample == TINY_NET_FLOPS  # what the step computes: the usual forward and backward
    assert record.epochs[-1].train_loss < record.epochs[0].train_loss
    assert record.epochs[-1].train_accuracy is not None and record.epochs[-1].test_accuracy is not None


def test_a_train_step_that_returns_only_the_loss_counts_no_training_accuracy():
    [record] = db.run(model=TinyNet, data=tensors(), train_step=loss_only_step, **QUICK).runs
    assert record.status == "ok"
    assert [epoch.train_accuracy for epoch in record.epochs] == [None, None, None]
    assert all(epoch.test_accuracy is not None for epoch in record.epochs)  # evaluation is the engine's


def test_a_train_step_that_returns_nothing_fails_the_run_saying_what_to_return():
    [record] = db.run(model=TinyNet, data=tensors(), train_step=lambda model, batch, optimizer: None, **QUICK).runs
    assert record.status == "failed"
    assert "train_step must return the loss (a tensor), or (loss, outputs); it returned NoneType" in record.error


def test_a_regression_has_losses_and_no_accuracy():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(200, FEATURES, generator=generator)
    targets = inputs @ torch.randn(FEATURES, 1, generator=generator)
    result = db.run(
        model=lambda: nn.Linear(FEATURES, 1),
        data=(inputs[:160], targets[:160], inputs[160:], targets[160:]),
        loss="mse",
        optimizer=lambda p: torch.optim.SGD(p, lr=0.05),
        name="linear",
        **QUICK,
    )
    [record] = result.runs
    assert record.status == "ok"
    assert all(epoch.train_accuracy is None and epoch.test_accuracy is None for epoch in record.epochs)
    assert record.epochs[-1].test_loss < record.epochs[0].test_loss * 0.5
    assert "linear" in result.table()


def test_without_a_test_split_the_run_trains_and_evaluates_nothing():
    x_train, y_train, _, _ = tensors()
    [record] = db.run(model=TinyNet, data=db.TensorData(x_train, y_train), **QUICK).runs
    assert record.status == "ok"
    assert all(epoch.eval_time_s is None and epoch.test_accuracy is None for epoch in record.epochs)


def test_numpy_arrays_are_accepted_and_float64_becomes_float32():
    x_train, y_train, x_test, y_test = (part.numpy() for part in tensors())
    data = as_own_data((x_train.astype("float64"), y_train, x_test, y_test))
    assert isinstance(data, TensorData) and data.x_train.dtype == torch.float32
    assert data.num_classes == CLASSES and (data.train_size, data.test_size) == (120, 40)


def test_table_save_and_the_notebook_view_show_the_same_runs(tmp_path):
    result = db.run(model=TinyNet, data=tensors(), name="<b>TinyNet</b>", **QUICK)
    text = result.table()
    assert "<b>TinyNet</b>: batch 16, 3 epochs of 8 steps, real data" in text
    assert "1.00x (baseline)" in text and "Speedup" in text
    html = result._repr_html_()
    assert "<table>" in html and "&lt;b&gt;TinyNet&lt;/b&gt;" in html and "<b>TinyNet</b>" not in html
    samples_per_s = result.runs[0].summary().steady_samples_per_s
    assert f"{samples_per_s:,.0f}" in html and f"{samples_per_s:,.0f}" in text
    database = tmp_path / "results.sqlite"
    assert result.save(database) == database
    assert result.save(database) == database  # saving twice adds nothing
    with Store(database) as store:
        [stored] = store.results()
    assert [run.run_id for run in stored.runs] == [run.run_id for run in result.runs]


@pytest.mark.filterwarnings('ignore:install "ipywidgets":UserWarning')  # rich's hint, without the notebook extra
def test_in_jupyter_the_progress_bar_is_drawn():
    reporter = RichReporter(Console(force_jupyter=True), quiet=False)
    reporter.epoch_started(1, 10)
    assert reporter.progress is not None and not reporter.progress.disable
    reporter.close()
    in_a_log = RichReporter(Console(force_terminal=False, force_jupyter=False), quiet=False)
    in_a_log.epoch_started(1, 10)
    assert in_a_log.progress.disable
    in_a_log.close()


def test_your_model_is_found_by_name_but_never_joins_a_suite():
    db.run(model=TinyNet, data=tensors(), name="session-only", **QUICK)
    assert get_workload("session-only").origin == "your model"
    assert "session-only" not in [entry.name for entry in list_workloads()]
    assert "session-only" not in [entry.name for entry in db.RunConfig().selected_workloads()]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            dict(model=lambda: {"not": "a model"}, data=tensors()),
            OwnModelError,
            "model returned a dict; it must return a torch.nn.Module",
        ),
        (dict(model=42, data=tensors()), OwnModelError, "model is a int: give a torch.nn.Module, or a function"),
        (dict(model=lambda: nn.ReLU(), data=tensors()), OwnModelError, "without trainable parameters"),
        (dict(model=TinyNet, data=[1, 2, 3]), TypeError, "data is a list of 3; give a devicebench.TensorData"),
        (dict(model=TinyNet), TypeError, "your model needs data="),
        (dict(model=TinyNet, data=tensors(), loss="hinge"), OwnModelError, "unknown loss 'hinge'; choose one of"),
        (dict(model=TinyNet, data=tensors(), optimizer="lbfgs"), OwnModelError, "unknown optimizer 'lbfgs'"),
        (
            dict(model=TinyNet, data=tensors(), optimizer=lambda parameters: None),
            OwnModelError,
            "the optimizer function returned a NoneType; it must return a torch.optim.Optimizer",
        ),
        (dict(model=TinyNet, data=tensors(), loss=None), OwnModelError, "loss=None needs a train_step of your own"),
        (  # the class itself, called with (outputs, targets), would make a PlainLoss mid-run, not a loss
            dict(model=TinyNet, data=tensors(), loss=PlainLoss),
            OwnModelError,
            r"loss is the class PlainLoss, not a torch.nn.Module: give an instance of it \(loss=PlainLoss\(\)\)",
        ),
        (
            dict(model=TinyNet, data=tensors(), name="mnist-cnn2"),
            ValueError,
            "'mnist-cnn2' is the name of a registered",
        ),
        (dict(workloads="mnist-cnn2", model=TinyNet, data=tensors()), TypeError, "give workloads or a model"),
        (dict(workloads=db.RunConfig(), epochs=3), TypeError, "a RunConfig says everything.*epochs"),
        (dict(workloads="mnist-cnn2", data=tensors()), TypeError, "data= of your own goes with model="),
    ],
)
def test_what_cannot_be_trained_is_refused_before_any_training_saying_why(arguments, error, message):
    with pytest.raises(error, match=message):
        db.run(**{**QUICK, **arguments})


def test_bad_data_shapes_are_refused_with_the_shapes():
    with pytest.raises(
        ValueError, match=r"x_train and y_train must hold one row per sample, got shapes \(4, 2\) and \(3,\)"
    ):
        TensorData(torch.zeros(4, 2), torch.zeros(3))
    with pytest.raises(ValueError, match="give both x_test and y_test, or neither"):
        TensorData(torch.zeros(4, 2), torch.zeros(4), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="x_train holds no samples"):
        TensorData(torch.zeros(0, 2), torch.zeros(0))
    with pytest.raises(TypeError, match="each item of the Dataset must be an \\(input, label\\) pair, got Tensor"):
        TorchData(torch.zeros(4, 2))  # a tensor indexes like a Dataset, but its items are rows, not pairs


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "usermodels.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        def build():
            return nn.Linear(4, 2)

        def load():
            return torch.zeros(8, 4), torch.zeros(8, dtype=torch.long)

        def broken():
            raise RuntimeError("the weights file is missing")

        def not_a_model():
            return "a string"

        NOT_CALLABLE = 3
    """)
    )
    (tmp_path / "raising.py").write_text("raise ImportError('cannot import name torchvision')\n")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "usermodels", "--data", "usermodels:load"], "--model 'usermodels': write MODULE:FUNCTION"),
        (["--model", "nowhere:build", "--data", "usermodels:load"], "there is no module 'nowhere' in"),
        (
            ["--model", "raising:build", "--data", "usermodels:load"],
            "--model raising:build: importing raising failed: ImportError: cannot import name torchvision",
        ),
        (
            ["--model", "usermodels:missing", "--data", "usermodels:load"],
            "usermodels has no 'missing'; its functions and classes: broken, build, load, not_a_model",
        ),
        (["--model", "usermodels:NOT_CALLABLE", "--data", "usermodels:load"], "is a int: give a torch.nn.Module"),
        (
            ["--model", "usermodels:not_a_model", "--data", "usermodels:load"],
            "--model usermodels:not_a_model returned a str; it must return a torch.nn.Module",
        ),
        (
            ["--model", "usermodels:broken", "--data", "usermodels:load"],
            "--model usermodels:broken raised RuntimeError: the weights file is missing",
        ),
        (
            ["--model", "usermodels:build", "--data", "usermodels:build"],
            "--data usermodels:build returned a Linear; give",
        ),
        (
            ["--model", "usermodels:build", "--data", "usermodels:broken"],
            "--data usermodels:broken raised RuntimeError",
        ),
        (
            ["--model", "usermodels:build", "--data", "usermodels:NOT_CALLABLE"],
            "--data usermodels:NOT_CALLABLE is a int, not a function to call",
        ),
        (["--model", "usermodels:build"], "--model needs --data MODULE:FUNCTION"),
        (["--data", "usermodels:load"], "--data usermodels:load gives data for a model of your own: add --model"),
        (["mnist-cnn2", "--model", "usermodels:build", "--data", "usermodels:load"], "name workloads or give --model"),
        (["--model", "usermodels:build", "--data", "usermodels:load", "--loss", "hinge"], "unknown --loss 'hinge'"),
        (
            ["--model", "usermodels:build", "--data", "usermodels:load", "--optimizer", "usermodels:nope"],
            "--optimizer usermodels:nope: usermodels has no 'nope'",
        ),
        (["mnist-cnn2", "--loss", "mse"], "--loss is for a model of your own (--model)"),
        (
            ["--model", "usermodels:build", "--data", "usermodels:load", "--save", "model.pt"],
            "your own model you save yourself",
        ),
        (
            ["--model", "usermodels:build", "--data", "usermodels:load", "--set", "depth=3"],
            "usermodels:build has no parameter 'depth'; its parameters: batch_size, epochs, learning_rate",
        ),
    ],
)
def test_every_bad_model_or_data_flag_is_a_clear_error(user_module, flags, message):
    result = cli.invoke(app, ["run", *flags, "--devices", "cpu"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert message in " ".join(result.output.split()), result.output


def test_the_command_line_model_trains_and_is_stored(user_module, tmp_path):
    out = tmp_path / "out.json"
    result = cli.invoke(
        app,
        [
            "run",
            "--model",
            "usermodels:build",
            "--data",
            "usermodels:load",
            "--devices",
            "cpu",
            "--epochs",
            "2",
            "--quiet",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads(out.read_text())["runs"][0]
    assert (record["workload"], record["status"]) == ("usermodels:build", "ok")
    assert [epoch["test_accuracy"] for epoch in record["epochs"]] == [None, None]  # no test split given
    # the default batch of 32 is more than the 8 samples: the batch that ran is the one shown and kept
    assert "usermodels:build: batch 8, 2 epochs of 1 steps, real data" in " ".join(result.output.split())


def test_a_plugin_style_workload_needs_no_seed_or_published_figures_but_a_known_seed_if_any():
    with pytest.raises(ValueError, match="unknown seed experiment 'S9'"):
        db.workload(
            name="x",
            seed="S9",
            dataset="mnist",
            summary="",
            loss=nn.CrossEntropyLoss,
            optimizer=lambda model, hyperparameters: None,
            defaults={"batch_size": 1, "epochs": 1},
        )
    with pytest.raises(ValueError, match="names are lower case"):
        db.workload(
            name="MyNet",
            dataset="mnist",
            summary="",
            loss=nn.CrossEntropyLoss,
            optimizer=lambda model, hyperparameters: None,
            defaults={"batch_size": 1, "epochs": 1},
        )


def test_own_workload_names_a_model_after_its_class_and_keeps_your_name_when_given():
    assert own_workload(TinyNet, tensors()).name == "TinyNet"
    assert own_workload(TinyNet(), tensors(), name="mine").name == "mine"


@pytest.mark.slow
@pytest.mark.parametrize(("isa", "bf16"), [("avx2,avx512f", False), ("avx2,avx512f,avx512_bf16", True)])
def test_tuned_mode_and_an_auto_batch_size_apply_to_your_model_and_your_step(isa, bf16, force_cpu_isa):
    force_cpu_isa(isa)  # with native bf16 there are two precisions to try; without, fp32 alone
    tuned = db.run(model=TinyNet, data=tensors(800), train_step=loss_only_step, **{**QUICK, "mode": "tuned"})
    [record] = tuned.runs
    assert record.status == "ok" and record.settings.mode == "tuned"
    # a CPU trials Adam's fused step, off and on, and bf16 where native: the run records what the trial kept
    assert record.tuning_note.startswith("trial samples/s: fp32 ") and ("bf16" in record.tuning_note) == bf16
    kept = record.tuning_note.rsplit("; kept ", 1)[1].split(":")[0].split("+")
    assert record.settings.fused_optimizer == ("fused" in kept)
    grown = db.run(model=TinyNet, data=tensors(800), **{**QUICK, "batch_size": "auto"})
    [record] = grown.runs
    assert record.status == "ok" and record.settings.batch_size_auto
    assert record.settings.batch_size in (16, 32, 64) and "batch sizes tried" in record.tuning_note


@pytest.mark.slow
def test_your_model_trains_in_several_processes_from_its_module(user_module, tmp_path):
    """--model names a module, so every torchrun process imports the same model and data."""
    out = tmp_path / "ddp.json"
    result = cli.invoke(
        app,
        [
            "run",
            "--model",
            "usermodels:build",
            "--data",
            "usermodels:load",
            "--devices",
            "cpu",
            "--nproc",
            "2",
            "--epochs",
            "2",
            "--batch-size",
            "4",
            "--quiet",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    [record] = json.loads(out.read_text())["runs"]
    assert (record["workload"], record["status"], record["settings"]["world_size"]) == ("usermodels:build", "ok", 2)
    assert [epoch["samples"] for epoch in record["epochs"]] == [8, 8]  # 8 samples, 2 global steps of 4
