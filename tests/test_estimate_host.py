"""The host's side of devicebench's own eager step on a GPU (estimate/host.py): its seconds are the step's counts of
calls, convolutions, the step itself and a batch received from loader workers, each at a fitted cost; they overlap
the GPU's time; they are fitted on the runs whose step the host bounds and on no published figure. Every expected
number is computed here from the costs the points were made with, never copied from the code's output.

    python -m pytest -q tests/test_estimate_host.py
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_estimate_points import gpu_run
from test_roofline import H100, HALF, TRUE, shape, synthetic_points

from devicebench.estimate.host import FROM_WORKERS, HOST_PRIOR_S, HOST_TERMS, host_work, is_convolution
from devicebench.estimate.roofline import Fitter, Point, Resolved, predict

# the costs the runs below were made with: a call, a convolution on top of it, a step, a batch from loader workers
HOST = np.array([30e-6, 80e-6, 450e-6, 900e-6])


def small_step(calls: int, convolutions: int = 0, workers: bool = False) -> Resolved:
    """A step of `calls` tiny kernels on an H100 (0.3 µs of arithmetic each), `convolutions` of them convolutions."""
    resolved = Resolved.of(
        dataclasses.replace(shape([1e6] * calls, [1e3] * calls), convolutions=convolutions), H100, "fp32"
    )
    return dataclasses.replace(resolved, host_work=host_work(calls, convolutions, workers))


def test_the_hosts_time_is_each_count_at_its_cost_and_overlaps_the_gpus():
    host = dataclasses.replace(HALF, host=HOST)
    tiny = predict(small_step(40, convolutions=4), host)
    assert tiny.host_s == pytest.approx(40 * 30e-6 + 4 * 80e-6 + 450e-6, rel=1e-12)  # 1.97 ms
    assert tiny.device_s == pytest.approx(40 * (2 * 1e6 / 67e12 + 10e-6), rel=1e-6)  # 0.4 ms on the GPU
    assert tiny.computing_s == tiny.seconds == tiny.host_s and tiny.bound == "host (eager loop)"
    fed = predict(small_step(40, convolutions=4, workers=True), host)  # its batch received from loader workers
    assert fed.host_s == pytest.approx(tiny.host_s + 900e-6, rel=1e-12)
    big = predict(Resolved.of(shape([1e13] * 40, [1e3] * 40), H100, "fp32"), host)
    assert big.seconds == big.device_s > big.host_s and big.bound == "compute"
    waiting = predict(small_step(40), host, input_s=0.01)
    assert waiting.seconds == 0.01 and waiting.bound == "input pipeline"


def test_a_step_counts_its_convolutions_forward_and_backward():
    from devicebench.estimate.points import shape_of
    from devicebench.workloads import get_workload

    assert is_convolution("aten.convolution.default") and is_convolution("aten.convolution_backward.default")
    assert not is_convolution("aten.addmm.default") and not is_convolution("cudnn_rnn.forward")
    cnn = get_workload("mnist-cnn2")  # two convolutional layers: each a forward and a backward call
    small, large = (shape_of(cnn, {**cnn.defaults, "batch_size": batch}) for batch in (2, 4))
    assert small.convolutions == 4 and small.at_batch(large, 24).convolutions == 4
    assert Resolved.of(small, H100, "fp32").host_work.tolist() == [small.kernels, 4, 1, 0]
    mlp = get_workload("cifar10-mlp")
    assert shape_of(mlp, {**mlp.defaults, "batch_size": 2}).convolutions == 0


def host_points() -> list[Point]:
    """Small steps of devicebench's own (host_launches) on an H100 that the host bounds, observed as HOST makes them:
    calls, convolutions and loader workers varied so that every term is told apart."""
    points = []
    for index, (calls, convolutions, workers) in enumerate(
        [(20, 0, False), (40, 0, False), (70, 0, False), (30, 4, False), (50, 8, True), (60, 4, True), (90, 16, True)]
    ):
        resolved = small_step(calls, convolutions, workers)
        step = predict(resolved, dataclasses.replace(TRUE, host=HOST))
        assert step.host_s > step.device_s
        label = f"small model {index}"
        points.append(Point(label, "ours", label, H100, "fp32", resolved, 32, step.host_s, "step", host_launches=True))
    return points


def test_the_hosts_costs_are_fitted_on_the_runs_it_bounds_and_leave_the_gpus_shares_alone():
    record = synthetic_points()
    # a run of devicebench's own that the GPU bounds (its 40 calls at HOST take 1.65 ms, its arithmetic 2.5 ms): it
    # says nothing of the host, whose time it hides
    resolved = Resolved.of(shape([2.5e9] * 40, [1e3] * 40), H100, "fp32")
    gpu_s = predict(resolved, TRUE).device_s
    big = Point("a big model", "ours", "big", H100, "fp32", resolved, 32, gpu_s, "step", host_launches=True)
    assert gpu_s == pytest.approx(1.5 * predict(resolved, dataclasses.replace(TRUE, host=HOST)).host_s, rel=0.02)
    fitter = Fitter(record + host_points() + [big])
    fitted = fitter.fit()
    assert fitted.host == pytest.approx(HOST, rel=1e-3)  # the prior's weak pull: under 0.1%
    assert fitted.inverse == pytest.approx(TRUE.inverse, rel=1e-3)  # the GPU's from the record and the big model
    assert fitter.predicted_s(fitted) == pytest.approx([point.observed_s for point in fitter.points], rel=1e-3)
    pinned = fitter.pinned(fitted)
    works = np.array([point.resolved.host_work for point in host_points()])  # the big model's host bounds nothing
    shares = works * HOST / (works @ HOST)[:, None]  # each term's part of each run's host time
    assert [pinned[f"host {term}"] for term in HOST_TERMS] == (shares >= 0.1).sum(axis=0).tolist() == [7, 3, 6, 3]
    # a published figure is another program's on another host: its step is the GPU's alone, however many calls
    published = dataclasses.replace(host_points()[0], host_launches=False)
    gpu_s = predict(published.resolved, fitted).device_s
    assert published.predicted_s(fitted) == gpu_s < published.resolved.kernels * HOST[0]


def test_without_runs_of_its_own_the_hosts_costs_are_the_prior():
    assert Fitter(synthetic_points()).fit().host.tolist() == HOST_PRIOR_S.tolist()
    fitted = Fitter(host_points()).fit(without=[4, 5, 6]).host  # no run with loader workers or its batch is kept
    assert fitted[FROM_WORKERS] == 0.0 == HOST_PRIOR_S[FROM_WORKERS]
    assert fitted[:FROM_WORKERS] == pytest.approx(HOST[:FROM_WORKERS], rel=1e-3)


def test_one_odd_run_does_not_drag_the_hosts_costs_after_it(monkeypatch):
    odd = dataclasses.replace(host_points()[2], label="a forged run", observed_s=host_points()[2].observed_s * 10)
    robust = Fitter([*host_points(), odd]).fit().host
    assert robust == pytest.approx(HOST, rel=0.11)  # Huber's loss: within 11% (10.1%)
    monkeypatch.setattr("devicebench.estimate.host.HUBER_RELATIVE", 1e9)  # plain least squares: 18%
    plain = Fitter([*host_points(), odd]).fit().host
    assert np.abs(plain / HOST - 1).max() > 1.5 * np.abs(robust / HOST - 1).max()


def test_a_run_with_loader_workers_receives_its_batch_from_them():
    import result_fixtures

    from devicebench.estimate.points import measured_points

    def point(workers: int) -> Point:
        run = gpu_run(0.04)
        run = dataclasses.replace(run, settings=dataclasses.replace(run.settings, workers=workers))
        (made,), _ = measured_points([result_fixtures.session(result_fixtures.machine("box", "m1"), [run])], "db")
        return made

    assert point(0).resolved.host_work[FROM_WORKERS] == 0.0
    assert point(4).resolved.host_work[FROM_WORKERS] == 1.0
    assert point(4).resolved.host_work[:FROM_WORKERS].tolist() == point(0).resolved.host_work[:FROM_WORKERS].tolist()


def test_a_tuned_estimate_the_host_binds_says_its_cuda_graph_is_not_modelled():
    """Tuned mode's trial may keep the whole step as one CUDA graph (issue 40), whose host time no measured run
    pins: where the host binds a tuned estimate, the notes say the step may be faster; nowhere else."""
    from types import SimpleNamespace

    from devicebench.estimate.targets import Estimate
    from devicebench.report.estimates import estimate_notes

    host = dataclasses.replace(HALF, host=HOST)
    fitted = SimpleNamespace(points=[], efficiency=host)

    def notes(step: Resolved, mode: str) -> list[str]:
        made = predict(step, host)
        estimate = Estimate("mnist-cnn2", H100, 50, made, None, 10, 1, None, "tf32", mode=mode)  # type: ignore[arg-type]
        return [note for note in estimate_notes([estimate], fitted) if "CUDA graph" in note and "Tuned" in note]  # type: ignore[arg-type]

    assert len(notes(small_step(40), "tuned")) == 1
    assert notes(small_step(40), "seed") == []  # seed mode never captures a graph
    assert notes(Resolved.of(shape([1e13] * 40, [1e3] * 40), H100, "fp32"), "tuned") == []  # the GPU binds
