"""The streaming message contract: what is judged, what goes to the DLQ, and the records."""

import base64
import hashlib
import json
from dataclasses import replace
from datetime import datetime, timezone

import orjson
import pytest

from guardrail.judging.models import CostEstimate, JudgeVerdict, MetricResult, RedteamMetrics
from guardrail.formats.reader import default_case_id
from guardrail.stream import envelope
from guardrail.stream.envelope import (DLQ_MAX_ORIGINAL, BadInput, InputMessage, Source,
                                       bytes_from_text, decode_input, dlq_record, group_labels,
                                       result_record, result_value, text_or_b64)

LIMIT = 1_000_000
NOON_MS = 1714564800000  # 2024-05-01T12:00:00Z


def _raw(**fields) -> bytes:
    return json.dumps(fields).encode()


def _decode(raw, max_bytes=LIMIT):
    return decode_input(raw, max_bytes=max_bytes)


# --- valid input ---------------------------------------------------------------


def test_valid_message_keeps_case_metadata_and_event_time():
    raw = _raw(case_id="c1", output="Sure, here it is.", input="hi",
               metadata={"model": "m", "model_version": "v2", "temperature": 0.7,
                         "canary": True, "unset": None},
               timestamp="2024-05-01T12:00:00Z")
    decoded = _decode(raw)
    assert isinstance(decoded, InputMessage)
    assert decoded.case.case_id == "c1"
    assert decoded.case.output == "Sure, here it is."
    assert decoded.case.input == "hi"
    assert decoded.event_time_ms == NOON_MS
    # Labels become strings; a null label is simply absent.
    assert decoded.metadata["model"] == "m"
    assert decoded.metadata["model_version"] == "v2"
    assert decoded.metadata["temperature"] == "0.7"
    assert isinstance(decoded.metadata["canary"], str)
    assert "unset" not in decoded.metadata


def test_message_without_metadata_or_timestamp():
    decoded = _decode(_raw(output="hello"))
    assert isinstance(decoded, InputMessage)
    assert decoded.metadata == {}
    assert decoded.event_time_ms is None


@pytest.mark.parametrize("timestamp", [
    "2024-05-01T12:00:00Z",
    "2024-05-01T12:00:00.000Z",
    "2024-05-01T14:00:00+02:00",
    "2024-05-01T12:00:00",  # naive: read as UTC
    1714564800,  # epoch seconds
    1714564800.0,
    NOON_MS,  # epoch milliseconds
])
def test_timestamp_forms_give_the_same_epoch_ms(timestamp):
    decoded = _decode(_raw(output="x", timestamp=timestamp))
    assert isinstance(decoded, InputMessage)
    assert decoded.event_time_ms == NOON_MS


def test_millisecond_timestamps_keep_their_milliseconds():
    for timestamp in ("2024-05-01T12:00:00.250Z", 1714564800.25, NOON_MS + 250):
        assert _decode(_raw(output="x", timestamp=timestamp)).event_time_ms == NOON_MS + 250


@pytest.mark.parametrize("timestamp", ["2004-03-15T07:55:47.472Z", 1079337347.472])
def test_millisecond_timestamps_are_not_truncated_by_float_error(timestamp):
    decoded = _decode(_raw(output="x", timestamp=timestamp))
    assert decoded.event_time_ms == 1079337347472


def test_long_labels_are_capped():
    decoded = _decode(_raw(output="x", metadata={"k" * 500: "v" * 500}))
    ((key, value),) = decoded.metadata.items()
    assert len(key) <= 200 and len(value) <= 200
    assert key.startswith("kkk") and value.startswith("vvv")


def test_size_limit_is_inclusive():
    raw = _raw(output="x" * 100)
    assert isinstance(_decode(raw, max_bytes=len(raw)), InputMessage)
    assert isinstance(_decode(raw, max_bytes=len(raw) - 1), BadInput)


# --- bad input: every failure is a BadInput naming its reason ----------------------


def test_tombstone_is_bad_input():
    decoded = _decode(None)
    assert isinstance(decoded, BadInput)
    assert "tombstone" in decoded.reason


def test_oversized_message_names_size_and_limit():
    raw = _raw(output="x" * 5000)
    decoded = _decode(raw, max_bytes=1024)
    assert isinstance(decoded, BadInput)
    assert str(len(raw)) in decoded.reason and "1024" in decoded.reason


def test_invalid_utf8_names_the_byte_position():
    raw = b'{"case_id": "c", "output": "caf\xe9 ok"}'
    decoded = _decode(raw)
    assert isinstance(decoded, BadInput)
    assert "UTF-8" in decoded.reason
    position = raw.index(b"\xe9")
    assert f"byte {position}" in decoded.reason


@pytest.mark.parametrize("raw", [b'{"output": "x",}', b"{not json", b"", b'{"output": "x"} trailing'])
def test_invalid_json(raw):
    decoded = _decode(raw)
    assert isinstance(decoded, BadInput)
    assert "not valid JSON" in decoded.reason


@pytest.mark.parametrize("raw, kind", [(b"[1, 2]", "list"), (b'"text"', "str"),
                                       (b"42", "int"), (b"null", "NoneType")])
def test_json_that_is_not_an_object(raw, kind):
    decoded = _decode(raw)
    assert isinstance(decoded, BadInput)
    assert "JSON object" in decoded.reason and kind in decoded.reason


@pytest.mark.parametrize("fields, named", [
    ({"output": 5}, "output"),
    ({"output": ["a", "b"]}, "output"),
    ({"output": "x", "case_id": {"id": 1}}, "case_id"),
    ({"output": "x", "input": 3.5}, "input"),
    ({"output": "x", "context": [1, 2]}, "context"),
    ({"output": "x", "redteam": "strict"}, "redteam"),
    ({"output": "x", "redteam": {"scoring_mode": "scale_1_10"}}, "scoring_mode"),
    ({"output": "x", "redteam": {"include_reasoning": "sometimes"}}, "include_reasoning"),
    ({"output": "x", "redteam": {"metrics": [{"name": "pii"}]}}, "goal"),
    ({"output": "x", "redteam": {"metrics": [{"name": "pii", "goal": "   "}]}}, "goal"),
    ({"output": "x", "metadata": ["model", "m"]}, "metadata"),
    ({"output": "x", "metadata": "model=m"}, "metadata"),
    ({"output": "x", "metadata": {"model": {"name": "m"}}}, "metadata.model"),
    ({"output": "x", "metadata": {"tags": ["a", "b"]}}, "metadata.tags"),
    ({"output": "x", "timestamp": "yesterday"}, "timestamp"),
    ({"output": "x", "timestamp": "2024-13-45T99:00:00Z"}, "timestamp"),
    ({"output": "x", "timestamp": True}, "timestamp"),
    ({"output": "x", "timestamp": [1714564800]}, "timestamp"),
])
def test_invalid_fields_name_the_field(fields, named):
    decoded = _decode(_raw(**fields))
    assert isinstance(decoded, BadInput), decoded
    assert named in decoded.reason


@pytest.mark.parametrize("fields", [{"case_id": "c"}, {"output": None}, {"output": ""},
                                    {"output": "  \n\t "}, {}])
def test_missing_or_empty_output_is_not_judged(fields):
    decoded = _decode(_raw(**fields))
    assert isinstance(decoded, BadInput)
    assert "output" in decoded.reason


def test_out_of_range_timestamp_is_bad_input():
    decoded = _decode(b'{"case_id": "c", "output": "x", "timestamp": 1e20}')
    assert isinstance(decoded, BadInput)
    assert "timestamp" in decoded.reason


@pytest.mark.parametrize("depth", [1000, 10_000])
@pytest.mark.parametrize("field", ["context", "metadata", "unknown_field"])
def test_deep_nesting_is_bad_input_not_a_crash(depth, field):
    nested = b"[" * depth + b"]" * depth
    raw = b'{"case_id": "deep", "output": "x", "' + field.encode() + b'": ' + nested + b"}"
    decoded = _decode(raw)
    if depth > 1024 or field != "unknown_field":
        assert isinstance(decoded, BadInput)
        assert "JSON" in decoded.reason or field in decoded.reason
    else:
        # Unknown fields are ignored, however deep (below the parser's limit).
        assert isinstance(decoded, InputMessage)


def test_deeply_nested_objects_in_metadata():
    depth = 5000
    nested = b'{"a": ' * depth + b"1" + b"}" * depth
    decoded = _decode(b'{"output": "x", "metadata": ' + nested + b"}")
    assert isinstance(decoded, BadInput)


# --- group labels -----------------------------------------------------------------


def test_group_labels_fill_missing_with_dash_and_keep_only_chosen_labels():
    metadata = {"model": "m", "prompt_version": "p3", "user": "u-17"}
    labels = ("model", "model_version", "prompt_version")
    group = group_labels(metadata, labels)
    assert group == {"model": "m", "model_version": "-", "prompt_version": "p3"}
    assert list(group) == list(labels)
    assert group_labels({}, ("model",)) == {"model": "-"}
    assert group_labels(metadata, ()) == {}


# --- result records -----------------------------------------------------------------


def _metrics() -> RedteamMetrics:
    return RedteamMetrics(
        metrics=[MetricResult(name="toxicity", score=0.0,
                              result=[JudgeVerdict(verdict="UNSAFE", passed=False,
                                                   violations=["insult"],
                                                   evidence_spans=["idiot"])]),
                 MetricResult(name="pii", score=None, error="judge timed out")],
        cost=CostEstimate(cost=0.0012, input_tokens=300, output_tokens=40))


def test_result_record_has_spec_fields_and_identity():
    message = _decode(_raw(case_id="c7", output="you idiot",
                           metadata={"model": "m", "model_version": "v1"}))
    source = Source("model-outputs", 3, 1041, timestamp_ms=NOON_MS, key=b"c7")
    before = datetime.now(timezone.utc).replace(microsecond=0)
    record = result_record(message, _metrics(), source, judge_model="openai/judge",
                           event_time_ms=NOON_MS + 5)
    assert set(record) >= {"metrics", "cost", "case_id", "metadata", "judge_model",
                           "event_time", "judged_at", "source"}
    assert record["case_id"] == "c7"
    assert record["metadata"] == {"model": "m", "model_version": "v1"}
    assert record["judge_model"] == "openai/judge"
    assert record["source"] == {"topic": "model-outputs", "partition": 3, "offset": 1041}
    assert datetime.fromisoformat(record["event_time"]) == datetime(
        2024, 5, 1, 12, 0, 0, 5000, tzinfo=timezone.utc)
    judged_at = datetime.fromisoformat(record["judged_at"])
    assert judged_at.utcoffset().total_seconds() == 0
    assert judged_at >= before
    # The spec's payload, unchanged.
    toxicity, pii = record["metrics"]
    assert toxicity["name"] == "toxicity" and toxicity["score"] == 0.0
    assert toxicity["result"][0]["verdict"] == "UNSAFE"
    assert "severity" not in toxicity["result"][0]  # binary mode: absent, not null
    assert pii["score"] is None and pii["error"] == "judge timed out"
    assert record["cost"] == {"cost": 0.0012, "input_tokens": 300, "output_tokens": 40}
    # Serialisable as-is for the results topic.
    assert orjson.loads(orjson.dumps(record)) == record


def test_result_record_without_case_id():
    message = _decode(_raw(output="hi"))
    record = result_record(message, _metrics(), Source("t", 0, 0), judge_model="j",
                           event_time_ms=NOON_MS)
    assert record["case_id"] is None and record["metadata"] == {}


# --- DLQ records ----------------------------------------------------------------------


def test_dlq_record_carries_reason_source_key_and_original():
    raw = b'{"case_id": "c9", "output": 5}'
    reason = _decode(raw).reason
    source = Source("model-outputs", 1, 42, timestamp_ms=NOON_MS, key=b"c9\x00\xff")
    record = dlq_record(reason, raw, source)
    assert record["reason"] == reason
    assert record["source"]["topic"] == "model-outputs"
    assert record["source"]["partition"] == 1
    assert record["source"]["offset"] == 42
    assert record["source"]["timestamp"] == NOON_MS
    assert base64.b64decode(record["source"]["key"]) == b"c9\x00\xff"
    assert base64.b64decode(record["value_base64"]) == raw
    assert record["size"] == len(raw)
    assert record["sha256"] == hashlib.sha256(raw).hexdigest()
    assert "value_excerpt" not in record
    assert orjson.loads(orjson.dumps(record)) == record


def test_dlq_record_keeps_non_utf8_originals_exactly():
    raw = b'{"output": "\xff\xfe"}'
    record = dlq_record(_decode(raw).reason, raw, Source("t", 0, 7))
    assert base64.b64decode(record["value_base64"]) == raw
    assert record["source"]["key"] is None


def test_dlq_record_for_a_tombstone():
    record = dlq_record(_decode(None).reason, None, Source("t", 0, 8, key=b"k"))
    assert "tombstone" in record["reason"]
    assert record["size"] == 0
    assert base64.b64decode(record["source"]["key"]) == b"k"


def test_dlq_record_keeps_originals_up_to_the_limit_whole():
    raw = b"a" * DLQ_MAX_ORIGINAL
    record = dlq_record("too big", raw, Source("t", 0, 1))
    assert base64.b64decode(record["value_base64"]) == raw


def test_dlq_record_for_large_values_has_excerpt_size_and_digest():
    raw = b'{"output": "' + b"\xe2\x82\xac" * DLQ_MAX_ORIGINAL + b'"}'
    record = dlq_record("message too large", raw, Source("t", 2, 99, key=b"big"))
    assert "value_base64" not in record
    excerpt = record["value_excerpt"]
    assert excerpt.startswith('{"output": "€€€')
    assert 0 < len(excerpt.encode()) < len(raw)
    assert len(excerpt) <= 4096
    assert record["size"] == len(raw)
    assert record["sha256"] == hashlib.sha256(raw).hexdigest()
    assert record["reason"] == "message too large"
    assert len(orjson.dumps(record)) < 64 * 1024


# --- key and headers travel -----------------------------------------------------------

#: A W3C trace context, a binary header, text that looks like the b64 marker,
#: a header without value, and a name given twice.
HEADERS = (("traceparent", b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
           ("span-bin", b"\x00\xff\x10"), ("note", b"b64:not really"), ("empty", None),
           ("dup", b"first"), ("dup", b"second"))


def test_bytes_travel_as_text_or_marked_base64_and_come_back_exactly():
    assert text_or_b64(b"order-17") == "order-17"
    assert text_or_b64("été".encode()) == "été"
    assert text_or_b64(b"\x00\xff") == "b64:" + base64.b64encode(b"\x00\xff").decode()
    # Text that starts with the marker is encoded too, so reading back is unambiguous.
    assert text_or_b64(b"b64:abc").startswith("b64:") and text_or_b64(b"b64:abc") != "b64:abc"
    assert text_or_b64(None) is None and bytes_from_text(None) is None
    for value in (b"order-17", b"", b"\x00\xff\x10", b"b64:abc", "été".encode()):
        assert bytes_from_text(text_or_b64(value)) == value


def test_result_record_carries_the_inputs_key_and_headers():
    source = Source("in", 1, 5, key=b"order-17", headers=HEADERS)
    message = _decode(_raw(output="hi"))
    record = result_record(message, _metrics(), source, judge_model="j", event_time_ms=NOON_MS)
    assert record["key"] == "order-17"
    headers = record["headers"]
    assert headers["traceparent"] == HEADERS[0][1].decode()
    assert bytes_from_text(headers["span-bin"]) == b"\x00\xff\x10"
    assert bytes_from_text(headers["note"]) == b"b64:not really"
    assert headers["empty"] is None
    assert headers["dup"] == "second"  # the map keeps the last, as lastHeader does
    assert record["source"] == {"topic": "in", "partition": 1, "offset": 5}
    assert orjson.loads(orjson.dumps(record)) == record


def test_result_record_of_a_message_without_key_or_headers():
    record = result_record(_decode(_raw(case_id="c", output="hi")), _metrics(),
                           Source("t", 0, 0), judge_model="j", event_time_ms=NOON_MS)
    assert record["key"] is None and record["headers"] == {}


def test_dlq_record_carries_the_inputs_key_and_headers():
    raw = b"{not json"
    source = Source("in", 0, 9, key=b"\xfe\xff", headers=HEADERS)
    record = dlq_record(_decode(raw).reason, raw, source)
    assert bytes_from_text(record["key"]) == b"\xfe\xff"
    assert record["headers"]["traceparent"] == HEADERS[0][1].decode()
    assert bytes_from_text(record["headers"]["span-bin"]) == b"\x00\xff\x10"
    assert base64.b64decode(record["source"]["key"]) == b"\xfe\xff"  # kept for old readers
    assert orjson.loads(orjson.dumps(record)) == record


# --- one rule for a missing case_id ----------------------------------------------------


@pytest.mark.parametrize("key, case_id", [
    (b"order-17", "order-17"),          # the Kafka key, decoded
    (None, "in/2/42"),                  # no key: topic/partition/offset
    (b"", "in/2/42"),                   # an empty key names nothing
    (b"\xff\xfe", "in/2/42"),           # a binary key is no readable name
])
def test_a_case_without_case_id_is_named_by_key_then_coordinates(key, case_id):
    source = Source("in", 2, 42, key=key)
    for raw in (_raw(output="hi"), _raw(case_id=None, output="hi"), _raw(case_id="", output="hi")):
        message = decode_input(raw, max_bytes=LIMIT, source=source)
        assert message.case.case_id == case_id == default_case_id(key, source.coordinates)


def test_a_case_id_of_its_own_wins_over_the_key():
    message = decode_input(_raw(case_id="mine", output="hi"), max_bytes=LIMIT,
                           source=Source("in", 0, 1, key=b"theirs"))
    assert message.case.case_id == "mine"


@pytest.mark.parametrize("probability", [None, 0.3 + 0.6, 1e-05, 2.5e-07])
def test_the_published_value_is_the_records_json_byte_for_byte(monkeypatch, probability):
    # The worker and replay publish result_value; readers know result_record's shape.
    monkeypatch.setattr(envelope, "now_ms", lambda: NOON_MS + 1)
    verdict = JudgeVerdict(verdict="UNSAFE", passed=False, severity=4, reasoning="r \u2028 é",
                           violations=["insult 😀"], evidence_spans=['"idiot"\\'],
                           probability_unsafe=probability)
    metrics = RedteamMetrics(
        metrics=[MetricResult(name="toxicity", score=0.25, result=[verdict]),
                 MetricResult(name="pii", score=None, error="judge timed out")],
        cost=CostEstimate(cost=None, input_tokens=300, output_tokens=40))
    source = Source("in", 1, 5, key=b"\xfe\xff", headers=HEADERS)
    message = _decode(_raw(case_id="c8", output="you idiot", metadata={"model": "m"},
                           conversation=[{"role": "user", "content": "hi"}], session_id="s1"))
    message = replace(message, trace={"trace_id": "a" * 32, "span_id": "b" * 16})
    for m in (metrics, _metrics()):
        options = {"judge_model": "j", "event_time_ms": NOON_MS}
        value = result_value(message, m, source, **options)
        assert value == orjson.dumps(result_record(message, m, source, **options))
        assert orjson.loads(value)["judged_at"] == "2024-05-01T12:00:00.001+00:00"
