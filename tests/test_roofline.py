"""The roofline of `devicebench estimate` (estimate/roofline.py): each kernel's time at its precision's peak, the fit
of the shares, the held-out predictions of each validation scheme and the split-conformal interval. Every expected
number is computed here from the datasheet figures, never copied from the code's output.

    python -m pytest -q tests/test_roofline.py
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from devicebench.engine.kernel_recorder import Kernel
from devicebench.engine.opcount import StepProfile
from devicebench.estimate.roofline import (
    AMP_BYTES,
    AMP_CAST_BYTES,
    KERNEL_CLASSES,
    PARAMETERS,
    PEAKS,
    Efficiency,
    Fitter,
    Point,
    PrecisionError,
    PredictedStep,
    Resolved,
    StepShape,
    kernel_class,
    predict,
)
from devicebench.estimate.validation import (
    Interval,
    Validation,
    conformal,
    coverage,
    held_out,
    median_absolute_error,
    validate,
)
from devicebench.results.datasheets import catalog_entry

V100 = catalog_entry("v100-sxm2")  # fp32 15.7, fp16 tensor 125 TFLOP/s, no TF32 or bf16, 900 GB/s, PCIe 3.0: 15.75 GB/s
A100 = catalog_entry("a100-80gb")  # fp32 19.5, TF32 156, bf16 312 TFLOP/s, 2039 GB/s
H100 = catalog_entry("h100-sxm")  # fp32 67, TF32 494.7, bf16 989.4 TFLOP/s, 3350 GB/s
T4 = catalog_entry("t4")  # fp32 8.1, fp16 tensor 65 TFLOP/s, 320 GB/s
K80 = catalog_entry("k80")  # fp32 4.365 TFLOP/s, no fast half precision, 240 GB/s
MATRIX, ELEMENTWISE, NORMALISATION, OPTIMIZER, RECURRENT = range(5)
HALF = Efficiency(np.array([2.0] * 9 + [10.0]))  # half of every peak; 10 µs a kernel


def shape(
    flops, nbytes, classes=None, *, half=None, host_to_device_bytes=0.0, parameter_bytes=0.0, batch_size=100
) -> StepShape:
    flops = np.asarray(flops, dtype=float)
    classes = [MATRIX if value > 0 else ELEMENTWISE for value in flops] if classes is None else classes
    return StepShape(
        batch_size=batch_size,
        flops=flops,
        bytes=np.asarray(nbytes, dtype=float),
        classes=np.asarray(classes, dtype=int),
        half=np.zeros(len(flops), dtype=bool) if half is None else np.asarray(half, dtype=bool),
        parameter_bytes=parameter_bytes,
        host_to_device_bytes=host_to_device_bytes,
    )


def test_the_datasheet_figures_the_arithmetic_below_assumes():
    assert (V100.fp32_tflops, V100.tf32_tflops, V100.bf16_tflops, V100.fp16_tflops) == (15.7, None, None, 125.0)
    assert (V100.memory_gb_s, V100.host_link_gb_s) == (900.0, 15.75)
    assert (A100.fp32_tflops, A100.tf32_tflops, A100.bf16_tflops, A100.fp16_tflops) == (19.5, 156.0, 312.0, None)
    assert (T4.fp32_tflops, T4.fp16_tflops, T4.bf16_tflops) == (8.1, 65.0, None)
    assert (K80.fp32_tflops, K80.fp16_tflops, K80.bf16_tflops) == (8.73 / 2, None, None)
    assert PARAMETERS == (
        "compute fp32",
        "compute tf32",
        "compute half",
        "compute recurrent",
        "memory matrix",
        "memory element-wise",
        "memory normalisation",
        "memory optimizer",
        "memory recurrent",
        "per kernel",
    )


# --- 1. a kernel's time: its precision's peak, its class's bandwidth share, a fixed cost -------------------------


def test_predict_takes_each_kernel_at_the_longer_of_its_compute_and_its_memory_time():
    step = predict(Resolved.of(shape([1e12, 0.0], [1e6, 3e9], host_to_device_bytes=15.75e6), V100, "fp32"), HALF)
    # kernel 1: 1e12 / (0.5 * 15.7e12) = 0.12739 s of compute against 1e6 / (0.5 * 900e9) = 2.2e-6 s of memory
    # kernel 2: no FLOPs, 3e9 / (0.5 * 900e9) = 6.667e-3 s of memory
    assert step.compute_s == pytest.approx(1e12 / (0.5 * 15.7e12), rel=1e-12)
    assert step.memory_s == pytest.approx(3e9 / (0.5 * 900e9), rel=1e-12)  # kernel 1's memory side is not counted
    assert step.copy_s == pytest.approx(15.75e6 / 15.75e9, rel=1e-12)  # 1 ms
    assert step.launch_s == pytest.approx(2 * 10e-6, rel=1e-12)  # two kernels of 10 µs
    assert step.device_s == pytest.approx(1e12 / 7.85e12 + 3e9 / 450e9 + 1e-3 + 2e-5, rel=1e-12)
    assert step.seconds == step.device_s
    assert step.bound == "compute"  # 0.127 s > 6.7 ms > 1 ms > 20 µs

    heavier = predict(Resolved.of(shape([1e12, 0.0], [1e6, 3e12]), V100, "fp32"), HALF)
    assert heavier.memory_s == pytest.approx(3e12 / (0.5 * 900e9), rel=1e-12)  # 6.7 s
    assert heavier.bound == "memory traffic"
    copied = predict(Resolved.of(shape([1e12, 0.0], [1e6, 3e9], host_to_device_bytes=15.75e9), V100, "fp32"), HALF)
    assert copied.copy_s == pytest.approx(1.0, rel=1e-12) and copied.bound == "host-to-device copy"
    tiny = predict(Resolved.of(shape([1e3] * 1000, [1e3] * 1000), V100, "fp32"), HALF)
    assert tiny.launch_s == pytest.approx(1000 * 10e-6, rel=1e-12) and tiny.bound == "kernel launches"


def test_each_kernel_class_moves_its_bytes_at_its_own_share_of_the_bandwidth():
    shares = Efficiency(np.array([1.0] * 4 + [1.0, 2.0, 4.0, 8.0, 16.0, 0.0]))  # element-wise 1/2, norms 1/4, ...
    step = predict(
        Resolved.of(
            shape([0.0] * 5, [9e9] * 5, [MATRIX, ELEMENTWISE, NORMALISATION, OPTIMIZER, RECURRENT]), V100, "fp32"
        ),
        shares,
    )
    assert step.memory_s == pytest.approx(9e9 / 900e9 * (1 + 2 + 4 + 8 + 16), rel=1e-12)


def test_a_recurrent_kernel_reaches_its_own_share_of_the_peak_its_precision_gives():
    shares = Efficiency(np.array([1.0, 1.0, 1.0, 4.0] + [1.0] * 5 + [0.0]))  # recurrent arithmetic at a quarter
    resolved = Resolved.of(shape([1e12, 1e12], [0.0, 0.0], [MATRIX, RECURRENT]), V100, "amp-fp16")
    assert PEAKS[resolved.peaks[1]] == "half"  # the fp16 tensor cores' peak, 125 TFLOP/s
    assert predict(resolved, shares).compute_s == pytest.approx(1e12 / 125e12 + 4 * 1e12 / 125e12, rel=1e-12)


def test_the_input_pipeline_bounds_the_step_when_it_is_slower_than_the_gpu():
    resolved = Resolved.of(shape([1e12], [1e6]), V100, "fp32")
    device_s = 1e12 / 7.85e12 + 10e-6
    beside = predict(resolved, HALF, input_s=2.0)
    assert beside.device_s == pytest.approx(device_s, rel=1e-12)
    assert beside.seconds == 2.0 and beside.bound == "input pipeline"
    # without workers the loop launches the step (10 µs), then prepares the next batch while the GPU computes
    serial = predict(resolved, HALF, input_s=0.1, serial_input=True)
    assert serial.seconds == pytest.approx(device_s, rel=1e-12) and serial.bound == "compute"
    slow = predict(resolved, HALF, input_s=0.2, serial_input=True)
    assert slow.seconds == pytest.approx(10e-6 + 0.2, rel=1e-12) and slow.bound == "input pipeline"


@pytest.mark.parametrize(
    ("sheet", "precision", "tflops", "peak"),
    [
        (V100, "fp32", 15.7, "fp32"),
        (A100, "fp32", 19.5, "fp32"),  # seed mode: CUDA cores
        (A100, "tf32", 156.0, "tf32"),
        (V100, "tf32", 15.7, "fp32"),  # no TF32 before Ampere: fp32's pace and share
        (V100, "amp-fp16", 125.0, "half"),
        (T4, "amp-fp16", 65.0, "half"),
        (A100, "amp-fp16", 312.0, "half"),  # fp16 as fast as bf16 from Ampere on
        (H100, "amp-bf16", 989.4, "half"),
        (K80, "amp-fp16", 8.73 / 2, "fp32"),  # no fast half precision: fp32's
    ],
)
def test_a_matrix_kernel_runs_at_its_precisions_peak(sheet, precision, tflops, peak):
    resolved = Resolved.of(shape([1e12], [0.0]), sheet, precision)
    assert resolved.compute_s[0] == pytest.approx(1e12 / (tflops * 1e12), rel=1e-12)
    assert PEAKS[resolved.peaks[0]] == peak  # the share it is fitted and predicted with


def test_bf16_on_a_gpu_without_it_is_refused_with_what_runs_instead():
    with pytest.raises(PrecisionError, match="no bf16 arithmetic in its datasheet: estimate amp-fp16 or fp32"):
        Resolved.of(shape([1e12], [0.0]), V100, "amp-bf16")
    with pytest.raises(PrecisionError, match="compute peaks"):
        Resolved.of(shape([1e12], [0.0]), catalog_entry("a10g"), "fp32")


def test_mixed_precision_halves_activations_keeps_the_optimizer_fp32_and_casts_the_weights():
    step_shape = shape([1e9, 0.0, 0.0], [4e6, 8e6, 2e6], [MATRIX, ELEMENTWISE, OPTIMIZER], parameter_bytes=1e6)
    fp32 = Resolved.of(step_shape, V100, "fp32")
    amp = Resolved.of(step_shape, V100, "amp-fp16")
    assert fp32.kernels == 3 and amp.kernels == 4  # the weights' cast to half, once a step
    assert amp.memory_s * 900e9 == pytest.approx(
        [4e6 * AMP_BYTES, 8e6 * AMP_BYTES, 2e6, 1e6 * AMP_CAST_BYTES], rel=1e-12
    )
    assert fp32.memory_s * 900e9 == pytest.approx([4e6, 8e6, 2e6], rel=1e-12)
    assert amp.classes.tolist() == [MATRIX, ELEMENTWISE, OPTIMIZER, ELEMENTWISE]
    assert (AMP_BYTES, AMP_CAST_BYTES) == (0.5, 1.5)  # 2-byte activations; 4 bytes read and 2 written a weight


def test_a_model_built_in_half_precision_runs_its_matrices_on_the_half_peak_even_in_seed_mode():
    resolved = Resolved.of(shape([1e12, 1e12], [0.0, 0.0], half=[True, False]), A100, "fp32")
    assert resolved.compute_s.tolist() == pytest.approx([1e12 / 312e12, 1e12 / 19.5e12], rel=1e-12)


@pytest.mark.parametrize(
    ("operator", "flops", "kind"),
    [
        ("aten.addmm.default", 1e9, "matrix"),
        ("aten.convolution_backward.default", 1e9, "matrix"),
        ("cudnn_rnn.forward", 1e9, "recurrent"),
        ("cudnn_rnn.backward_weight", 1e9, "recurrent"),
        ("aten.relu.default", 0.0, "element-wise"),
        ("aten.add_.Tensor", 0.0, "element-wise"),
        ("aten.native_batch_norm.default", 0.0, "normalisation"),
        ("aten._log_softmax.default", 0.0, "normalisation"),
        ("aten.native_layer_norm_backward.default", 0.0, "normalisation"),
        ("aten.sum.dim_IntList", 0.0, "normalisation"),
        ("aten._foreach_mul_.Scalar", 0.0, "optimizer"),
        ("aten._fused_adam_.default", 0.0, "optimizer"),
    ],
)
def test_kernels_are_classed_by_their_operator(operator, flops, kind):
    assert KERNEL_CLASSES[kernel_class(operator, flops)] == kind


def test_a_step_shape_reads_a_profile_kernel_by_kernel():
    profile = StepProfile(
        batch_size=32,
        parameter_bytes=4e6,
        host_to_device_bytes=393_344.0,
        kernels=(
            Kernel("aten.mm.default", 2e9, 1e6, 2e5, "bfloat16", True),
            Kernel("aten.relu.default", 0.0, 5e5, 5e5, "float16", False),
            Kernel("aten._foreach_add_.List", 0.0, 8e6, 4e6, "float32", False),
        ),
    )
    step_shape = StepShape.of(profile)
    assert step_shape.batch_size == 32 and step_shape.kernels == 3
    assert step_shape.flops.tolist() == [2e9, 0.0, 0.0]
    assert step_shape.bytes.tolist() == [1.2e6, 1e6, 1.2e7]  # read + written
    assert step_shape.classes.tolist() == [MATRIX, ELEMENTWISE, OPTIMIZER]
    assert step_shape.half.tolist() == [True, True, False]
    assert (step_shape.parameter_bytes, step_shape.host_to_device_bytes) == (4e6, 393_344.0)


def test_a_step_at_any_batch_comes_from_two_profiles():
    from devicebench.estimate.points import shape_of
    from devicebench.workloads import get_workload

    workload = get_workload("cifar10-cnn")
    small, large, direct = (shape_of(workload, {**workload.defaults, "batch_size": batch}) for batch in (2, 4, 24))
    interpolated = small.at_batch(large, 24)
    assert interpolated.batch_size == 24
    assert interpolated.flops == pytest.approx(direct.flops, rel=1e-9)
    assert interpolated.bytes == pytest.approx(direct.bytes, rel=1e-9)
    assert interpolated.host_to_device_bytes == pytest.approx(direct.host_to_device_bytes, rel=1e-12)
    with pytest.raises(ValueError, match="two batch sizes"):
        small.at_batch(small, 24)


# --- 2. the fit: bounded least squares on relative errors recovers the shares that made the points ---------------

TRUE = Efficiency(np.array([1.5, 1.25, 2.5, 3.5, 1.1, 1.6, 4.0, 2.2, 1.8, 6.0]))


def synthetic_points(efficiency: Efficiency = TRUE) -> list[Point]:
    """Two points that each term dominates, on different GPUs, observed exactly as the roofline predicts with
    `efficiency`: any one left out, the other still pins its share."""
    specs = []
    for sheet in (V100, T4):
        specs.append(("fp32 compute", sheet, "fp32", shape([2e12], [1e6])))
        specs.append(("memory of a matrix kernel", sheet, "fp32", shape([1e6], [1e11])))
        specs.append(("element-wise", sheet, "fp32", shape([0.0], [2e11])))
        specs.append(("normalisation", sheet, "fp32", shape([0.0], [1e10], [NORMALISATION])))
        specs.append(("optimizer", sheet, "fp32", shape([0.0], [1e10], [OPTIMIZER])))
        specs.append(("launches", sheet, "fp32", shape([0.0] * 500, [1e3] * 500)))
        specs.append(("recurrent compute", sheet, "fp32", shape([2e12], [1e6], [RECURRENT])))
        specs.append(("recurrent memory", sheet, "fp32", shape([1e6], [1e11], [RECURRENT])))
    for sheet in (A100, H100):
        specs.append(("tf32 compute", sheet, "tf32", shape([5e13], [1e6])))
        specs.append(("half compute", sheet, "amp-bf16", shape([2e14], [1e6])))
    points = []
    for label, sheet, precision, step_shape in specs:
        resolved = Resolved.of(step_shape, sheet, precision)
        points.append(
            Point(
                f"{label} on {sheet.key}",
                "synthetic",
                label,
                sheet,
                precision,
                resolved,
                100,
                observed_s=predict(resolved, efficiency).device_s,
                kind="step",
            )
        )
    return points


def test_the_fit_recovers_the_shares_that_made_the_points():
    points = synthetic_points()
    fitter = Fitter(points)
    assert fitter.fit().inverse == pytest.approx(TRUE.inverse, rel=1e-3)  # the prior's weak pull: under 0.1%
    for index in range(len(points)):  # any one point left out, the others still pin every share
        assert fitter.fit([index]).inverse == pytest.approx(TRUE.inverse, rel=5e-3)  # one point: under 0.5%
    assert fitter.predicted_s(fitter.fit()) == pytest.approx([point.observed_s for point in points], rel=1e-3)
    pinned = fitter.pinned(TRUE)
    assert all(pinned[name] >= 2 for name in PARAMETERS), pinned


def test_a_share_no_point_depends_on_stays_at_its_prior_and_is_pinned_by_none():
    points = [point for point in synthetic_points() if not point.label.startswith("tf32")]
    fitter = Fitter(points)
    fitted = fitter.fit()
    assert fitted.inverse[PARAMETERS.index("compute tf32")] == pytest.approx(3.0, rel=1e-6)  # PRIOR
    assert fitter.pinned(fitted)["compute tf32"] == 0


def test_no_share_is_fitted_above_the_datasheet_peak():
    points = synthetic_points(Efficiency(np.array([0.5, 1.25, 2.5, 3.5, 1.1, 1.6, 4.0, 2.2, 1.8, 6.0])))  # fp32 x2
    fitted = Fitter(points).fit()
    assert fitted.inverse[0] == pytest.approx(1.0)  # held at the peak itself
    assert fitted.share("compute fp32") == pytest.approx(1.0)


# --- 3. held-out errors and the split-conformal interval ---------------------------------------------------------


def test_every_scheme_predicts_exact_points_exactly():
    fitter = Fitter(synthetic_points())
    for scheme in ("leave one out", "leave one GPU out", "leave one model out"):
        predicted = held_out(fitter, scheme)
        if scheme == "leave one model out":  # each label is the only one of its term twice over: left out
            assert np.isfinite(predicted).all()
            continue
        assert predicted == pytest.approx([point.observed_s for point in fitter.points], rel=2e-3), scheme


def test_a_point_twice_as_slow_is_predicted_as_the_others_say_and_falls_outside_their_interval():
    points = synthetic_points()
    points[0] = dataclasses.replace(points[0], observed_s=2 * points[0].observed_s)
    validations = validate(Fitter(points), "leave one out", level=0.8)
    first = validations[0]
    assert first.predicted_s == pytest.approx(points[0].observed_s / 2, rel=2e-3)
    assert first.error == pytest.approx(1.0, rel=5e-3)  # measured twice as slow: the rate predicted is +100%
    assert first.inside is False  # the others are exact: their interval is narrow
    assert first.interval is not None and first.interval.points == len(points) - 1


def test_each_point_is_judged_by_the_errors_of_the_groups_it_is_not_in():
    points = synthetic_points()
    for validation in validate(Fitter(points), "leave one GPU out", level=0.5):
        same_gpu = sum(point.sheet.key == validation.point.sheet.key for point in points)
        assert validation.interval is not None
        assert validation.interval.points == len(points) - same_gpu


def test_the_conformal_interval_is_the_error_of_rank_n_plus_one_times_the_level():
    errors = [0.1 * rank for rank in range(1, 11)]  # 0.1 ... 1.0
    interval = conformal([-error if rank % 2 else error for rank, error in enumerate(errors)], 0.8, "leave one out")
    assert interval is not None
    assert interval.half_width == pytest.approx(0.9)  # rank ceil(11 x 0.8) = 9 of 10; signs do not matter
    assert (interval.low_ratio, interval.high_ratio) == pytest.approx((math.exp(-0.9), math.exp(0.9)))
    assert interval.seconds(2.0) == pytest.approx((2.0 * math.exp(-0.9), 2.0 * math.exp(0.9)))
    assert (interval.level, interval.points, interval.scheme) == (0.8, 10, "leave one out")
    assert conformal(errors, 0.5, "leave one out").half_width == pytest.approx(0.6)  # rank ceil(5.5) = 6
    assert conformal(errors[:3], 0.8, "leave one out") is None  # rank ceil(3.2) = 4 of 3: too few
    assert conformal([0.1, float("nan")] * 5, 0.5, "leave one out").points == 5  # a failed prediction is no error
    with pytest.raises(ValueError, match="between 0 and 1"):
        conformal(errors, 80, "leave one out")


@pytest.mark.parametrize("noise", ["normal", "heavy-tailed"])
@pytest.mark.parametrize("size", [20, 100])
def test_the_interval_holds_a_new_exchangeable_error_at_its_stated_level(noise, size):
    """Split-conformal coverage is ceil((n + 1) level) / (n + 1) for continuous exchangeable errors, whatever their
    distribution: 17/21 = 81.0% at n = 20 and 81/101 = 80.2% at n = 100, for a level of 80%."""
    generator = np.random.default_rng(7)
    trials = 4000
    draws = (
        generator.normal(0.0, 0.3, (trials, size + 1))
        if noise == "normal"
        else generator.standard_t(2, (trials, size + 1)) * 0.2
    )
    inside = 0
    for row in draws:
        interval = conformal(row[:size], 0.8, "leave one out")
        inside += abs(row[size]) <= interval.half_width
    expected = math.ceil((size + 1) * 0.8) / (size + 1)
    assert inside / trials == pytest.approx(expected, abs=0.02)  # 4,000 trials: a standard error of 0.6 points


def test_validation_errors_medians_and_coverage():
    point = synthetic_points()[0]
    faster = Validation(point, predicted_s=point.observed_s / 2, interval=None)
    assert faster.error == pytest.approx(1.0)  # predicted twice as fast: +100%
    slower = Validation(point, predicted_s=point.observed_s * 4, interval=None)
    assert slower.error == pytest.approx(-0.75)
    held = Validation(point, predicted_s=point.observed_s / 2, interval=Interval(0.8, math.log(2.0), 9, "x"))
    missed = Validation(point, predicted_s=point.observed_s / 2, interval=Interval(0.8, math.log(1.9), 9, "x"))
    assert (faster.inside, held.inside, missed.inside) == (None, True, False)
    assert median_absolute_error([faster, slower, held]) == pytest.approx(1.0)  # of 1.0, 0.75, 1.0
    assert coverage([faster, held, missed]) == (1, 2)


def test_a_step_time_is_a_prediction_term_by_term():
    step = PredictedStep(compute_s=0.007, memory_s=0.002, copy_s=0.001, launch_s=1e-4, input_s=0.0, serial_input=False)
    assert step.device_s == pytest.approx(0.0101)
    assert step.seconds == step.device_s and step.bound == "compute"


# --- 5. the interval of a kind of model comes from that kind's errors where it has enough -------------------------


def test_a_kind_with_enough_points_takes_its_own_errors_and_one_with_few_the_pooled():
    from devicebench.estimate.validation import KIND_POINTS, kind_interval

    small = np.log(np.linspace(1.1, 2.0, KIND_POINTS))  # small models: off by 10% to 100%
    reference = np.log(np.linspace(1.01, 1.1, 40))  # reference models: 1% to 10%
    errors = np.concatenate([small, reference])
    kinds = np.array(["small"] * len(small) + ["reference"] * len(reference))
    own = kind_interval(errors, kinds, "small", 0.8, "leave one model out")
    assert own.kind == "small" and own.points == KIND_POINTS
    assert own.half_width == pytest.approx(np.sort(small)[math.ceil((KIND_POINTS + 1) * 0.8) - 1])
    assert "10 figures of small models" in own.note
    pooled_rank = math.ceil((len(errors) + 1) * 0.8) - 1
    assert kind_interval(errors, kinds, "reference", 0.8, "leave one model out").half_width == pytest.approx(
        np.sort(reference)[math.ceil(41 * 0.8) - 1]
    )
    few = kind_interval(errors[1:], kinds[1:], "small", 0.8, "leave one model out")  # 9 small: pooled
    assert few.kind is None and few.points == len(errors) - 1
    assert few.half_width == pytest.approx(np.sort(errors[1:])[math.ceil(len(errors) * 0.8) - 1])
    assert kind_interval(errors, kinds, None, 0.8, "leave one model out").half_width == pytest.approx(
        np.sort(errors)[pooled_rank]
    )


def test_a_point_far_from_the_rest_does_not_drag_the_fit_after_it(monkeypatch):
    points = synthetic_points()
    far = dataclasses.replace(points[0], label="a forged fp32 run", observed_s=points[0].observed_s * 10)
    robust = Fitter([*points, far]).fit().inverse
    compute = PARAMETERS.index("compute fp32")
    # the point alone would say 15 for the fp32 compute's 1.5; Huber's loss keeps it within 3% (2.5%)
    assert robust == pytest.approx(TRUE.inverse, rel=0.03)
    monkeypatch.setattr("devicebench.estimate.roofline.HUBER_RELATIVE", 1e9)  # plain least squares: 4.5%
    plain = Fitter([*points, far]).fit().inverse
    assert abs(plain[compute] / TRUE.inverse[compute] - 1) > 1.5 * abs(robust[compute] / TRUE.inverse[compute] - 1)
