"""Typed descriptions of the alerts written to the alerts topic (and POSTed
to the webhook) as plain dicts: see :mod:`.schemas`, whose rules they follow.

    RegressionAlert.model_validate(alert, strict=True)   # the window counter's
    BudgetAlert.model_validate(alert, strict=True)       # the judge budget's
    AgreementAlert.model_validate(alert, strict=True)    # the agreement tracker's
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .settings import AlertRule
from .schemas import WireRecord

__all__ = ["Alert", "MetricAlert", "WindowBounds", "WindowTotals", "Baseline", "AlertExample", "RegressionAlert",
           "BudgetSpend", "BudgetLimits", "BudgetAlert", "Proportion", "WeightedCount",
           "ConfusionMatrix", "ReviewedVerdicts", "AgreementFigures", "AgreementFloors",
           "Disagreement", "AgreementAlert"]


class WindowBounds(WireRecord):
    """A tumbling window (``window_seconds``), UTC ISO-8601 with milliseconds."""

    start: str
    """First instant of the window."""
    end: str
    """End of the window (exclusive)."""


class WindowTotals(WireRecord):
    """Judgment counts of the group's current window."""

    total: int
    """Judgments, errors included."""
    unsafe: int
    """UNSAFE verdicts."""
    errors: int
    """Judgments that ended in an error."""
    judged: int
    """Judgments with a verdict (``total - errors``): the rate's denominator."""
    seen: int
    """Cases seen, judged or left out by sampling: ``judged / seen`` is the coverage."""


class Baseline(WireRecord):
    """What the window was compared with."""

    kind: Literal["version", "previous_windows"]
    """``version``: the rule's ``baseline_version`` of the same group;
    ``previous_windows``: the group's ``baseline_windows`` windows before this one."""
    model_version: str | None = None
    """Kind ``version`` only: the baseline version. The key is the
    ``version_label`` setting (``model_version`` by default)."""
    windows: int | None = None
    """Kind ``previous_windows`` only: how many windows."""
    total: int
    """The baseline's judgments, errors included."""
    unsafe: int
    """The baseline's UNSAFE verdicts."""
    judged: int
    """The baseline's judgments with a verdict."""
    rate: float | None
    """``unsafe / judged``; null when nothing was judged."""


class AlertExample(WireRecord):
    """An UNSAFE case counted in the window."""

    case_id: str | None
    """The case's id."""
    evidence_spans: list[str]
    """The spans its verdict quoted."""


class Alert(WireRecord):
    """What every alert has first."""

    alert_id: str = Field(pattern=r"^[0-9a-f]{32}$")
    """A random id (32 hex digits) of this alert."""
    kind: str
    """The alert kind."""


class MetricAlert(Alert):
    """An alert about one metric of one alerting group in one window."""

    metric: str
    """The rubric metric."""
    group: dict[str, str]
    """The alerting group (``group_labels``, ``-`` where missing)."""
    reasons: list[str]
    """Why it fired, in words."""
    window: WindowBounds
    """The window it is about."""


class RegressionAlert(MetricAlert):
    """A metric's windowed unsafe rate broke its alert rule: its unsafe rate is over
    ``max_unsafe_rate``, or significantly above the baseline's, or both (see
    ``reasons``), in the window the triggering judgment fell in."""

    kind: Literal["regression"]
    """The alert kind."""
    unit: Literal["turn", "session"]
    """What the window counts: ``turn`` (answers and agent runs), or ``session``
    (conversations, once each: the group carries ``unit=session``)."""
    counts: WindowTotals
    """The window's counts."""
    rate: float | None
    """``unsafe / judged`` of the window."""
    baseline: Baseline | None
    """The comparison, null when the rule has none."""
    rule: AlertRule
    """The rule that fired (an entry of ``alert_rules``)."""
    examples: list[AlertExample]
    """Up to ``alert_examples`` UNSAFE cases of the window."""
    fired_at: str
    """When it fired, UTC ISO-8601 with milliseconds."""


class BudgetSpend(WireRecord):
    """This worker's judge spend over the last hour."""

    usd_last_hour: float
    """USD at known prices."""
    tokens_last_hour: int
    """Judge tokens (cache hits cost none)."""


class BudgetLimits(WireRecord):
    """The configured budget."""

    usd_per_hour: float | None
    """``budget_usd_per_hour``; null when unset."""
    tokens_per_hour: int | None
    """``budget_tokens_per_hour``; null when unset."""


class BudgetAlert(Alert):
    """The judge budget made a worker sample less, or let it sample as configured again."""

    kind: Literal["budget"]
    """The alert kind."""
    state: Literal["throttled", "restored"]
    """``throttled``: the first step down; ``restored``: back at ``sample_rate``."""
    reasons: list[str]
    """What happened, in words."""
    scope: Literal["worker"]
    """Budgets are kept per worker."""
    spend: BudgetSpend
    """Spend over the last hour."""
    budget: BudgetLimits
    """The budget."""
    sample_rate: float
    """The configured ``sample_rate``."""
    previous_sample_rate: float
    """The effective sample rate before this step."""
    effective_sample_rate: float
    """The effective sample rate from now on."""
    fired_at: str
    """When it fired, UTC ISO-8601 with milliseconds."""


class Proportion(WireRecord):
    """A weighted proportion with its 95 % Wilson interval."""

    value: float
    """The estimate."""
    low: float
    """Lower bound of the interval."""
    high: float
    """Upper bound of the interval."""
    n_eff: float
    """The effective number of reviews behind it, ``(Σw)² / Σw²``."""
    reviews: int
    """Reviews behind it."""


class WeightedCount(WireRecord):
    """Reviews in one cell of the confusion matrix."""

    count: int
    """Reviews."""
    weight: float
    """Their summed weights (1 / the rate each was chosen at)."""


class ConfusionMatrix(WireRecord):
    """Judge verdict × reviewer label, weighted."""

    tp: WeightedCount
    """Judge UNSAFE, reviewer unsafe."""
    fp: WeightedCount
    """Judge UNSAFE, reviewer safe."""
    fn: WeightedCount
    """Judge SAFE, reviewer unsafe."""
    tn: WeightedCount
    """Judge SAFE, reviewer safe."""
    errors: int
    """Reviews of judge errors."""
    errors_unsafe: int
    """Of those, the ones the reviewer called unsafe."""


class ReviewedVerdicts(WireRecord):
    """Reviews by the judge's verdict."""

    unsafe: int
    """Of UNSAFE verdicts."""
    safe: int
    """Of SAFE verdicts."""
    error: int
    """Of judge errors."""


class AgreementFigures(WireRecord):
    """The judge against its reviewers in one metric, group and window."""

    reviewed: int
    """Reviews, judge errors included."""
    reviewed_verdicts: ReviewedVerdicts
    """Reviews by the judge's verdict."""
    precision: Proportion | None
    """Share of UNSAFE verdicts the reviewers confirmed; null without such reviews."""
    recall: Proportion | None
    """Share of reviewer-unsafe cases the judge called UNSAFE; null without such reviews."""
    specificity: Proportion | None
    """Share of reviewer-safe cases the judge called SAFE; null without such reviews."""
    confusion: ConfusionMatrix
    """The weighted confusion matrix behind the figures."""


class AgreementFloors(WireRecord):
    """The settings the figures were checked against."""

    precision: float | None
    """``agreement_precision_floor``; null: not checked."""
    recall: float | None
    """``agreement_recall_floor``; null: not checked."""
    min_reviews: int
    """``agreement_min_reviews``: fewest reviews before a figure may alert."""


class Disagreement(WireRecord):
    """A reviewed case where the reviewer said otherwise than the judge."""

    case_id: str
    """The case's id."""
    judge_verdict: Literal["SAFE", "UNSAFE"]
    """The judge's verdict."""
    label: Literal["unsafe", "safe"]
    """The reviewer's label."""


class AgreementAlert(MetricAlert):
    """The judge's precision or recall against its reviewers fell below its floor
    (see ``reasons``) in the window of the judged results' event times."""

    kind: Literal["agreement"]
    """The alert kind."""
    figures: AgreementFigures
    """The window's agreement figures."""
    floors: AgreementFloors
    """The floors they were checked against."""
    examples: list[Disagreement]
    """Up to ``alert_examples`` disagreements (ids and verdicts, no text)."""
    fired_at: str
    """When it fired, UTC ISO-8601 with milliseconds."""
