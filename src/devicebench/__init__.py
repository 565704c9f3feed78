"""devicebench: how much faster does this model train on that device, why, and what does it cost?

    import devicebench as db
    print(db.run("mnist-cnn2", devices="cpu", epochs=2, max_steps=50).table())
    print(db.run(model=MyNet, data=db.TensorData(x_train, y_train, x_test, y_test)).table())   # your own model
    print(db.plan("cifar*", devices="cpu").jobs)   # what run() would train, without training it
"""

from devicebench.api import Result, plan, run
from devicebench.config import RunConfig
from devicebench.data.own import TensorData, TorchData
from devicebench.version import __version__
from devicebench.workloads import Workload, get_workload, list_workloads, workload

__all__ = ["Result", "RunConfig", "TensorData", "TorchData", "Workload", "__version__", "get_workload",
           "list_workloads", "plan", "run", "workload"]
