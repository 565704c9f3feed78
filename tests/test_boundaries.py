"""The numbers behind devicebench's verdicts, pinned where they change: the speedup interval's 95% level, the
diagnosis thresholds at their exact boundaries, and the rule that a dataset lives on the GPU only when it fits in
half the free memory.

    python -m pytest tests/test_boundaries.py -q
"""

from __future__ import annotations

import pytest
import torch
from test_diagnosis import record_with

from devicebench.data import placement
from devicebench.results import stats
from devicebench.results.diagnosis import (
    BUSY_DEVICE_PERCENT,
    IDLE_DEVICE_PERCENT,
    INPUT_BOUND_WAIT_SHARE,
    diagnose,
)

BASELINE = [100.0, 104.0, 97.0, 101.0, 99.0]  # samples/s of five steady epochs
CANDIDATE = [790.0, 805.0, 812.0, 798.0, 801.0]


def test_the_speedup_interval_is_95_percent_with_fixed_ends_for_a_fixed_sample(monkeypatch):
    assert stats.CONFIDENCE == 0.95
    interval = stats.speedup(BASELINE, CANDIDATE)
    assert interval.ratio == pytest.approx(801 / 100)
    # five a side: the 3rd smallest and 3rd largest of the 25 pairwise ratios, 1 - 2 x 4/252 = 96.8% (U <= 2 in 4
    # of the 252 orderings); the ends are ratios of measured rates
    assert interval.level == pytest.approx(1 - 2 * 4 / 252)
    assert (interval.low, interval.high) == (pytest.approx(801 / 104), pytest.approx(801 / 97))
    stats.interval_rank.cache_clear()
    monkeypatch.setattr(stats, "CONFIDENCE", 0.90)  # a lower level would show: its interval is narrower
    narrower = stats.speedup(BASELINE, CANDIDATE)
    stats.interval_rank.cache_clear()
    assert interval.low < narrower.low and narrower.high < interval.high and narrower.level < interval.level


def test_waiting_exactly_half_the_time_is_input_bound_and_a_hair_less_is_not():
    assert INPUT_BOUND_WAIT_SHARE == 0.5
    assert diagnose(record_with([0.0, 5.0, 5.0], train_s=10.0), cores=2).verdict == "input-bound"
    assert diagnose(record_with([0.0, 4.999, 4.999], train_s=10.0), cores=2).verdict == "compute-bound"


def test_a_device_busy_80_percent_is_the_bottleneck_and_79_9_percent_is_not():
    assert BUSY_DEVICE_PERCENT == 80.0
    waiting = [0.0, 6.0, 6.0]  # 60% of training spent waiting for batches
    assert diagnose(record_with(waiting, utilization=80.0), cores=2).verdict == "compute-bound"
    assert diagnose(record_with(waiting, utilization=79.9), cores=2).verdict == "input-bound"


def test_a_device_below_50_percent_busy_is_told_it_idles_and_at_50_percent_is_not():
    assert IDLE_DEVICE_PERCENT == 50.0
    assert "idles between small steps" in diagnose(record_with([0.0, 1.0], utilization=49.9), cores=2).text
    assert "keeps up" in diagnose(record_with([0.0, 1.0], utilization=50.0), cores=2).text


def test_a_dataset_stays_on_the_gpu_only_when_it_fits_in_half_its_free_memory(monkeypatch):
    free_bytes = 8 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free_bytes, 80 * 2**30))
    gpu = torch.device("cuda", 0)
    assert placement.fits_on(gpu, free_bytes // 2)
    assert not placement.fits_on(gpu, free_bytes // 2 + 1)
    assert not placement.fits_on(torch.device("meta"), 1)  # only CUDA tells its free memory
    assert placement.fits_on(torch.device("cpu"), 2**50)  # the CPU's arrays are in its memory already
