"""This plugin's workloads meet devicebench's contract: one parametrized test covers every workload it adds."""

import pytest

from devicebench.testing import check_workload, workloads_from

DISTRIBUTION = "devicebench-example-plugin"  # the `name` in pyproject.toml: what devicebench records as origin


def test_the_plugin_is_installed_and_registers_its_workloads():
    # without this, an uninstalled plugin would leave the test below with nothing to check, and pass
    assert [workload.name for workload in workloads_from(DISTRIBUTION)] == ["lenet5-mnist"]


@pytest.mark.parametrize("workload", workloads_from(DISTRIBUTION), ids=lambda workload: workload.name)
def test_workload_meets_devicebench_contract(workload):
    check_workload(workload)


def test_lenet5_has_the_papers_size():
    # C1 156 + C3 2,416 (every S2 map connected) + C5 48,120 + F6 10,164 + output 850
    assert workloads_from(DISTRIBUTION)[0].parameter_count() == 156 + 2_416 + 48_120 + 10_164 + 850
