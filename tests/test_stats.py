"""Spreads and speedups computed from known numbers."""

from __future__ import annotations

import pytest

from devicebench.results.stats import speedup, spread


def test_spread_of_known_values():
    result = spread([3.0, 1.0, 2.0, 10.0])
    assert (result.median, result.low, result.high, result.count) == (2.5, 1.0, 10.0, 4)
    with pytest.raises(ValueError):
        spread([])


def test_speedup_is_the_ratio_of_median_throughputs():
    result = speedup([100.0, 110.0, 90.0], [800.0, 1000.0, 900.0])
    assert result.ratio == pytest.approx(9.0)
    assert result.low <= result.ratio <= result.high
    assert result.low >= 800 / 110 and result.high <= 1000 / 90  # bounded by the extreme resamples


def test_identical_samples_give_a_zero_width_interval():
    result = speedup([50.0, 50.0, 50.0], [200.0, 200.0])
    assert (result.ratio, result.low, result.high) == (4.0, 4.0, 4.0)


def test_a_single_sample_gives_no_interval():
    result = speedup([100.0], [300.0, 310.0])
    assert result.ratio == pytest.approx(3.05)
    assert result.low is None and result.high is None


def test_the_interval_is_reproducible_and_narrows_with_more_samples():
    few = speedup([100, 120, 80], [300, 360, 240])
    assert few == speedup([100, 120, 80], [300, 360, 240])
    many = speedup([100, 120, 80] * 10, [300, 360, 240] * 10)
    assert many.high - many.low < few.high - few.low


def test_a_speedup_needs_both_sides():
    with pytest.raises(ValueError):
        speedup([], [1.0])
