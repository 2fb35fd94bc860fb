"""Which judged results go to human review: the same choice every time, each
with the rate it had; review items and labels round-trip with their schema."""

from __future__ import annotations

import orjson
import pytest

from guardrail.judging.models import Case, CostEstimate, JudgeVerdict, MetricResult, RedteamMetrics
from guardrail.review import LabelRecord, ReviewItem, SchemaError, rubric_version
from guardrail.review.folds import LabelsFold, ReviewItemsFold
from guardrail.review.selection import review_choice, review_item
from guardrail.review.settings import ReviewSettings
from guardrail.judging.rubrics import default_metrics


def _result(name: str, verdict: str | None, p: float | None = None) -> MetricResult:
    if verdict is None:
        return MetricResult(name=name, score=None, error="judge answered no JSON")
    unsafe = verdict == "UNSAFE"
    return MetricResult(name=name, score=0.0 if unsafe else 1.0, probability_unsafe=p,
                        result=[JudgeVerdict(verdict=verdict, passed=not unsafe,
                                             violations=["insult"] if unsafe else [],
                                             evidence_spans=["idiot"] if unsafe else [])])


def _item(case_id: str, bias: str | None, toxicity: str | None, review: ReviewSettings,
          p: float | None = None) -> ReviewItem | None:
    metrics = RedteamMetrics(metrics=[_result("bias", bias, p), _result("toxicity", toxicity, p)],
                             cost=CostEstimate())
    return review_item(Case(case_id=case_id, output="you idiot", input="hi"), metrics,
                       default_metrics(), review=review, thresholds={}, judge_model="j",
                       event_time_ms=1_700_000_000_000, labels={"model_version": "v2"})


def test_unsafe_and_errors_are_reviewed_and_safe_ones_at_their_rate():
    review = ReviewSettings(review_rate_unsafe=1.0, review_rate_safe=0.0, review_band=0)
    item = _item("c1", "SAFE", "UNSAFE", review)
    assert [(m.name, m.slice, m.rate) for m in item.metrics] == [("toxicity", "unsafe", 1.0)]
    assert item.fields == {"output": "you idiot", "input": "hi"}
    assert item.metrics[0].evidence_spans == ("idiot",)
    assert item.metrics[0].rubric_version == rubric_version(default_metrics()[1])
    errors = _item("c2", None, "SAFE", review)
    assert [(m.name, m.slice, m.verdict) for m in errors.metrics] == [("bias", "error", None)]
    assert _item("c3", "SAFE", "SAFE", review) is None


def test_the_safe_slice_is_drawn_per_case_and_metric_the_same_every_time():
    review = ReviewSettings(review_rate_safe=0.25, review_band=0)
    chosen = [bool(_item(f"case-{i}", "SAFE", "SAFE", review)) for i in range(2000)]
    assert chosen == [bool(_item(f"case-{i}", "SAFE", "SAFE", review)) for i in range(2000)]
    # Two metrics, each at 0.25: a case is chosen with probability 1 - 0.75^2.
    assert 0.39 < sum(chosen) / len(chosen) < 0.49
    item = next(_item(f"case-{i}", "SAFE", "SAFE", review) for i in range(2000)
                if chosen[i])
    assert {m.rate for m in item.metrics} == {0.25} and {m.slice for m in item.metrics} == {"safe"}


def test_the_unsure_band_is_always_reviewed_at_rate_one():
    review = ReviewSettings(review_rate_unsafe=0.0, review_rate_safe=0.0, review_band=0.1)
    item = _item("c1", "SAFE", "UNSAFE", review, p=0.55)
    assert [(m.slice, m.rate) for m in item.metrics] == [("band", 1.0), ("band", 1.0)]
    assert _item("c1", "SAFE", "UNSAFE", review, p=0.9) is None
    far = review_choice("c1", _result("toxicity", "UNSAFE", 0.62),
                        review=review, threshold=0.7)
    assert far == ("band", 1.0)


def test_labels_follow_the_choice_and_round_trip_with_their_schema():
    item = _item("c1", "SAFE", "UNSAFE", ReviewSettings(review_band=0, review_rate_safe=1.0))
    assert ReviewItem.decode(item.encode()) == item
    agree = LabelRecord.from_choice(item, "toxicity", "agree", reviewer="ana")
    flip = LabelRecord.from_choice(item, "bias", "disagree_unsafe", reviewer="ben", note="x")
    assert (agree.label, agree.judge_verdict, agree.key()) == ("unsafe", "UNSAFE", b"c1|toxicity")
    assert (flip.label, flip.judge_verdict, flip.note) == ("unsafe", "SAFE", "x")
    assert LabelRecord.decode(agree.encode()) == agree
    row = agree.calibrate_row()
    assert (row["output"], row["label"], row["metric"], row["reviewer"]) == \
        ("you idiot", "unsafe", "toxicity", "ana")
    errors = _item("c2", None, "SAFE", ReviewSettings(review_band=0))
    with pytest.raises(ValueError, match="no verdict to agree with"):
        LabelRecord.from_choice(errors, "bias", "agree", reviewer="ana")


def test_folds_keep_the_latest_and_skip_other_versions():
    item = _item("c1", "SAFE", "UNSAFE", ReviewSettings(review_band=0))
    first = LabelRecord.from_choice(item, "toxicity", "agree", reviewer="ana")
    second = LabelRecord.from_choice(item, "toxicity", "disagree_safe", reviewer="ben")
    labels = LabelsFold()
    labels.apply(first.key(), first.encode())
    labels.apply(second.key(), second.encode())
    newer = orjson.dumps({**orjson.loads(second.encode()), "schema_version": 2})
    labels.apply(second.key(), newer, where="p0@3")
    assert labels.records() == [second] and labels.skipped == 1
    labels.apply(second.key(), None)  # a tombstone withdraws it
    assert labels.records() == []
    items = ReviewItemsFold()
    for _ in range(2):  # a redelivered result publishes its item again
        items.apply(item.key(), item.encode())
    assert items.items() == [item]
    with pytest.raises(SchemaError):
        ReviewItem.decode(first.encode())


async def test_a_redelivered_batch_chooses_the_same_review_items(make_settings, evaluators,
                                                                 tmp_path):
    """Redelivery (or a replay) judges the batch again: the same items, with
    the same keys and metrics, so readers folding the topic by key see one."""
    from guardrail.stream.envelope import Source
    from guardrail.stream.processing import MessageJudge, RawMessage

    settings = make_settings(review_users_file=str(tmp_path / "users"), review_rate_safe=0.3,
                             review_band=0)
    batch = [RawMessage(orjson.dumps({"case_id": f"c{i}", "output": "you idiot" if i % 4 == 0
                                      else f"fine answer {i}"}), Source("in", 0, i))
             for i in range(40)]

    async def review_items():
        judge = MessageJudge.from_settings(evaluators(settings), settings)
        outgoing = await judge.process(batch)
        return [ReviewItem.decode(o.value) for o in outgoing
                if o.topic == settings.review.review_topic]

    first, again = await review_items(), await review_items()
    assert [(i.case_id, [(m.name, m.slice, m.rate) for m in i.metrics]) for i in first] == \
        [(i.case_id, [(m.name, m.slice, m.rate) for m in i.metrics]) for i in again]
    assert {"c0", "c4"} <= {i.case_id for i in first}  # every UNSAFE one (rate 1.0)
    assert 10 < len(first) < 40  # and a slice of the SAFE ones
    folded = ReviewItemsFold()
    for item in first + again:
        folded.apply(item.key(), item.encode())
    assert len(folded.items()) == len(first)
