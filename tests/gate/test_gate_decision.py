"""Where the gate sends a record, from what judging made of its cases: approved
only when every judged case is SAFE, held with the first reason otherwise, the
DLQ alone for a record that cannot be read; what the settings may pass."""

from __future__ import annotations

import pytest

from guardrail.gate import GatePolicy, decide
from guardrail.judging.evaluate import MISSING_OUTPUT
from guardrail.judging.models import CostEstimate, JudgeVerdict, MetricResult, RedteamMetrics
from guardrail.stream.envelope import Source
from guardrail.stream.processing import CaseOutcome, RawMessage, RecordJudgment

RAW = RawMessage(b"{}", Source("in", 0, 7, key=b"k"))


def metric(name="toxicity", verdict="SAFE", p=None, error=None):
    if error is not None:
        return MetricResult(name=name, score=None, error=error)
    score = 1.0 if verdict == "SAFE" else 0.0
    return MetricResult(name=name, score=score, probability_unsafe=p, result=[JudgeVerdict(
        verdict=verdict, score=score, passed=verdict == "SAFE",
        evidence_spans=["you idiot"] if verdict == "UNSAFE" else [])])


def record(*cases, unreadable=None):
    return RecordJudgment(RAW, cases=list(cases), unreadable=unreadable)


def judged(case_id="c1", *metrics, session_id=None):
    return CaseOutcome(case_id, RedteamMetrics(metrics=list(metrics or [metric()]),
                                               cost=CostEstimate(cost=0.0)),
                       session_id=session_id)


def test_every_case_safe_is_approved_and_nothing_to_judge_is_approved_as_none():
    d = decide(record(judged("a"), judged("b")), GatePolicy())
    assert (d.approved, d.verdict, d.reason, d.case_ids) == (True, "SAFE", None, ("a", "b"))
    empty = decide(record(), GatePolicy())
    assert (empty.approved, empty.verdict) == (True, "NONE")


@pytest.mark.parametrize("case, reason, verdict", [
    (judged("a", metric(verdict="UNSAFE")), "unsafe", "UNSAFE"),
    (CaseOutcome("a", invalid="otlp: span 2 has no output"), "invalid", "INVALID"),
    (judged("a", metric(error="judge unavailable: HTTP 500")), "judge_error", "ERROR"),
    (judged("a", metric(error=MISSING_OUTPUT)), "invalid", "INVALID"),
    (CaseOutcome("a", unjudged="not_sampled"), "budget", "ERROR"),
    (judged("a", metric(p=0.45)), "unsure", "UNSURE"),
])
def test_anything_the_judge_cannot_vouch_for_is_held_with_its_reason(case, reason, verdict):
    d = decide(record(judged("ok"), case), GatePolicy())
    assert (d.approved, d.reason, d.verdict) == (False, reason, verdict)
    assert d.held_by and all(entry["case_id"] == "a" for entry in d.held_by)


def test_the_first_reason_names_the_hold_and_every_contributor_is_listed():
    d = decide(record(judged("a", metric(p=0.45)),
                      judged("b", metric("bias", verdict="UNSAFE", p=0.9)),
                      judged("c", metric(error="timeout"))), GatePolicy())
    assert d.reason == "unsafe"
    assert [(e["case_id"], e.get("metric")) for e in d.held_by] == [
        ("b", "bias"), ("c", "toxicity"), ("a", "toxicity")]
    unsafe = d.held_by[0]
    assert unsafe["verdict"] == "UNSAFE" and unsafe["evidence_spans"] == ["you idiot"]
    assert unsafe["probability_unsafe"] == 0.9


def test_a_record_that_cannot_be_read_goes_to_the_dlq_alone():
    d = decide(record(unreadable="not JSON"), GatePolicy())
    assert (d.approved, d.dlq_only, d.reason) == (False, True, "invalid")


def test_pass_on_error_approves_unjudged_but_never_unsafe_invalid_or_unsure():
    passing = GatePolicy(on_error="pass")
    d = decide(record(judged("a", metric(error="timeout")), CaseOutcome("b", unjudged="x")),
               passing)
    assert (d.approved, d.verdict, d.unjudged) == (True, "unjudged", True)
    assert [e["case_id"] for e in d.held_by] == ["a", "b"]  # what passed unjudged
    for other in (judged("a", metric(verdict="UNSAFE")), CaseOutcome("a", invalid="bad"),
                  judged("a", metric(p=0.5))):
        mixed = decide(record(judged("e", metric(error="timeout")), other), passing)
        assert not mixed.approved


def test_unsure_uses_each_metrics_threshold_and_the_band_and_can_pass():
    policy = GatePolicy(review_band=0.1, thresholds={"toxicity": 0.8})
    assert decide(record(judged("a", metric(p=0.45))), policy).approved  # far from 0.8
    assert decide(record(judged("a", metric(p=0.72))), policy).reason == "unsure"
    assert decide(record(judged("a", metric(p=0.72))),
                  GatePolicy(unsure="pass", thresholds={"toxicity": 0.8})).approved
    assert decide(record(judged("a", metric(p=0.5))), GatePolicy(review_band=0)).approved


def test_a_turn_of_a_held_session_is_held_only_with_session_hold():
    turn = judged("t9", metric(), session_id="conv-1")
    assert decide(record(turn), GatePolicy(), held_sessions={"conv-1"}).approved
    held = decide(record(turn), GatePolicy(session_hold=True), held_sessions={"conv-1"})
    assert (held.approved, held.reason) == (False, "session_unsafe")


def test_a_decision_survives_its_round_trip_through_a_dict():
    d = decide(record(judged("a", metric(verdict="UNSAFE"))), GatePolicy())
    from guardrail.gate import Decision
    assert Decision.from_dict(d.to_dict()) == d
