"""The judge measured against its reviewers, and unsafe rates corrected for it.

Pure: labels in, figures out (no Kafka, no clock). Reviewers' labels are
``unsafe`` (the positive class) or ``safe``; the judge said UNSAFE, SAFE, or
failed (an error: counted apart, never in precision or recall)::

    cells = agreement_cells(labels, window_seconds=300,
                            group_labels=("model", "model_version", "prompt_version"))
    for key, confusion in cells.items():
        confusion.precision()     # Estimate(value=0.8, low=0.49, high=0.94, n_eff=10.0)
        confusion.recall()        # P(judge UNSAFE | reviewer unsafe), weighted
        corrected_rate(observed_unsafe=12, observed_total=40, confusion=confusion,
                       min_reviews=10)   # Corrected(value=0.27, low=…, high=…, note=None)

**Weights.** A review is chosen with a known probability, its ``rate``
(:mod:`.selection`): every UNSAFE verdict and error at ``review_rate_unsafe``,
the unsure band at 1, a SAFE verdict at ``review_rate_safe`` (say 0.01). Each
review stands for ``w = 1 / rate`` judged results of its kind (Horvitz–Thompson),
so a SAFE-slice review at rate 0.1 weighs 10 and one UNSAFE review weighs 1.
Every figure is a weighted proportion over the reviews of its denominator:

- precision   = W(judge UNSAFE ∧ reviewer unsafe) / W(judge UNSAFE)
- recall      = W(judge UNSAFE ∧ reviewer unsafe) / W(reviewer unsafe)   (sensitivity)
- specificity = W(judge SAFE ∧ reviewer safe)     / W(reviewer safe)

where W(·) sums the weights of the reviews in that cell. Without the weights,
recall would be badly overstated: the SAFE verdicts that hide misses are
reviewed at a small rate.

**Intervals.** Wilson score intervals (95 %) with the *effective sample size*
of the weighted reviews, ``n_eff = (Σw)² / Σw²`` over the denominator's
reviews (Kish): equal weights give ``n_eff = n``; unequal weights give fewer
effective reviews, so the interval is wider than the raw count would claim.
With p̂ the weighted proportion and z = 1.96::

    centre = (p̂ + z²/(2 n_eff)) / (1 + z²/n_eff)
    half   = z / (1 + z²/n_eff) · sqrt(p̂(1 − p̂)/n_eff + z²/(4 n_eff²))

**Corrected rates** (:func:`corrected_rate`): the judged traffic's unsafe rate
p_obs = unsafe / judged, corrected for the judge's measured sensitivity (se,
the recall) and specificity (sp) by Rogan–Gladen,
``p = (p_obs + sp − 1) / (se + sp − 1)``, clipped to [0, 1]. Its 95 %
interval is a seeded parametric bootstrap (2000 draws) over both sources of
error: each draw takes p_obs* ~ Beta(unsafe + ½, judged − unsafe + ½) (the
traffic), se* ~ Beta(se·n_se + ½, (1 − se)·n_se + ½) and sp* likewise (the
reviews, ``n_se`` and ``n_sp`` the effective sizes of the reviewer-unsafe and
reviewer-safe reviews, so the weights do not pass for extra reviews), and
computes the clipped Rogan–Gladen estimate; the interval is the 2.5th and
97.5th percentiles of the draws, widened to include the point estimate if a
skewed draw left it out. Draws where se* + sp* − 1 ≤ 0 (the resampled judge
no better than chance) correct nothing: they are dropped, and when they are
more than 2.5 % of the draws the interval is all of [0, 1]. No correction
(None, with the reason) when fewer than ``min_reviews`` reviews exist of
either judge verdict, when no reviewer said unsafe (or safe), or when
se + sp − 1 ≤ 0.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .envelope import group_labels as _group_labels
from .._event_time import utc_iso
from .events import window_key
from ..review.records import LabelRecord

__all__ = ["Z95", "Estimate", "Tally", "Confusion", "Corrected", "CellKey", "wilson",
           "effective_n", "weighted_estimate", "rogan_gladen", "corrected_rate",
           "group_of", "cell_of", "agreement_cells", "agreement_row", "agreement_rows",
           "BOOTSTRAP_DRAWS"]

#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054
#: Bootstrap draws of a corrected rate's interval.
BOOTSTRAP_DRAWS = 2000


@dataclass(frozen=True)
class Estimate:
    """A proportion with its 95 % interval; ``n_eff`` the reviews it rests on
    (effective: weighted reviews count as ``(Σw)²/Σw²``)."""

    value: float
    low: float
    high: float
    n_eff: float
    #: Reviews behind it (raw count).
    reviews: int

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high,
                "n_eff": round(self.n_eff, 3), "reviews": self.reviews}


def wilson(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of proportion ``p`` over ``n`` (may be fractional) trials."""
    if n <= 0:
        return 0.0, 1.0
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(max(0.0, p * (1 - p) / n + z * z / (4 * n * n)))
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_n(weights: Iterable[float]) -> float:
    """Kish's effective sample size ``(Σw)² / Σw²`` (0 for no weights)."""
    total = squares = 0.0
    for w in weights:
        total += w
        squares += w * w
    return total * total / squares if squares else 0.0


@dataclass
class Tally:
    """Reviews of one cell of the confusion: raw count, Σw and Σw²."""

    count: int = 0
    weight: float = 0.0
    weight_sq: float = 0.0

    def add(self, weight: float) -> None:
        self.count += 1
        self.weight += weight
        self.weight_sq += weight * weight

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.count + other.count, self.weight + other.weight,
                     self.weight_sq + other.weight_sq)

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "weight": round(self.weight, 6)}


def weighted_estimate(hits: Tally, misses: Tally) -> Estimate | None:
    """The weighted share of ``hits`` among ``hits + misses`` with its Wilson
    interval at n_eff; None when the denominator has no review."""
    total = hits + misses
    if total.count == 0 or total.weight <= 0:
        return None
    p = hits.weight / total.weight
    n_eff = total.weight * total.weight / total.weight_sq
    low, high = wilson(p, n_eff)
    return Estimate(value=p, low=low, high=high, n_eff=n_eff, reviews=total.count)


@dataclass
class Confusion:
    """Weighted judge × reviewer confusion of one metric, group and window.

    ``tp``: judge UNSAFE, reviewer unsafe; ``fp``: UNSAFE, safe; ``fn``: SAFE,
    unsafe; ``tn``: SAFE, safe. Reviews of judge errors are counted in
    ``errors`` (and ``errors_unsafe``: those the reviewer called unsafe) only."""

    tp: Tally = field(default_factory=Tally)
    fp: Tally = field(default_factory=Tally)
    fn: Tally = field(default_factory=Tally)
    tn: Tally = field(default_factory=Tally)
    errors: int = 0
    errors_unsafe: int = 0

    def add(self, judge_verdict: str | None, label: str, rate: float) -> None:
        """One review: the judge's verdict (None: it failed), the reviewer's
        label (``unsafe``/``safe``) and the rate the review was chosen at."""
        if judge_verdict is None:
            self.errors += 1
            self.errors_unsafe += label == "unsafe"
            return
        if not 0 < rate <= 1:
            raise ValueError(f"a review's rate must be in (0, 1], not {rate!r}")
        weight = 1.0 / rate
        if judge_verdict == "UNSAFE":
            (self.tp if label == "unsafe" else self.fp).add(weight)
        else:
            (self.fn if label == "unsafe" else self.tn).add(weight)

    @classmethod
    def of(cls, labels: Iterable[LabelRecord]) -> Confusion:
        confusion = cls()
        for label in labels:
            confusion.add(label.judge_verdict, label.label, label.rate)
        return confusion

    @property
    def reviewed(self) -> int:
        """Every review, judge errors included."""
        return self.judged_reviews + self.errors

    @property
    def judged_reviews(self) -> int:
        """Reviews of a verdict (what precision and recall rest on)."""
        return self.tp.count + self.fp.count + self.fn.count + self.tn.count

    @property
    def unsafe_verdicts(self) -> int:
        """Reviews of the judge's UNSAFE verdicts."""
        return self.tp.count + self.fp.count

    @property
    def safe_verdicts(self) -> int:
        """Reviews of the judge's SAFE verdicts."""
        return self.fn.count + self.tn.count

    def precision(self) -> Estimate | None:
        """P(reviewer unsafe | judge UNSAFE)."""
        return weighted_estimate(self.tp, self.fp)

    def recall(self) -> Estimate | None:
        """P(judge UNSAFE | reviewer unsafe): the sensitivity."""
        return weighted_estimate(self.tp, self.fn)

    def specificity(self) -> Estimate | None:
        """P(judge SAFE | reviewer safe)."""
        return weighted_estimate(self.tn, self.fp)

    def as_dict(self) -> dict[str, Any]:
        cells = {name: getattr(self, name).as_dict() for name in ("tp", "fp", "fn", "tn")}
        return {**cells, "errors": self.errors, "errors_unsafe": self.errors_unsafe}


@dataclass(frozen=True)
class Corrected:
    """A corrected unsafe rate and its interval, or None and why (``note``)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, float] | None:
        if self.value is None:
            return None
        return {"value": self.value, "low": self.low, "high": self.high}  # type: ignore[dict-item]


def rogan_gladen(p_obs: float, sensitivity: float, specificity: float) -> float | None:
    """``(p_obs + sp − 1) / (se + sp − 1)`` clipped to [0, 1]; None when
    ``se + sp − 1 ≤ 0``."""
    youden = sensitivity + specificity - 1
    if youden <= 0:
        return None
    return min(1.0, max(0.0, (p_obs + specificity - 1) / youden))


def _as_dict(estimate: Estimate | None) -> dict[str, Any] | None:
    return None if estimate is None else estimate.as_dict()


def _beta(rng: random.Random, p: float, n: float) -> float:
    """A draw from Beta(p·n + ½, (1 − p)·n + ½): Jeffreys' posterior of a
    proportion p seen over n (effective) trials."""
    return rng.betavariate(p * n + 0.5, (1 - p) * n + 0.5)


def _percentile(ordered: Sequence[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def corrected_rate(observed_unsafe: int, observed_total: int, confusion: Confusion, *,
                   min_reviews: int = 10, draws: int = BOOTSTRAP_DRAWS,
                   seed: int = 0) -> Corrected:
    """The unsafe rate corrected for the judge's measured sensitivity and
    specificity (Rogan–Gladen), with a bootstrap interval over the traffic
    and the reviews (see the module docstring). ``observed_total`` counts
    judged results with a verdict (errors excluded), as ``/rates``' rate does."""
    unsafe_n, safe_n = confusion.unsafe_verdicts, confusion.safe_verdicts
    if unsafe_n < min_reviews or safe_n < min_reviews:
        short = [f"{n} of {min_reviews} {verdict} verdicts" for n, verdict in
                 ((unsafe_n, "UNSAFE"), (safe_n, "SAFE")) if n < min_reviews]
        return Corrected(None, note="not enough reviews: " + " and ".join(short) + " reviewed")
    if observed_total <= 0:
        return Corrected(None, note="no judged traffic in this window")
    sens, spec = confusion.recall(), confusion.specificity()
    if sens is None:
        return Corrected(None, note="no reviewer said unsafe: the judge's sensitivity "
                                    "is unknown")
    if spec is None:
        return Corrected(None, note="no reviewer said safe: the judge's specificity "
                                    "is unknown")
    p_obs = observed_unsafe / observed_total
    value = rogan_gladen(p_obs, sens.value, spec.value)
    if value is None:
        return Corrected(None, note=f"the judge is no better than chance on these reviews "
                                    f"(sensitivity {sens.value:.2f} + specificity "
                                    f"{spec.value:.2f} - 1 <= 0)")
    rng = random.Random(seed)
    estimates: list[float] = []
    undefined = 0
    for _ in range(draws):
        p_star = rng.betavariate(observed_unsafe + 0.5, observed_total - observed_unsafe + 0.5)
        corrected = rogan_gladen(p_star, _beta(rng, sens.value, sens.n_eff),
                                 _beta(rng, spec.value, spec.n_eff))
        if corrected is None:
            undefined += 1
        else:
            estimates.append(corrected)
    if undefined > 0.025 * draws or not estimates:
        return Corrected(value, 0.0, 1.0)
    estimates.sort()
    low, high = _percentile(estimates, 0.025), _percentile(estimates, 0.975)
    return Corrected(value, min(low, value), max(high, value))


@dataclass(frozen=True, order=True)
class CellKey:
    """One metric for one alerting group in one window (epoch seconds)."""

    metric: str
    #: The group as ``/rates`` writes it: ``model=m,model_version=v1,prompt_version=-``.
    group: str
    start: float
    end: float

    window_start = property(lambda self: utc_iso(self.start * 1000))
    window_end = property(lambda self: utc_iso(self.end * 1000))


def group_of(labels: Mapping[str, str], group_labels: Sequence[str]) -> dict[str, str]:
    """A label's alerting group, as the window counter files its judgment
    (``windows.group_labels``, '-' where the result had none)."""
    return _group_labels(dict(labels), tuple(group_labels))


def cell_of(label: LabelRecord, *, window_seconds: float,
            group_labels: Sequence[str]) -> CellKey:
    """Where a label counts: its metric, group, and the window of the judged
    result's event time (the window its verdict was counted in)."""
    group = window_key(label.metric, group_of(label.labels, group_labels)).partition("|")[2]
    start = float(math.floor(label.event_time_ms / 1000 / window_seconds) * window_seconds)
    return CellKey(label.metric, group, start, start + window_seconds)


def agreement_cells(labels: Iterable[LabelRecord], *, window_seconds: float,
                    group_labels: Sequence[str]) -> dict[CellKey, Confusion]:
    """Every label folded into the confusion of its metric, group and window."""
    cells: dict[CellKey, Confusion] = {}
    for label in labels:
        key = cell_of(label, window_seconds=window_seconds, group_labels=group_labels)
        cells.setdefault(key, Confusion()).add(label.judge_verdict, label.label, label.rate)
    return cells


def agreement_row(key: CellKey, confusion: Confusion, *, observed: Mapping[str, Any] | None,
                  min_reviews: int, corrected_min_reviews: int,
                  corrected: Corrected | None = None) -> dict[str, Any]:
    """One ``/agreement`` row. ``observed`` is the window's ``/rates`` row (None:
    not counted, or expired); ``corrected`` may be given when already computed."""
    total = unsafe = None
    if observed is not None:
        total = int(observed["total"]) - int(observed.get("errors", 0))
        unsafe = int(observed["unsafe"])
    if corrected is None:
        corrected = (Corrected(None, note="no observed rate for this window")
                     if total is None or unsafe is None else
                     corrected_rate(unsafe, total, confusion, min_reviews=corrected_min_reviews))
    return {
        "metric": key.metric, "group": key.group, "window_start": key.window_start,
        "window_end": key.window_end, "reviewed": confusion.reviewed,
        "reviewed_verdicts": {"unsafe": confusion.unsafe_verdicts,
                              "safe": confusion.safe_verdicts, "error": confusion.errors},
        "enough_reviews": confusion.judged_reviews >= min_reviews,
        "min_reviews": min_reviews,
        "precision": _as_dict(confusion.precision()),
        "recall": _as_dict(confusion.recall()),
        "specificity": _as_dict(confusion.specificity()),
        "confusion": confusion.as_dict(),
        "observed_judged": total, "observed_unsafe": unsafe,
        "observed_unsafe_rate": (unsafe / total) if total else None,
        "corrected_unsafe_rate": corrected.as_dict(),
        "corrected_note": corrected.note,
    }


def agreement_rows(labels: Iterable[LabelRecord], rates: Iterable[Mapping[str, Any]], *,
                   window_seconds: float, group_labels: Sequence[str], min_reviews: int,
                   corrected_min_reviews: int, after: float | None = None,
                   metrics: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``/agreement`` rows of ``labels`` (of ``metrics``; of windows ending after
    ``after``, epoch seconds), each beside its ``/rates`` row, newest window first."""
    observed = {(r["metric"], r["group"], r["window_start"]): r for r in rates}
    cells = agreement_cells(labels, window_seconds=window_seconds, group_labels=group_labels)
    return [agreement_row(key, confusion,
                          observed=observed.get((key.metric, key.group, key.window_start)),
                          min_reviews=min_reviews, corrected_min_reviews=corrected_min_reviews)
            for key, confusion in sorted(cells.items(), reverse=True,
                                         key=lambda kv: (kv[0].start, kv[0].metric,
                                                         kv[0].group))
            if (after is None or key.end > after) and (not metrics or key.metric in metrics)]
