"""How far off the roofline is: each point predicted by a fit made without its group (leaving out one point, one GPU
or one model: SCHEMES), and the interval with a stated level that those held-out errors give.

The interval is split-conformal: the absolute log errors of points predicted by fits made without them (leaving out
one point, one GPU or one model, as `held_out` does) are sorted, and the error of rank ceil((n + 1) x level) is the
interval's half-width on a log scale. A new point exchangeable with the held-out ones falls inside with a chance of at
least the level.

    python -m devicebench estimate --validate
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from devicebench.estimate.roofline import Fitter, Point

DEFAULT_LEVEL = 0.8  # the interval's stated level unless asked for another
# A kind of model's interval comes from its own kind's held-out errors where it has at least this many (so that a
# level up to 0.9 has a rank among them: ceil((n + 1) x 0.9) <= n from n = 9 on); with fewer, every kind's pooled
KIND_POINTS = 10

SCHEMES: dict[str, Callable[[Point], Hashable]] = {  # what each validation leaves out together
    "leave one out": id,
    "leave one GPU out": lambda point: point.sheet.key,
    "leave one model out": lambda point: point.workload,
}


def held_out(fitter: Fitter, scheme: str) -> np.ndarray:
    """Each point's seconds as predicted by a fit made without its group under `scheme` (a key of SCHEMES)."""
    group_of = SCHEMES[scheme]
    groups: dict[Hashable, list[int]] = {}
    for index, point in enumerate(fitter.points):
        groups.setdefault(group_of(point), []).append(index)
    everything = fitter.fit()
    predicted = np.full(len(fitter.points), math.nan)
    for members in groups.values():
        if len(members) == len(fitter.points):
            continue  # nothing left to fit on
        efficiency = fitter.fit(members, start=everything)
        predicted[members] = [fitter.points[index].predicted_s(efficiency) for index in members]
    return predicted


@dataclass(frozen=True)
class Interval:
    """How far off an estimate may be, from held-out errors: a split-conformal interval at `level`."""

    level: float  # the stated chance that a new point like the held-out ones falls inside: 0.8
    half_width: float  # on a log scale: the interval is the estimate times and divided by exp(half_width)
    points: int  # the held-out errors it rests on
    scheme: str  # how they were held out: a key of SCHEMES
    kind: str | None = None  # the kind of model whose errors they are (Point.model_kind); None: every kind's pooled

    @property
    def low_ratio(self) -> float:
        return math.exp(-self.half_width)

    @property
    def high_ratio(self) -> float:
        return math.exp(self.half_width)

    def seconds(self, predicted_s: float) -> tuple[float, float]:
        return predicted_s * self.low_ratio, predicted_s * self.high_ratio

    @property
    def note(self) -> str:
        figures = (
            f"{self.points} figures of {self.kind} models"
            if self.kind
            else f"{self.points} figures of every kind of model (pooled where a kind has fewer than {KIND_POINTS})"
        )
        return (
            f"split-conformal at {self.level:.0%}, from the errors of {figures}, each predicted by a fit made "
            f"without {SCHEME_WORDS[self.scheme]}: the estimate times or divided by {self.high_ratio:.2f}"
        )


SCHEME_WORDS = {"leave one out": "it", "leave one GPU out": "its GPU", "leave one model out": "its model"}


def conformal(
    log_errors: Sequence[float] | np.ndarray, level: float, scheme: str, kind: str | None = None
) -> Interval | None:
    """The interval the absolute `log_errors` (log of measured over predicted seconds) give at `level`; None where
    they are too few for it: the error of rank ceil((n + 1) x level) must exist."""
    if not 0 < level < 1:
        raise ValueError(f"a level is a share between 0 and 1, not {level}")
    errors = np.sort(np.abs(np.asarray(log_errors, dtype=float)))
    errors = errors[np.isfinite(errors)]
    rank = math.ceil((len(errors) + 1) * level)
    if rank > len(errors):
        return None
    return Interval(level, float(errors[rank - 1]), len(errors), scheme, kind)


def kind_interval(
    log_errors: np.ndarray, kinds: np.ndarray, kind: str | None, level: float, scheme: str
) -> Interval | None:
    """The interval for a model of `kind` (None: a kind no point is of): from the held-out errors of that kind's
    points where there are at least KIND_POINTS of them, else from every point's (pooled)."""
    mine = kinds == kind
    finite = np.isfinite(log_errors)
    if kind is not None and (mine & finite).sum() >= KIND_POINTS:
        return conformal(log_errors[mine], level, scheme, kind)
    return conformal(log_errors, level, scheme)


@dataclass(frozen=True)
class Validation:
    """One point predicted by a fit made without its group, with the interval the other groups' errors give."""

    point: Point
    predicted_s: float
    interval: Interval | None

    @property
    def error(self) -> float:
        """Relative error of the predicted rate: predicted samples/s over measured, minus one."""
        return self.point.observed_s / self.predicted_s - 1.0

    @property
    def inside(self) -> bool | None:
        if self.interval is None:
            return None
        low, high = self.interval.seconds(self.predicted_s)
        return low <= self.point.observed_s <= high


def validate(
    fitter: Fitter, scheme: str, level: float = DEFAULT_LEVEL, predicted: np.ndarray | None = None
) -> list[Validation]:
    """Every point predicted without its group, and checked against the interval the held-out errors of the points
    outside its group state. `predicted`: held_out(fitter, scheme) when already made (a cached fit keeps it)."""
    predicted = held_out(fitter, scheme) if predicted is None else predicted
    log_errors = np.log(np.array([point.observed_s for point in fitter.points]) / predicted)
    group_of = SCHEMES[scheme]
    groups = np.array([hash(group_of(point)) for point in fitter.points])
    kinds = np.array([point.model_kind for point in fitter.points])
    validations = []
    for index, point in enumerate(fitter.points):
        others = groups != groups[index]
        interval = kind_interval(log_errors[others], kinds[others], point.model_kind, level, scheme)
        validations.append(Validation(point, float(predicted[index]), interval))
    return validations


def median_absolute_error(validations: Sequence[Validation]) -> float | None:
    errors = [abs(validation.error) for validation in validations if math.isfinite(validation.predicted_s)]
    return float(np.median(errors)) if errors else None


def coverage(validations: Sequence[Validation]) -> tuple[int, int]:
    """(points inside their interval, points that had one)."""
    judged = [validation.inside for validation in validations if validation.inside is not None]
    return sum(judged), len(judged)
