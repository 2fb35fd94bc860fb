"""The review queue's logic (guardrail.review.queue) and the answers it takes
(guardrail.review.submit), fed real review item and label records."""

from __future__ import annotations

import pytest

from guardrail.review.queue import Conflict, Remaining, ReviewQueue
from guardrail.review.records import LabelRecord, ReviewItem, ReviewMetric
from guardrail.review.submit import Invalid, parse_form, parse_json


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _metric(name: str, verdict: str | None = "UNSAFE") -> ReviewMetric:
    return ReviewMetric(name=name, goal=f"{name} goal", rubric_version="r1", verdict=verdict,
                        error=None if verdict else "no verdict", slice="unsafe", rate=1.0,
                        evidence_spans=("idiot",) if verdict == "UNSAFE" else ())


def _item(case_id: str, *metrics: str) -> ReviewItem:
    return ReviewItem(case_id=case_id, fields={"output": f"you idiot ({case_id})"},
                      metrics=tuple(_metric(m) for m in metrics or ("toxicity",)),
                      judge_model="openai/test-judge", event_time_ms=1_700_000_000_000)


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def queue(clock):
    queue = ReviewQueue(lease_seconds=60, clock=clock)
    for n in range(5):
        item = _item(f"c{n}", "toxicity", "bias")
        queue.items.apply(item.key(), item.encode(), where="test")
    return queue


def _label(queue: ReviewQueue, reviewer: str, case_id: str, metrics=("toxicity", "bias")):
    offer = queue.begin_write(reviewer, case_id)
    labels = [LabelRecord.from_choice(offer.item, m, "agree", reviewer=reviewer)
              for m in metrics]
    queue.finish_write(reviewer, case_id, labels, skipped=False)
    return labels


def test_oldest_first_and_the_same_item_again_on_reload(queue):
    first = queue.next_for("ana")
    assert first.item.case_id == "c0"
    assert [m.name for m in first.metrics] == ["toxicity", "bias"]
    again = queue.next_for("ana")
    assert again.item.case_id == "c0" and again.lease.lease_id == first.lease.lease_id
    assert queue.remaining("ana").left == 5


def test_two_reviewers_never_get_the_same_item(queue):
    seen = {queue.next_for("ana").item.case_id, queue.next_for("bob").item.case_id,
            queue.next_for("cid").item.case_id}
    assert seen == {"c0", "c1", "c2"}
    assert queue.holder("c1") == "bob"
    assert queue.remaining("ana") == Remaining(3, 2)


def test_a_lease_expires_and_is_renewed_by_showing(queue, clock):
    assert queue.next_for("ana").item.case_id == "c0"
    clock.now += 50
    assert queue.next_for("ana").item.case_id == "c0"  # renewed: 60 s from now
    clock.now += 50
    assert queue.next_for("bob").item.case_id == "c1"  # ana's lease still holds
    clock.now += 61
    assert queue.holder("c0") is None
    assert queue.next_for("cid").item.case_id == "c0"  # expired: anyone may take it
    with pytest.raises(Conflict, match="another reviewer"):
        queue.begin_write("ana", "c0")


def test_a_labelled_item_is_never_shown_again(queue):
    offer = queue.next_for("ana")
    _label(queue, "ana", offer.item.case_id)
    assert queue.next_for("ana").item.case_id == "c1"
    assert queue.next_for("bob").item.case_id == "c2"
    assert "c0" not in {queue.next_for(r).item.case_id for r in ("cid", "dan")}
    # Open: c1 (ana's), c2 (bob's), c3 (cid's), c4 (dan's); left for ana: hers.
    assert queue.remaining("ana") == Remaining(1, 3)
    with pytest.raises(Conflict, match="labelled already"):
        queue.begin_write("eve", "c0")
    assert "c0" not in queue.items.by_case  # done items are not kept in memory


def test_a_label_read_from_the_topic_closes_the_item_and_its_lease(queue):
    offer = queue.next_for("ana")
    for metric in ("toxicity", "bias"):  # labelled at another worker
        label = LabelRecord.from_choice(offer.item, metric, "disagree_safe", reviewer="zed")
        queue.labels.apply(label.key(), label.encode(), where="topic")
    assert queue.holder("c0") is None
    assert queue.next_for("ana").item.case_id == "c1"
    assert queue.open_count == 4


def test_labels_read_before_their_item_keep_it_closed(clock):
    queue = ReviewQueue(lease_seconds=60, clock=clock)
    item = _item("early", "toxicity")
    label = LabelRecord.from_choice(item, "toxicity", "agree", reviewer="ana")
    queue.labels.apply(label.key(), label.encode(), where="topic")
    queue.items.apply(item.key(), item.encode(), where="topic")
    assert queue.next_for("bob") is None
    assert queue.remaining("bob").left == 0


def test_a_partly_labelled_item_offers_only_what_is_open(queue):
    queue.next_for("ana")
    _label(queue, "ana", "c0", metrics=("toxicity",))
    offer = queue.next_for("bob")
    assert offer.item.case_id == "c0" and [m.name for m in offer.metrics] == ["bias"]


def test_skip_hides_the_item_from_that_reviewer_only(queue):
    offer = queue.next_for("ana")
    queue.begin_write("ana", offer.item.case_id)
    queue.finish_write("ana", "c0", [], skipped=True)
    assert queue.next_for("ana").item.case_id == "c1"
    assert queue.next_for("bob").item.case_id == "c0"
    # c1..c4 are left for ana; bob holds only c0, which she skipped anyway.
    assert queue.remaining("ana") == Remaining(4, 0)


def test_a_second_submit_while_saving_is_refused_and_a_failed_one_keeps_the_item(queue):
    queue.next_for("ana")
    queue.begin_write("ana", "c0")
    with pytest.raises(Conflict, match="being saved"):
        queue.begin_write("ana", "c0")
    assert queue.next_for("bob").item.case_id == "c1"  # not offered while saving
    queue.abort_write("c0")
    assert queue.next_for("ana").item.case_id == "c0"  # still hers, still open


def test_release_gives_the_item_back_at_once(queue):
    queue.next_for("ana")
    queue.release("ana")
    assert queue.next_for("bob").item.case_id == "c0"


def test_one_item_at_a_time_per_reviewer(queue):
    queue.next_for("ana")
    queue.begin_write("ana", "c3")  # a script labels another item
    queue.abort_write("c3")
    assert queue.holder("c0") is None and queue.holder("c3") == "ana"


def test_a_tombstoned_item_leaves_the_queue(queue):
    queue.items.apply(b"c0", None, where="test")
    assert queue.next_for("ana").item.case_id == "c1"


def test_form_answers_must_cover_every_metric_and_agree_needs_a_verdict(queue):
    offer = queue.next_for("ana")
    form = {"case_id": "c0", "m0": "toxicity", "c0": "agree", "m1": "bias"}
    with pytest.raises(Invalid, match="choose agree, disagree or skip for bias"):
        parse_form(form)
    form["c1"] = "skip"
    labels, skipped = parse_form(form).decide(offer.item, offer.metrics, reviewer="ana")
    assert [(l.metric, l.label, l.choice) for l in labels] == [("toxicity", "unsafe", "agree")]
    assert skipped == ["bias"]
    with pytest.raises(Invalid, match="no metric 'pii'"):
        parse_form({"case_id": "c0", "m0": "pii", "c0": "agree"}).decide(
            offer.item, offer.metrics, reviewer="ana")
    failed = ReviewItem(case_id="e", fields={"output": "x"}, metrics=(_metric("tox", None),),
                        judge_model="m", event_time_ms=1)
    with pytest.raises(Invalid, match="no verdict to agree with"):
        parse_form({"case_id": "e", "m0": "tox", "c0": "agree"}).decide(
            failed, failed.metrics, reviewer="ana")


def test_json_answers_may_label_a_subset_and_notes_are_kept(queue):
    offer = queue.next_for("ana")
    answer = parse_json({"case_id": "c0", "labels": [
        {"metric": "bias", "choice": "disagree_safe", "note": "  quoting someone  "}]})
    labels, skipped = answer.decide(offer.item, offer.metrics, reviewer="ana")
    assert (labels[0].label, labels[0].note, skipped) == ("safe", "quoting someone", [])
    for bad in ({"case_id": "c0"}, {"labels": []}, [1], {"case_id": "c0", "labels": [
            {"metric": "bias", "choice": "maybe"}]}):
        with pytest.raises(Invalid):
            parse_json(bad)
