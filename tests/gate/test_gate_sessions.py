"""Which sessions the gate holds: the latest hold per session from the gate-sessions
topic, until a reviewer releases the session; a release is for good."""

from __future__ import annotations

from guardrail.gate.sessions import SessionHolds, hold_record
from guardrail.review.records import GateAnswer, GateHold, ReviewItem


def _answer(session_id: str, answer: str, case_id: str) -> GateAnswer:
    item = ReviewItem(case_id=case_id, fields={}, metrics=(), judge_model="j",
                      event_time_ms=1, gate=GateHold(kind="session", reason="session_unsafe",
                                                     session_id=session_id))
    return GateAnswer.from_item(item, answer, reviewer="ana")


def test_a_session_is_held_from_its_hold_record_until_released_and_not_again():
    holds = SessionHolds()
    holds.apply(*hold_record("conv-1", "conv-1#3", [{"metric": "toxicity"}]))
    holds.apply(*hold_record("conv-2", "conv-2#1", []))
    assert "conv-1" in holds and "conv-2" in holds and "conv-3" not in holds
    holds.answered(_answer("conv-1", "keep", "conv-1#3"))
    assert "conv-1" in holds  # kept: still held
    holds.answered(_answer("conv-1", "release", "conv-1#3"))
    holds.apply(*hold_record("conv-1", "conv-1#6", []))  # judged UNSAFE again later
    assert "conv-1" not in holds and len(holds) == 1
    holds.apply(b"conv-2", None)  # a tombstone lifts the hold
    assert "conv-2" not in holds


def test_a_record_that_is_no_hold_is_skipped_and_counted():
    holds = SessionHolds()
    holds.apply(b"x", b"{not json")
    holds.apply(b"y", b'{"session_id": "y"}')
    assert holds.skipped == 2 and len(holds) == 0
