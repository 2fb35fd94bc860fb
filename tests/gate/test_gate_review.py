"""The review item of a held record: every metric that held it at rate 1, the
gate block saying why and from where, and in place of the item judging made for
the same case; an unreadable case shows the record as it came."""

from __future__ import annotations

from guardrail.gate import GatePolicy, decide
from guardrail.gate.review import held_item, parse_source, with_item
from guardrail.judging.models import (Case, CostEstimate, JudgeVerdict, MetricResult,
                                      MetricRubric, RedteamMetrics)
from guardrail.review.records import ReviewItem
from guardrail.review.settings import ReviewSettings
from guardrail.stream.envelope import InputMessage, Source
from guardrail.stream.processing import CaseOutcome, Outgoing, RawMessage, RecordJudgment

RAW = RawMessage(b'{"output": "you idiot"}', Source("model-outputs", 3, 41, key=b"user-7",
                                                    timestamp_ms=1_700_000_000_000))
RUBRICS = (MetricRubric(name="toxicity", goal="no insults"),
           MetricRubric(name="bias", goal="no bias"))
# No SAFE metric is sampled for review: only what held the record is on its item.
REVIEW = ReviewSettings(review_rate_unsafe=0.01, review_rate_safe=0.0, review_band=0.0)


def _metric(name, verdict):
    score = 1.0 if verdict == "SAFE" else 0.0
    return MetricResult(name=name, score=score, result=[JudgeVerdict(
        verdict=verdict, score=score, passed=verdict == "SAFE",
        evidence_spans=["idiot"] if verdict == "UNSAFE" else [])])


def _judged(case_id, *verdicts):
    message = InputMessage(Case(case_id=case_id, output="you idiot"), metadata={"model": "m1"})
    metrics = RedteamMetrics(metrics=[_metric(n, v) for n, v in zip(("toxicity", "bias"),
                                                                     verdicts)],
                             cost=CostEstimate(cost=0.0))
    return CaseOutcome(case_id, metrics, message=message, rubrics=RUBRICS,
                       event_time_ms=1_700_000_000_500)


def _item(judgment):
    decision = decide(judgment, GatePolicy(review_band=0.0))
    return held_item(judgment, decision, review=REVIEW, thresholds={}, judge_model="j",
                     blocks_key=True)


def test_a_held_record_is_reviewed_for_every_metric_that_held_it_at_rate_one():
    item = _item(RecordJudgment(RAW, cases=[_judged("c1", "UNSAFE", "SAFE")]))
    assert item is not None and item.case_id == "c1"
    assert [(m.name, m.slice, m.rate) for m in item.metrics] == [("toxicity", "unsafe", 1.0)]
    assert (item.gate.reason, item.gate.source, item.gate.blocks_key) == (
        "unsafe", "model-outputs/3/41", True)
    assert item.gate.held_by[0]["evidence_spans"] == ["idiot"]
    assert (item.fields, item.labels, item.event_time_ms) == (
        {"output": "you idiot"}, {"model": "m1"}, 1_700_000_000_500)
    assert parse_source(item.gate.source) == ("model-outputs", 3, 41)


def test_an_approved_record_has_no_gate_item_and_an_unreadable_case_shows_the_record():
    assert _item(RecordJudgment(RAW, cases=[_judged("c1", "SAFE", "SAFE")])) is None
    bad = RecordJudgment(RAW, cases=[_judged("c1", "SAFE", "SAFE"),
                                     CaseOutcome("model-outputs/3/41#1", invalid="no output")])
    item = _item(bad)
    assert item.gate.reason == "invalid" and item.metrics == ()
    assert item.case_id == "model-outputs/3/41#1"
    assert item.fields == {"record": '{"output": "you idiot"}'}


def test_the_gate_item_replaces_the_item_judging_made_for_the_same_case():
    judgment = RecordJudgment(RAW, cases=[_judged("c1", "UNSAFE", "SAFE")])
    sampled = ReviewItem(case_id="c1", fields={}, metrics=(), judge_model="j", event_time_ms=1)
    outgoing = [Outgoing("results", b"c1", b"{}"),
                Outgoing("redteam-review", b"c1", sampled.encode()),
                Outgoing("redteam-review", b"other", b"{}")]
    replaced = with_item(outgoing, _item(judgment), review_topic="redteam-review")
    reviews = [o for o in replaced if o.topic == "redteam-review"]
    assert [o.key for o in reviews] == [b"other", b"c1"]
    assert ReviewItem.decode(reviews[1].value).gate is not None
