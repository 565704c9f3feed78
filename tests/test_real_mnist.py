"""mnist-cnn2, exactly as the workload defines it, learns real handwritten digits through the whole engine.

The project's shared data holds the real MNIST test set (10,000 digits); the `real_digits` fixture (conftest.py)
trains on the first 8,000 and tests on the last 2,000. A broken pipeline (labels shuffled against images, wrong
scaling, a model that does not learn) stays near 10% accuracy; the real network reaches about 94% in two epochs at the seed's slow learning rate (Adam 1e-4).
"""

from __future__ import annotations

import pytest

from devicebench import RunConfig, planning
from devicebench.runner import new_record, train_record


@pytest.mark.slow
def test_mnist_cnn2_learns_real_digits(real_digits):
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", epochs=2, data="real")
    (job,) = planning.plan(config).jobs
    record = new_record(job, real_digits, 0)
    train_record(record, job, real_digits)
    assert record.status == "ok"
    assert [epoch.steps for epoch in record.epochs] == [160, 160]  # 8,000 digits in batches of 50
    assert record.epochs[-1].eval_samples == 2_000
    assert record.epochs[-1].train_loss < record.epochs[0].train_loss
    assert record.epochs[-1].test_accuracy > 0.90  # chance is 0.10
    assert record.settings.data_source == "real"
