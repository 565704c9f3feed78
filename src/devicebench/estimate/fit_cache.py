"""The roofline's fit kept on disk between processes, so that a GPU run's "estimated beforehand" line and
`estimate --validate` do not profile every record row again (about 10 s on two cores) each time.

A file holds one fit: its points (each with its kernels' seconds at the datasheet peaks), the figures not scored and
why, the fitted shares, and every point's time as predicted by the fits made without its group under each
validation scheme. It is named and keyed by a SHA-256 of everything the fit is made of (the record's rows, the runs
used, the datasheets, the fit's code and torch's version: `fit_key`), and the key is stored inside as
well: a file whose key differs, that is cut short, that is not an archive, or whose arrays have another shape or
hold values no fit makes is refused and the fit made afresh, never trusted. It is read with `allow_pickle=False`, so
a file planted in the cache folder can run nothing.

    python -c "from devicebench.estimate.fit_cache import cache_folder; print(cache_folder())"
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from devicebench.choices import KERNEL_PRECISIONS
from devicebench.estimate.host import HOST_TERMS
from devicebench.estimate.roofline import (
    COMPUTE_SHARES,
    KERNEL_CLASSES,
    PARAMETERS,
    PEAKS,
    Efficiency,
    Point,
    Resolved,
    Unscored,
)
from devicebench.files import UnusableFile, require_regular_file, user_folder, write_atomically
from devicebench.results.datasheets import DATASHEETS, catalog_entry
from devicebench.results.schema import Result

CACHE_FORMAT = 2  # the layout of a file below; a file of another layout is refused
_PACKAGE = Path(__file__).resolve().parents[1]
FIT_CODE = (_PACKAGE / "estimate", _PACKAGE / "workloads")  # what a fit's points and shares are made by
FIT_CODE_FILES = tuple(
    _PACKAGE / "engine" / name for name in ("opcount.py", "kernel_recorder.py", "fused_recurrence.py", "flops.py")
)
KEPT_FILES = 8  # fits kept (the record alone, and with each database in use); the oldest beyond go
_PER_KERNEL_ARRAYS = ("compute_s", "memory_s", "peaks", "shares", "classes")  # Resolved's arrays, kernel by kernel
_INDEX_RANGES = {"peaks": len(PEAKS), "shares": len(COMPUTE_SHARES), "classes": len(KERNEL_CLASSES)}


class RefusedCache(ValueError):
    """A cache file that is not a fit this process would make: it is rebuilt."""


@dataclass(frozen=True)
class CachedFit:
    """What a fit is, as kept on disk: enough to estimate, validate and draw without profiling a step."""

    points: list[Point]
    unscored: list[Unscored]
    efficiency: Efficiency
    held_out_s: dict[str, np.ndarray]  # by validation scheme: each point's seconds from a fit made without its group


def fit_key(figures: Sequence[object], seeds: Sequence[object], results: Sequence[Result]) -> str:
    """A SHA-256 of everything a fit is made of: the record's rows (`figures`), the seeds' figures, the runs offered as points,
    the datasheets, the code that profiles and fits (its source text: any change to it makes a new fit), and the
    versions of torch (whose kernels and FLOP formulas the profile counts) and numpy."""
    code = hashlib.sha256()
    for path in sorted(path for folder in FIT_CODE for path in folder.glob("*.py")) + list(FIT_CODE_FILES):
        code.update(path.read_bytes())
    made_of = {
        "code": code.hexdigest(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "record": [repr(figure) for figure in figures],
        "seeds": [repr(figure) for figure in seeds],
        "datasheets": [repr(sheet) for sheet in DATASHEETS],
        "runs": [result.to_dict() for result in results],
    }
    return hashlib.sha256(json.dumps(made_of, sort_keys=True, default=repr).encode()).hexdigest()


def cache_folder() -> Path:
    """Where the fits are kept: `roofline` in devicebench's cache folder (platformdirs)."""
    return user_folder("cache", "the roofline fit's cache") / "roofline"


def cache_path(key: str) -> Path:
    return cache_folder() / f"fit-{key[:32]}.npz"


def load(key: str) -> CachedFit | None:
    """The fit kept under `key`, or None when there is none or the file is refused (it is then rebuilt)."""
    path = cache_path(key)
    try:
        require_regular_file(path, "the roofline fit's cache")
        with np.load(path, allow_pickle=False) as archive:
            return _read(dict(archive.items()), key)
    except FileNotFoundError:
        return None
    except (OSError, EOFError, ValueError, TypeError, KeyError, zipfile.BadZipFile, UnusableFile):
        return None  # truncated, foreign or of another shape: RefusedCache is a ValueError


def save(key: str, fit: CachedFit) -> None:
    """Keep `fit` under `key`; a cache that cannot be written (a read-only home, a full disk) is no failure."""
    with contextlib.suppress(OSError, UnusableFile):
        path = cache_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **_arrays(key, fit))
        write_atomically(path, buffer.getvalue())
        _prune(path.parent)


def _prune(folder: Path) -> None:
    kept = sorted(folder.glob("fit-*.npz"), key=lambda path: path.stat().st_mtime, reverse=True)
    for old in kept[KEPT_FILES:]:
        old.unlink(missing_ok=True)


def _arrays(key: str, fit: CachedFit) -> dict[str, np.ndarray]:
    resolved = [point.resolved for point in fit.points]
    described = {
        "format": CACHE_FORMAT,
        "key": key,
        "points": [_point_fields(point) for point in fit.points],
        "unscored": [dataclasses.asdict(item) for item in fit.unscored],
        "schemes": sorted(fit.held_out_s),
    }
    return {
        "described": np.array(json.dumps(described)),
        "kernels": np.array([part.kernels for part in resolved], dtype=np.int64),
        "copy_s": np.array([part.copy_s for part in resolved], dtype=float),
        "host_work": np.array([part.host_work for part in resolved], dtype=float).reshape(
            len(resolved), len(HOST_TERMS)
        ),
        **{name: np.concatenate([getattr(part, name) for part in resolved]) for name in _PER_KERNEL_ARRAYS},
        **{
            f"efficiency {field.name}": np.asarray(getattr(fit.efficiency, field.name), dtype=float)
            for field in dataclasses.fields(Efficiency)
        },
        **{f"held_out {scheme}": np.asarray(seconds, dtype=float) for scheme, seconds in fit.held_out_s.items()},
    }


def _point_fields(point: Point) -> dict[str, Any]:
    fields = {field.name: getattr(point, field.name) for field in dataclasses.fields(point)}
    return {**fields, "sheet": point.sheet.key, "resolved": None}


def _read(arrays: dict[str, np.ndarray], key: str) -> CachedFit:
    described = json.loads(str(arrays["described"]))
    if not isinstance(described, dict) or described.get("format") != CACHE_FORMAT or described.get("key") != key:
        raise RefusedCache("another fit's file")
    kernels = arrays["kernels"]
    count = len(described["points"])
    if kernels.shape != (count,) or arrays["copy_s"].shape != (count,) or (kernels < 0).any():
        raise RefusedCache("points and arrays disagree")
    for name in _PER_KERNEL_ARRAYS:
        if arrays[name].shape != (int(kernels.sum()),):
            raise RefusedCache(f"{name} is not one value a kernel")
    for name, limit in _INDEX_RANGES.items():
        if arrays[name].size and not (
            arrays[name].dtype.kind == "i" and 0 <= arrays[name].min() <= arrays[name].max() < limit
        ):
            raise RefusedCache(f"{name} holds indices no fit makes")
    fitted = {field.name: arrays[f"efficiency {field.name}"] for field in dataclasses.fields(Efficiency)}
    held_out = {scheme: arrays[f"held_out {scheme}"] for scheme in described["schemes"]}
    numbers = [*fitted.values(), arrays["copy_s"], arrays["compute_s"], arrays["memory_s"], arrays["host_work"]]
    if (
        fitted["inverse"].shape != (len(PARAMETERS),)
        or fitted["host"].shape != (len(HOST_TERMS),)
        or not all(np.isfinite(part).all() for part in numbers)
    ):
        raise RefusedCache("fitted shares of another shape")
    if arrays["host_work"].shape != (count, len(HOST_TERMS)) or (arrays["host_work"] < 0).any():
        raise RefusedCache("the host's counts are not one row of counts a point")
    if any(seconds.shape != (count,) for seconds in held_out.values()):
        raise RefusedCache("held-out predictions of another shape")
    ends = np.cumsum(kernels)
    points = []
    for index, fields in enumerate(described["points"]):
        start = int(ends[index] - kernels[index])
        part = {name: arrays[name][start : ends[index]] for name in _PER_KERNEL_ARRAYS}
        resolved = Resolved(**part, copy_s=float(arrays["copy_s"][index]), host_work=arrays["host_work"][index])
        point = Point(**{**fields, "sheet": catalog_entry(fields["sheet"]), "resolved": resolved})
        if point.precision not in KERNEL_PRECISIONS or point.kind not in ("step", "busy") or not point.observed_s > 0:
            raise RefusedCache(f"point {index} is not one a fit makes")
        points.append(point)
    return CachedFit(
        points=points,
        unscored=[Unscored(**item) for item in described["unscored"]],
        efficiency=Efficiency(fitted["inverse"], fitted["host"]),
        held_out_s=held_out,
    )
