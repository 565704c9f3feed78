"""devicebench: how much faster does this model train on that device, why, and what does it cost?

    import devicebench as db
    print(db.run("mnist-cnn2", devices="cpu", epochs=2, max_steps=50).table())
    print(db.run(model=MyNet, data=db.TensorData(x_train, y_train, x_test, y_test)).table())   # your own model
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("devicebench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from devicebench.api import run  # noqa: E402  (the version above is read by what these import)
from devicebench.config import RunConfig  # noqa: E402
from devicebench.data.own import TensorData, TorchData  # noqa: E402
from devicebench.results.schema import Result  # noqa: E402
from devicebench.workloads import Workload, get_workload, list_workloads, workload  # noqa: E402

__all__ = ["Result", "RunConfig", "TensorData", "TorchData", "Workload", "__version__", "get_workload",
           "list_workloads", "run", "workload"]
