"""devicebench: how much faster does this model train on that device, why, and what does it cost?

    import devicebench
    result = devicebench.run(devicebench.RunConfig(workloads=("mnist-cnn2",), devices="cpu", epochs=2, max_steps=50))
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("devicebench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

from devicebench.config import RunConfig  # noqa: E402  (the version above is read by what these import)
from devicebench.results.schema import Result  # noqa: E402
from devicebench.runner import run  # noqa: E402
from devicebench.workloads import Workload, get_workload, list_workloads, workload  # noqa: E402

__all__ = ["RunConfig", "Result", "Workload", "__version__", "get_workload", "list_workloads", "run", "workload"]
