"""The forwarded record is the input as it came (key, value, its own headers,
timestamp, partition number) plus the gate's headers, which an input cannot forge;
what the gate keeps of a record survives its trip through the table as it was."""

from __future__ import annotations

import orjson

from guardrail.gate import Decision, Entry, forwarded, header
from guardrail.stream.envelope import Source
from guardrail.stream.processing import Outgoing, RawMessage

RAW = RawMessage(b'{"output": "hi"}', Source(
    "model-outputs", 2, 41, timestamp_ms=1_700_000_000_123, key=b"user-7",
    headers=(("traceparent", b"00-abc-01"), ("guardrail.verdict", b"SAFE"))))
TOPICS = {"approved_topic": "approved", "held_topic": "held"}


def test_an_approved_record_is_the_input_with_the_gates_headers():
    out = forwarded(RAW, Decision(True, "SAFE", case_ids=("c1",)), **TOPICS)
    assert (out.topic, out.key, out.value, out.partition, out.timestamp_ms) == (
        "approved", b"user-7", b'{"output": "hi"}', 2, 1_700_000_000_123)
    assert header(out.headers, "traceparent") == b"00-abc-01"
    assert header(out.headers, "guardrail.case_id") == b"c1"
    assert header(out.headers, "guardrail.source") == b"model-outputs/2/41"
    assert [name for name, _ in out.headers].count("guardrail.verdict") == 1  # not forged
    assert header(out.headers, "guardrail.hold_reason") is None


def test_a_held_record_says_why_and_a_released_one_who_released_it():
    held_by = ({"case_id": "c1", "metric": "toxicity", "verdict": "UNSAFE",
                "evidence_spans": ["idiot"]},)
    decision = Decision(False, "UNSAFE", "unsafe", ("c1", "c2"), held_by)
    out = forwarded(RAW, decision, **TOPICS)
    assert out.topic == "held" and header(out.headers, "guardrail.hold_reason") == b"unsafe"
    assert orjson.loads(header(out.headers, "guardrail.held_by")) == list(held_by)
    assert header(out.headers, "guardrail.case_id") == b"model-outputs/2/41"  # two cases
    released = forwarded(RAW, decision, **TOPICS, released_by="ana")
    assert released.topic == "approved"
    assert header(released.headers, "guardrail.released_by") == b"ana"
    assert header(released.headers, "guardrail.hold_reason") == b"unsafe"


def test_an_entry_round_trips_with_its_records_and_the_parked_record():
    decision = Decision(True, "SAFE", case_ids=("c1",))
    out = Outgoing("redteam-results", b"c1", b"{}", timestamp_ms=5,
                   headers=(("h", b"\x00\xff"), ("none", None)), partition=1)
    entry = Entry("parked", decision, (out,), record=RAW, held_at=(1, 99))
    again = Entry.from_dict(orjson.loads(orjson.dumps(entry.to_dict())))
    assert again == entry
