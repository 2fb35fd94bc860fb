"""A record the gate held, on the review side: its item asks release or keep, stays
in the queue until that is answered (labels alone do not close it), and the answer
travels as a gate answer record on the labels topic beside the labels."""

from __future__ import annotations

import pytest

from guardrail.review.folds import LabelsFold
from guardrail.review.page import Viewer, render_item
from guardrail.review.queue import Remaining, ReviewQueue
from guardrail.review.records import (GateAnswer, GateHold, LabelRecord, ReviewItem,
                                      ReviewMetric, SchemaError, decode_label, gate_key)
from guardrail.review.submit import Invalid, parse_form, parse_json

HOLD = GateHold(reason="unsafe", source="model-outputs/2/41", blocks_key=True,
                held_by=({"case_id": "c1", "metric": "toxicity", "verdict": "UNSAFE"},))


def _item(case_id="c1", gate=HOLD, metrics=("toxicity",)) -> ReviewItem:
    return ReviewItem(
        case_id=case_id, fields={"output": "you idiot"}, judge_model="openai/test",
        event_time_ms=1_700_000_000_000, gate=gate,
        metrics=tuple(ReviewMetric(name=m, goal="g", rubric_version="r1", verdict="UNSAFE",
                                   slice="unsafe", rate=1.0) for m in metrics))


def _queue(*items: ReviewItem) -> ReviewQueue:
    queue = ReviewQueue(lease_seconds=60)
    for item in items:
        queue.items.apply(item.key(), item.encode(), where="test")
    return queue


def test_a_gate_answer_round_trips_under_its_own_key_and_is_told_from_a_label():
    answer = GateAnswer.from_item(_item(), "release", reviewer="ana", note=" ok ")
    assert answer.key() == gate_key("c1") == b"c1|@gate"
    back = decode_label(answer.encode())
    assert isinstance(back, GateAnswer)
    assert (back.answer, back.gate.source, back.reviewer) == ("release", "model-outputs/2/41",
                                                              "ana")
    label = LabelRecord.from_choice(_item(), "toxicity", "agree", reviewer="ana")
    assert isinstance(decode_label(label.encode()), LabelRecord)
    with pytest.raises(SchemaError, match="not a label"):
        decode_label(b'{"kind": "something_else", "schema_version": 1}')
    with pytest.raises(ValueError, match="did not hold"):
        GateAnswer.from_item(_item(gate=None), "keep", reviewer="ana")


def test_the_labels_fold_keeps_gate_answers_apart_from_labels_and_skips_nothing():
    fold = LabelsFold()
    label = LabelRecord.from_choice(_item(), "toxicity", "agree", reviewer="ana")
    answer = GateAnswer.from_item(_item(), "keep", reviewer="ana")
    for record in (label, answer):
        fold.apply(record.key(), record.encode(), where="test")
    assert [r.metric for r in fold.records()] == ["toxicity"]
    assert fold.gate_answers["c1"].answer == "keep"
    assert fold.skipped == 0
    fold.apply(answer.key(), None, where="test")  # a tombstone withdraws the answer
    assert fold.gate_answers == {} and len(fold.records()) == 1


def test_a_held_item_stays_open_until_its_hold_is_answered_labels_or_not():
    queue = _queue(_item())
    offer = queue.next_for("ana")
    assert offer is not None and offer.gate_open and [m.name for m in offer.metrics] == [
        "toxicity"]
    write = queue.begin_write("ana", "c1")
    label = LabelRecord.from_choice(write.item, "toxicity", "agree", reviewer="ana")
    queue.finish_write("ana", "c1", [label], skipped=False)
    again = queue.next_for("ana")
    assert again is not None and again.gate_open and again.metrics == ()
    queue.begin_write("ana", "c1")
    queue.finish_write("ana", "c1", [GateAnswer.from_item(again.item, "release", reviewer="ana")],
                       skipped=False)
    assert queue.next_for("ana") is None and queue.open_count == 0


def test_the_form_must_answer_the_hold_and_writes_one_gate_answer():
    item = _item()
    queue = _queue(item)
    offer = queue.next_for("ana")
    form = {"case_id": "c1", "action": "save", "m0": "toxicity", "c0": "agree"}
    with pytest.raises(Invalid, match="release, keep or skip"):
        parse_form(form).decide(item, offer.metrics, reviewer="ana", gate_open=True)
    written, skipped = parse_form({**form, "gate": "release", "gate_note": " looks fine "}
                                  ).decide(item, offer.metrics, reviewer="ana", gate_open=True)
    answers = [w for w in written if isinstance(w, GateAnswer)]
    assert [(a.answer, a.note) for a in answers] == [("release", "looks fine")]
    assert skipped == []
    _, skipped = parse_form({**form, "gate": "skip"}).decide(item, offer.metrics,
                                                             reviewer="ana", gate_open=True)
    assert skipped == ["@gate"]
    with pytest.raises(Invalid, match="release, keep or skip"):
        parse_form({**form, "gate": "approve"})


def test_a_script_may_answer_only_the_hold_but_not_one_already_answered():
    item = _item()
    written, _ = parse_json({"case_id": "c1", "gate": "keep"}).decide(
        item, item.metrics, reviewer="bot", gate_open=True)
    assert [type(w).__name__ for w in written] == ["GateAnswer"]
    with pytest.raises(Invalid) as refused:
        parse_json({"case_id": "c1", "gate": "release"}).decide(item, (), reviewer="bot",
                                                                gate_open=False)
    assert refused.value.status == 409
    with pytest.raises(Invalid, match="labels must be"):
        parse_json({"case_id": "c1"})


def test_the_page_asks_release_or_keep_with_why_and_escapes_what_it_shows():
    hostile = GateHold(reason="unsafe", source="<script>x</script>/0/1",
                       held_by=({"case_id": "<b>c</b>", "metric": "toxicity",
                                 "verdict": "UNSAFE"},), blocks_key=True)
    queue = _queue(_item(gate=hostile))
    offer = queue.next_for("ana")
    html = render_item(offer, Viewer("ana", "tok"), Remaining(1, 0))
    assert 'name="gate" value="release"' in html and 'name="gate" value="keep"' in html
    assert "Later records of its key wait for your answer" in html
    assert "<script>x" not in html and "&lt;script&gt;x" in html
    assert "<b>c</b>" not in html
