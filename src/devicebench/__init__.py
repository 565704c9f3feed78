"""devicebench: how much faster does this model train on that device, why, and what does it cost?

    import devicebench as db
    print(db.run("mnist-cnn2", devices="cpu", epochs=2, max_steps=50).table())
    print(db.run(model=MyNet, data=db.TensorData(x_train, y_train, x_test, y_test)).table())   # your own model
    print(db.plan("cifar*", devices="cpu").jobs)   # what run() would train, without training it

The names below are imported on first use: importing the package itself imports neither torch nor anything else
heavy, so the command line starts in well under a second and Ctrl-C while it is still starting is one line
(devicebench/__main__.py), not a traceback.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from devicebench.version import __version__

if TYPE_CHECKING:  # for readers and type checkers: what each name is
    from devicebench.api import Result, plan, run
    from devicebench.config import RunConfig
    from devicebench.data.own import TensorData, TorchData
    from devicebench.workloads import Workload, get_workload, list_workloads, workload

_WHERE = {  # name: the module that defines it
    "Result": "devicebench.api",
    "plan": "devicebench.api",
    "run": "devicebench.api",
    "RunConfig": "devicebench.config",
    "TensorData": "devicebench.data.own",
    "TorchData": "devicebench.data.own",
    "Workload": "devicebench.workloads",
    "get_workload": "devicebench.workloads",
    "list_workloads": "devicebench.workloads",
    "workload": "devicebench.workloads",
}

__all__ = [
    "Result",
    "RunConfig",
    "TensorData",
    "TorchData",
    "Workload",
    "__version__",
    "get_workload",
    "list_workloads",
    "plan",
    "run",
    "workload",
]


def __getattr__(name: str) -> Any:
    """`devicebench.run` and the other public names, imported the first time they are asked for."""
    if name not in _WHERE:
        raise AttributeError(f"module 'devicebench' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # the next lookup finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
