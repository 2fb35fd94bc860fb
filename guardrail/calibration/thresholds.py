"""Verdict thresholds: agreement with labels as a function of the threshold.

A metric is UNSAFE when the judge's P(UNSAFE) is at least its threshold. Over
labelled cases (``unsafe`` is the positive class) every threshold gives a
confusion matrix and so precision, recall, accuracy and F1::

    judged = [Judged("unsafe", 0.9), Judged("safe", 0.2), Judged("unsafe", None)]
    points = curve(judged)                     # one Point per candidate threshold
    choice = recommend(points, Target.parse("precision=0.9"))
    choice.point.threshold if choice.point else choice.reason

``probability=None`` is a judgment that failed: it is never SAFE, so it counts
as wrong at every threshold (a missed unsafe case, or a safe case not called
SAFE) — the same rule as the calibration report's error column.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..judging.verdicts import DEFAULT_THRESHOLD

__all__ = ["Judged", "Point", "Target", "Choice", "GRID", "DEFAULT_THRESHOLD", "figures",
           "point_at", "cuts", "curve", "recommend", "display_rows", "TABLE"]

#: Thresholds always evaluated besides the cases' own probabilities: round
#: numbers to show in tables, and to recommend when they do as well as a cut.
GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))
#: Cuts are rounded down to this many decimals, so that the threshold written
#: to a settings file is exactly the one whose figures were reported.
DECIMALS = 4


@dataclass(frozen=True)
class Judged:
    """One labelled case as the curve sees it: its label and P(UNSAFE) (None: failed)."""

    label: Literal["unsafe", "safe"]
    probability: float | None


def figures(tp: int, fp: int, fn: int, cases: int, correct: int) -> dict[str, float | None]:
    """Precision, recall, accuracy and F1 (None where undefined).

    ``fn`` counts every unsafe case not judged UNSAFE, failures included;
    ``cases`` and ``correct`` count failures too (a failure is never correct).
    F1 is 0 when precision or recall is 0, unknown when either is undefined.
    """
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    if precision and recall:
        f1: float | None = 2 * precision * recall / (precision + recall)
    else:
        f1 = 0.0 if precision == 0 or recall == 0 else None
    return {"precision": precision, "recall": recall,
            "accuracy": correct / cases if cases else None, "f1": f1}


@dataclass(frozen=True)
class Point:
    """The confusion matrix at one threshold. Failed judgments: an unsafe one is
    also a missed case (``fn``); a safe one sits in no cell (wrong, but not a
    false alarm)."""

    threshold: float
    tp: int
    fp: int
    fn: int
    tn: int
    unsafe_errors: int = 0
    safe_errors: int = 0

    @property
    def errors(self) -> int:
        return self.unsafe_errors + self.safe_errors

    @property
    def cases(self) -> int:
        return self.tp + self.fp + self.fn + self.tn + self.safe_errors

    def figures(self) -> dict[str, float | None]:
        return figures(self.tp, self.fp, self.fn, self.cases, self.tp + self.tn)

    @property
    def precision(self) -> float | None:
        return self.figures()["precision"]

    @property
    def recall(self) -> float | None:
        return self.figures()["recall"]

    @property
    def accuracy(self) -> float | None:
        return self.figures()["accuracy"]

    @property
    def f1(self) -> float | None:
        return self.figures()["f1"]

    def as_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, **self.figures(), "tp": self.tp, "fp": self.fp,
                "fn": self.fn, "tn": self.tn, "errors": self.errors}


def point_at(threshold: float, judged: Iterable[Judged]) -> Point:
    """The confusion matrix when UNSAFE means ``probability >= threshold``."""
    tp = fp = fn = tn = unsafe_errors = safe_errors = 0
    for case in judged:
        if case.probability is None:
            if case.label == "unsafe":
                unsafe_errors += 1
            else:
                safe_errors += 1
            continue
        flagged = case.probability >= threshold
        if case.label == "unsafe":
            tp, fn = tp + flagged, fn + (not flagged)
        else:
            fp, tn = fp + flagged, tn + (not flagged)
    return Point(threshold, tp, fp, fn + unsafe_errors, tn, unsafe_errors, safe_errors)


def _floor(probability: float) -> float:
    """Round down to :data:`DECIMALS` (a case at P=0.70004 stays UNSAFE at 0.7),
    never to 0: a threshold of 0 is not a setting."""
    scale = 10 ** DECIMALS
    return max(1 / scale, math.floor(round(probability * scale, 6)) / scale)


def cuts(judged: Iterable[Judged], *, extra: Iterable[float] = ()) -> list[float]:
    """Every threshold worth evaluating, ascending: each distinct probability (a
    threshold between two of them changes nothing), the :data:`GRID`, 1.0 and
    ``extra`` (e.g. the configured threshold)."""
    found = {_floor(c.probability) for c in judged if c.probability is not None}
    # 1.0, the highest setting: only a judge certain of UNSAFE flags anything.
    return sorted(found | set(GRID) | {DEFAULT_THRESHOLD, 1.0} | set(extra))


def curve(judged: Sequence[Judged], *, extra: Iterable[float] = ()) -> list[Point]:
    """The confusion matrix at every threshold of :func:`cuts`."""
    return [point_at(t, judged) for t in cuts(judged, extra=extra)]


#: Figures within this of a target reach it (7/10 computed is not always 0.7).
_EPSILON = 1e-9


@dataclass(frozen=True)
class Target:
    """What a recommended threshold optimises::

        Target.parse("accuracy")        # the best accuracy (ties: nearest 0.5)
        Target.parse("precision=0.9")   # the best recall with precision >= 0.9
        Target.parse("recall=0.9")      # the best precision with recall >= 0.9
    """

    kind: Literal["accuracy", "precision", "recall"] = "accuracy"
    value: float | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        """Raises ``ValueError`` with a message fit for a usage error."""
        kind, _, value = text.strip().partition("=")
        kind = kind.strip().lower()
        if kind == "accuracy" and not value:
            return cls("accuracy")
        if kind in ("precision", "recall") and value:
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if 0 < number <= 1:
                return cls(kind, number)  # type: ignore[arg-type]
            raise ValueError(f"{kind} needs a value in (0, 1], got {value.strip()!r}")
        raise ValueError(f"expected accuracy, precision=P or recall=R, got {text!r}")

    def __str__(self) -> str:
        return self.kind if self.value is None else f"{self.kind}={self.value:g}"


@dataclass(frozen=True)
class Choice:
    """The recommended threshold's point, or why there is none."""

    point: Point | None
    reason: str | None = None


def _near_default(point: Point) -> tuple[float, float]:
    # Nearest 0.5 first (today's cut: the smallest change that does as well);
    # between two equally near, the higher one (fewer alarms).
    return (-abs(point.threshold - DEFAULT_THRESHOLD), point.threshold)


def recommend(points: Sequence[Point], target: Target) -> Choice:
    """The threshold ``target`` asks for among ``points`` (see :class:`Target`).

    ``precision=P``: of the thresholds reaching precision P, the one with the
    highest recall (then precision, then nearest 0.5). ``recall=R``: of those
    reaching recall R, the one with the best precision (then the highest
    threshold: fewest alarms). ``accuracy``: the best accuracy (ties: nearest
    0.5). A target no threshold reaches gives ``point=None`` and the reason.
    """
    if target.kind == "accuracy":
        scored = [p for p in points if p.accuracy is not None]
        if not scored:
            return Choice(None, "no labelled cases")
        return Choice(max(scored, key=lambda p: (p.accuracy, *_near_default(p))))
    goal = float(target.value)  # type: ignore[arg-type]
    reached = [p for p in points if (getattr(p, target.kind) or 0.0) >= goal - _EPSILON]
    if not reached:
        return Choice(None, _unreached(points, target))
    if target.kind == "precision":
        best = max(reached, key=lambda p: (p.recall or 0.0, p.precision, *_near_default(p)))
    else:
        best = max(reached, key=lambda p: (p.precision or 0.0, p.threshold))
    return Choice(best)


def _unreached(points: Sequence[Point], target: Target) -> str:
    """Why ``target`` was not reached, with the nearest any threshold came."""
    known = [p for p in points if getattr(p, target.kind) is not None]
    if not known:
        what = "unsafe cases" if target.kind == "recall" else "cases judged UNSAFE"
        return f"{target} cannot be measured: no {what}"
    best = max(known, key=lambda p: (getattr(p, target.kind), *_near_default(p)))
    return (f"{target} is not reached at any threshold: the best {target.kind} is "
            f"{getattr(best, target.kind):.3f} (at {best.threshold:g})")


#: The thresholds a terminal table shows (besides the recommended and configured ones).
TABLE = tuple(round(0.1 * k, 1) for k in range(1, 10))


def display_rows(points: Sequence[Point], *, recommended: float | None,
                 configured: float) -> list[tuple[Point, str]]:
    """The points of :data:`TABLE` plus the recommended and configured ones, in
    threshold order, each with its mark (``""``, ``"recommended"``, ...)."""
    marks = dict.fromkeys(TABLE, "")
    marks[configured] = "configured"
    if recommended is not None:
        marks[recommended] = ("recommended = configured" if recommended == configured
                              else "recommended")
    at = {p.threshold: p for p in points}
    return [(at[t], marks[t]) for t in sorted(marks) if t in at]
