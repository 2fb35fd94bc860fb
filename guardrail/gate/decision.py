"""The gate's decision: where one input record goes, from what judging made of it.

Fail-closed: a record is approved only when every case judged from it is SAFE
(or it held nothing to judge); anything the judge could not vouch for is held,
with the reason, unless the settings say to pass it::

    policy = GatePolicy.from_settings(settings.gate, settings.review, settings.evaluation)
    decision = decide(record_judgment, policy)          # a stream.processing.RecordJudgment
    decision.approved, decision.reason, decision.verdict   # False, "unsafe", "UNSAFE"

=====================================================  =========  ==================
what the record's cases came to                        goes to    reason
=====================================================  =========  ==================
every case judged SAFE                                 approved   (verdict SAFE)
nothing to judge (spans that are not GenAI, spans      approved   (verdict NONE)
of agent runs, which are judged with their run)
a metric judged UNSAFE                                 held       ``unsafe``
a case that cannot be read (others of it can)          held       ``invalid``
a metric the judge could not judge (error, timeout,    held       ``judge_error``
unreadable answer, outage)
a case the judge budget left unjudged                  held       ``budget``
a metric whose P(UNSAFE) is within ``review_band`` of  held       ``unsure``
its threshold
a turn of a session judged UNSAFE                      held       ``session_unsafe``
(``gate_session_hold``)
the whole record cannot be read                        the DLQ    (counts as held)
=====================================================  =========  ==================

The first reason in that order names the hold; every metric that contributed is in
``held_by`` (its verdict, P(UNSAFE), error and evidence). With ``gate_on_error:
pass`` a record held only for ``judge_error`` or ``budget`` is approved instead,
its verdict ``unjudged``; with ``gate_unsure: pass`` the SAFE verdicts of unsure
metrics stand.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..judging.evaluate import MISSING_OUTPUT
from ..judging.models import MetricResult
from ..judging.verdicts import DEFAULT_THRESHOLD

__all__ = ["Decision", "GatePolicy", "HoldReason", "HOLD_REASONS", "decide"]

HoldReason = Literal["unsafe", "invalid", "judge_error", "budget", "unsure", "session_unsafe"]
#: The reasons in the order that names a hold: the first that applies.
HOLD_REASONS: tuple[HoldReason, ...] = ("unsafe", "invalid", "judge_error", "budget", "unsure",
                                        "session_unsafe")
#: The reasons ``gate_on_error: pass`` lets through, unjudged.
_PASSABLE_ERRORS = frozenset({"judge_error", "budget"})
#: Evidence spans kept per metric in ``held_by``.
_EVIDENCE = 3


@dataclass(frozen=True)
class GatePolicy:
    """What the decision reads of the settings."""

    on_error: Literal["hold", "pass"] = "hold"
    unsure: Literal["hold", "pass"] = "hold"
    review_band: float = 0.1
    thresholds: Mapping[str, float] | None = None
    session_hold: bool = False

    @classmethod
    def from_settings(cls, gate: Any, review: Any, evaluation: Any) -> GatePolicy:
        return cls(on_error=gate.gate_on_error, unsure=gate.gate_unsure,
                   review_band=review.review_band, thresholds=evaluation.verdict_thresholds,
                   session_hold=gate.gate_session_hold)

    def threshold(self, metric: str) -> float:
        return (self.thresholds or {}).get(metric, DEFAULT_THRESHOLD)


@dataclass(frozen=True)
class Decision:
    """Where a record goes. ``verdict`` is its ``guardrail.verdict`` header: SAFE,
    NONE (nothing to judge) or ``unjudged`` when approved; the worst of its cases
    (UNSAFE, INVALID, ERROR, UNSURE, SESSION) when held."""

    approved: bool
    verdict: str
    reason: HoldReason | None = None
    case_ids: tuple[str, ...] = ()
    #: The metrics (and unreadable or unjudged cases) that held it, or that were
    #: passed unjudged: ``{"case_id", "metric", "verdict", "probability_unsafe",
    #: "error", "evidence_spans"}``, ``{"case_id", "invalid"}``, ``{"case_id", "unjudged"}``.
    held_by: tuple[dict[str, Any], ...] = ()
    #: The whole record could not be read: it went to the DLQ, and nowhere else.
    dlq_only: bool = False

    @property
    def unjudged(self) -> bool:
        return self.approved and self.verdict == "unjudged"

    def to_dict(self) -> dict[str, Any]:
        return {"approved": self.approved, "verdict": self.verdict, "reason": self.reason,
                "case_ids": list(self.case_ids), "held_by": list(self.held_by),
                "dlq_only": self.dlq_only}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        return cls(approved=bool(data["approved"]), verdict=str(data["verdict"]),
                   reason=data.get("reason"), case_ids=tuple(data.get("case_ids", ())),
                   held_by=tuple(data.get("held_by", ())), dlq_only=bool(data.get("dlq_only")))


_VERDICT_OF = {"unsafe": "UNSAFE", "invalid": "INVALID", "judge_error": "ERROR",
               "budget": "ERROR", "unsure": "UNSURE", "session_unsafe": "SESSION"}


def decide(record: Any, policy: GatePolicy, *,
           held_sessions: Container[str] = frozenset()) -> Decision:
    """Where ``record`` (a :class:`~guardrail.stream.processing.RecordJudgment`) goes.
    ``held_sessions``: the sessions whose later turns are held (``gate_session_hold``)."""
    case_ids = tuple(case.case_id for case in record.cases)
    if record.unreadable is not None:
        return Decision(False, "INVALID", "invalid", case_ids,
                        ({"invalid": record.unreadable},), dlq_only=True)
    found: dict[str, list[dict[str, Any]]] = {reason: [] for reason in HOLD_REASONS}
    for case in record.cases:
        _account(case, policy, held_sessions, found)
    reasons = [reason for reason in HOLD_REASONS if found[reason]]
    if not reasons:
        return Decision(True, "SAFE" if record.cases else "NONE", None, case_ids)
    if set(reasons) <= _PASSABLE_ERRORS and policy.on_error == "pass":
        passed = tuple(entry for reason in reasons for entry in found[reason])
        return Decision(True, "unjudged", None, case_ids, passed)
    held_by = tuple(entry for reason in reasons for entry in found[reason])
    return Decision(False, _VERDICT_OF[reasons[0]], reasons[0], case_ids, held_by)


def _account(case: Any, policy: GatePolicy, held_sessions: Container[str],
             found: dict[str, list[dict[str, Any]]]) -> None:
    """Add what ``case`` contributes to a hold to ``found``, by reason."""
    if case.invalid is not None:
        found["invalid"].append({"case_id": case.case_id, "invalid": case.invalid})
        return
    if case.unjudged == "turn_stands":  # a session of one turn: its turn's verdicts stand
        return
    if case.metrics is None:  # left unjudged: the only sampling in gate mode is the budget's
        found["budget"].append({"case_id": case.case_id, "unjudged": case.unjudged or "budget"})
        return
    for metric in case.metrics.metrics:
        reason = _metric_reason(metric, policy)
        if reason is not None:
            found[reason].append(_entry(case.case_id, metric))
    if policy.session_hold and case.session_id and case.session_id in held_sessions:
        found["session_unsafe"].append({"case_id": case.case_id, "session_id": case.session_id})


def _metric_reason(metric: MetricResult, policy: GatePolicy) -> HoldReason | None:
    if metric.error is not None:
        return "invalid" if metric.error == MISSING_OUTPUT else "judge_error"
    if metric.unsafe:
        return "unsafe"
    p = metric.probability_unsafe
    if (policy.unsure == "hold" and p is not None and policy.review_band > 0
            and abs(p - policy.threshold(metric.name)) <= policy.review_band):
        return "unsure"
    return None


def _entry(case_id: str, metric: MetricResult) -> dict[str, Any]:
    verdict = metric.result[0] if metric.result and metric.error is None else None
    return {"case_id": case_id, "metric": metric.name,
            "verdict": None if verdict is None else verdict.verdict,
            "probability_unsafe": metric.probability_unsafe, "error": metric.error,
            "evidence_spans": list(verdict.evidence_spans[:_EVIDENCE]) if verdict else []}
