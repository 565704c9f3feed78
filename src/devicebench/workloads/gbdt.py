"""S5: gradient-boosted decision trees, "4 GPUs about 23.2x faster than CPU (RAPIDS)".

The overview quotes the figure without a model or data set. Our reading (SEEDS.md): XGBoost's `hist` tree
method on the CPU against the same booster with `device="cuda"`, on a real table and on a synthetic one of
chosen size:
- `gbdt-covertype`: UCI Covertype, 464,809 train / 116,203 test rows of 54 features, 7 cover types
  (multi:softprob), split by a fixed hash (data/tabular.py).
- `gbdt-synthetic`: a seeded binary-classification table of `rows` x `features` (binary:logistic); the size is
  what `--set rows=... features=...` sweeps. The default, 1,000,000 rows (800,000 of them for training) x 50
  features, is large enough for a GPU to have work to do and still takes only about 1.5 s an epoch of 10 rounds
  on 2 idle CPU cores (plus about 5 s to make the table and quantise it); `--set rows=200000` is 0.5 s an epoch.

A boosting round adds one tree per class and reads every training row, so here a "step" is a round and an
"epoch" a block of `rounds_per_epoch` rounds. The workloads describe the booster; the engine trains it
(engine/boosting.py), so a workload never touches a clock.

    devicebench run gbdt-synthetic --devices cpu --epochs 2 --set rows=50000
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from devicebench.data.sources import dataset_spec
from devicebench.workloads import Hyperparameters, Published, QuickSettings, workload

# a machine without a GPU gets XGBoost without CUDA: the gbdt extra's CUDA build brings 0.7 GB with NCCL on Linux
INSTALL_HINT = "needs xgboost: pip install 'devicebench[gbdt-cpu]' (with an NVIDIA GPU: 'devicebench[gbdt]')"
SYNTHETIC_CLASSES = 2  # synthetic-table's default: binary, as the GPU tree benchmarks' synthetic sets are
XGBOOST_LARGEST_INT = 2**31 - 1  # XGBoost reads max_depth, max_bin and round numbers as 32-bit signed integers
XGBOOST_SMALLEST_RATE = float(np.finfo(np.float32).tiny)  # it holds eta as a float32: below this it reads 0
# The largest synthetic table: 2^30 cells, 4 GiB of float32 features before XGBoost's quantised copy and the
# predictions; 20 times the default's 50M cells, and more than a laptop's memory holds twice over.
MOST_SYNTHETIC_CELLS = 2**30

BOOSTING = {
    "epochs": 10,
    "rounds_per_epoch": 10,  # boosting rounds (trees per class) per timed epoch: a round is one "step"
    "max_depth": 8,  # levels per tree
    "learning_rate": 0.1,  # XGBoost's eta: the shrinkage applied to each new tree's leaf values
    "max_bin": 256,  # histogram bins per feature (XGBoost's default): the resolution of split points
}
SYNTHETIC_SIZE = {
    "rows": 1_000_000,  # rows generated in all, 20% of them held out for test
    "features": 50,  # standard-normal columns, 8 of which the hidden labelling rule reads
}


def xgboost_missing() -> str | None:
    """Why the gbdt workloads cannot run here (xgboost is not installed), or None when they can."""
    try:
        import xgboost  # noqa: F401  (imported only to see whether it can be)
    except ImportError:
        return INSTALL_HINT
    return None


def booster_parameters(hyperparameters: Hyperparameters, num_classes: int) -> dict[str, Any]:
    """XGBoost's training parameters for `hyperparameters` and a table of `num_classes` classes, without the
    device; a ValueError for any value XGBoost could not train with."""
    for name, least in (("rounds_per_epoch", 1), ("max_depth", 1), ("max_bin", 2)):
        value = hyperparameters[name]
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= XGBOOST_LARGEST_INT:
            raise ValueError(
                f"{name} must be a whole number from {least} to {XGBOOST_LARGEST_INT:,} (XGBoost's "
                f"largest), got {value!r}"
            )
    learning_rate = hyperparameters["learning_rate"]
    if not (
        isinstance(learning_rate, (int, float))
        and math.isfinite(learning_rate)
        and learning_rate >= XGBOOST_SMALLEST_RATE
    ):
        raise ValueError(
            f"learning_rate must be a finite number of at least {XGBOOST_SMALLEST_RATE:.3g} (XGBoost "
            f"holds it as a 32-bit float), got {learning_rate!r}"
        )
    if num_classes < 2:
        raise ValueError(f"boosted trees need at least 2 classes, got {num_classes}")
    objective = (
        {"objective": "binary:logistic"}
        if num_classes == 2
        else {
            "objective": "multi:softprob",
            "num_class": num_classes,
        }
    )
    return {
        **objective,
        "tree_method": "hist",
        "max_depth": hyperparameters["max_depth"],
        "eta": float(learning_rate),
        "max_bin": hyperparameters["max_bin"],
    }


gbdt_workload = partial(  # what both tables share: the seed, the trainer and the published figure
    workload,
    seed="S5",
    trainer="boosted-trees",  # engine/boosting.py
    requires=xgboost_missing,
    published=Published(
        speedup=23.2,
        basis="training time, CPU / GPU, as the overview reports it for RAPIDS; no model, data set or times given",
        hardware="4 GPUs (RAPIDS) vs CPU, as the S5 overview reports",
    ),
)


@gbdt_workload(
    name="gbdt-covertype",
    dataset="covertype",
    summary="XGBoost hist, depth 8, eta 0.1, 7-class softprob on UCI Covertype (54 features); 10 rounds an epoch",
    defaults=BOOSTING,
    data_options=lambda hyperparameters: {},
    quick=QuickSettings(max_steps=2),  # 7 trees a round on 465k rows: about 1 s a round on 2 cores
)
def gbdt_covertype(hyperparameters: Hyperparameters) -> dict[str, Any]:
    return booster_parameters(hyperparameters, dataset_spec("covertype").num_classes)


@gbdt_workload(
    name="gbdt-synthetic",
    dataset="synthetic-table",
    summary="XGBoost hist, depth 8, eta 0.1, binary logistic on a synthetic table of rows x features (1M x 50)",
    defaults={**BOOSTING, **SYNTHETIC_SIZE},
    data_options=lambda hyperparameters: {"rows": hyperparameters["rows"], "features": hyperparameters["features"]},
    quick=QuickSettings(max_steps=4),  # one tree a round on 800k rows: about 0.2 s a round on 2 cores
)
def gbdt_synthetic(hyperparameters: Hyperparameters) -> dict[str, Any]:
    if hyperparameters["rows"] < 10 or hyperparameters["features"] < 1:
        raise ValueError(
            f"a synthetic table needs rows >= 10 and features >= 1, got rows={hyperparameters['rows']}, "
            f"features={hyperparameters['features']}"
        )
    if hyperparameters["rows"] * hyperparameters["features"] > MOST_SYNTHETIC_CELLS:
        raise ValueError(
            f"a synthetic table of rows x features = {hyperparameters['rows']:,} x {hyperparameters['features']:,} "
            f"is above the bound of {MOST_SYNTHETIC_CELLS:,} cells (4 GiB of float32): give fewer rows or features"
        )
    return booster_parameters(hyperparameters, SYNTHETIC_CLASSES)
