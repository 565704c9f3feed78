"""The roofline's fit kept on disk (estimate/fit_cache.py): a valid file is read back without profiling or fitting
anything; a file whose key does not match, one cut short, one of another shape and one that is no archive at all are
each refused and the fit made afresh; and the key changes with what the fit is made of.

    python -m pytest tests/test_estimate_cache.py -q
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import result_fixtures

from devicebench.estimate import fit_cache, points
from devicebench.estimate.roofline import Fitter
from devicebench.results.record import published_figures


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A cache folder of the test's own, a record of no rows (the seeds' two figures are the points: a fit in a
    moment), and a count of the fits made."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(points, "published_figures", lambda: [])
    monkeypatch.setattr(points, "committed_results", lambda: [])
    fits = []
    fit = Fitter.fit
    monkeypatch.setattr(Fitter, "fit", lambda self, *args, **kwargs: fits.append(1) or fit(self, *args, **kwargs))
    return fits


def same_fit(first: points.RooflineFit, second: points.RooflineFit) -> None:
    assert np.array_equal(first.efficiency.inverse, second.efficiency.inverse)
    assert np.array_equal(first.efficiency.host, second.efficiency.host)
    assert [point.label for point in first.points] == [point.label for point in second.points]
    for scheme in ("leave one out", "leave one model out"):
        assert np.array_equal(first.log_errors(scheme), second.log_errors(scheme), equal_nan=True)
    for mine, theirs in zip(first.points, second.points):
        assert np.array_equal(mine.resolved.compute_s, theirs.resolved.compute_s)
        assert np.array_equal(mine.resolved.host_work, theirs.resolved.host_work)
        assert mine.sheet == theirs.sheet and mine.observed_s == theirs.observed_s


def test_a_kept_fit_is_read_back_without_profiling_or_fitting(counted, monkeypatch):
    made = points.fit_roofline([])
    assert counted, "the first fit was made"
    assert fit_cache.cache_path(fit_cache.fit_key([], points.SEED_FIGURES, [])).is_file()
    counted.clear()
    monkeypatch.setattr(points, "seed_points", lambda: pytest.fail("a kept fit profiled the seeds' steps again"))
    read = points.fit_roofline([])
    assert counted == []  # neither the fit nor any held-out fit
    same_fit(made, read)
    assert read.pinned == made.pinned


@pytest.mark.parametrize(
    "spoil", ["another key", "truncated", "another shape", "host counts of another shape", "not an archive"]
)
def test_a_foreign_or_spoilt_cache_file_is_refused_and_the_fit_made_afresh(counted, spoil):
    key = fit_cache.fit_key([], points.SEED_FIGURES, [])
    path = fit_cache.cache_path(key)
    made = points.fit_roofline([])
    if spoil == "another key":  # a valid fit, kept under another key, put where this key's file goes
        foreign = fit_cache.CachedFit(made.points[:1], [], made.efficiency, {})
        fit_cache.save("f" * 64, foreign)
        shutil.copyfile(fit_cache.cache_path("f" * 64), path)
        assert fit_cache.load("f" * 64) is not None
    elif spoil == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif spoil == "another shape":  # this key's file with a kernel's seconds missing
        with np.load(path, allow_pickle=False) as archive:
            arrays = dict(archive.items())
        arrays["compute_s"] = arrays["compute_s"][:-1]
        np.savez(path.with_suffix(".tmp.npz"), **arrays)
        path.with_suffix(".tmp.npz").replace(path)
    elif spoil == "host counts of another shape":  # a point's host counts without its batch from loader workers
        with np.load(path, allow_pickle=False) as archive:
            arrays = dict(archive.items())
        arrays["host_work"] = arrays["host_work"][:, :-1]
        np.savez(path.with_suffix(".tmp.npz"), **arrays)
        path.with_suffix(".tmp.npz").replace(path)
    else:
        path.write_text('{"kind": "devicebench-estimate"}')
    assert fit_cache.load(key) is None
    counted.clear()
    rebuilt = points.fit_roofline([])
    assert counted, "the fit was made afresh"
    same_fit(made, rebuilt)
    assert fit_cache.load(key) is not None  # and kept again, valid


def test_the_key_changes_with_the_record_the_runs_and_torch(monkeypatch):
    figures = published_figures()[:3]
    run = result_fixtures.session(result_fixtures.machine("box", "m1"), [result_fixtures.run("cuda:0", [1.0, 2.0])])
    key = fit_cache.fit_key(figures, points.SEED_FIGURES, [])
    assert fit_cache.fit_key(figures, points.SEED_FIGURES, []) == key
    assert fit_cache.fit_key(figures[:2], points.SEED_FIGURES, []) != key
    assert fit_cache.fit_key(figures, points.SEED_FIGURES, [run]) != key
    monkeypatch.setattr(fit_cache.torch, "__version__", "0.0.1")
    assert fit_cache.fit_key(figures, points.SEED_FIGURES, []) != key


def test_a_cache_that_cannot_be_written_is_no_failure(counted, tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    fitted = points.fit_roofline([])
    assert len(fitted.points) == len(points.SEED_FIGURES)
