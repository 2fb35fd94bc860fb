"""The judgment event (guardrail.stream.events): its wire format, its keys, and
what decoding refuses."""

import re
import subprocess
import sys

import orjson
import pytest

from guardrail.stream.envelope import Source
from guardrail.stream.events import (BUNDLE_KIND, JudgmentEvent, MalformedEvent, UnknownEvent,
                                     decode_events, encode_bundle, mark_position,
                                     mark_value, parse_window_key,
                                     partition_key, window_key)

V1 = {"model": "m", "model_version": "v1", "prompt_version": "p1"}
V2 = {**V1, "model_version": "v2"}

#: A judgment event exactly as the worker wrote it before this class existed
#: (byte for byte what the old dict gave orjson): the wire format to keep.
TODAYS_WIRE = (
    b'{"metric":"toxicity","group":{"model":"m","model_version":"v2","prompt_version":"-"},'
    b'"table_key":"toxicity|model=m,model_version=v2,prompt_version=-","status":"unsafe",'
    b'"case_id":"c7","event_time_ms":1700000000123,"evidence_spans":["you idiot"],'
    b'"source":{"topic":"in","partition":2,"offset":41},"origin":"live"}')
TODAYS_EVENT = JudgmentEvent(
    metric="toxicity", group={"model": "m", "model_version": "v2", "prompt_version": "-"},
    status="unsafe", case_id="c7", event_time_ms=1_700_000_000_123,
    evidence_spans=("you idiot",), source=Source("in", 2, 41), origin="live")


def _event(**changes):
    fields = {"metric": "pii", "group": dict(V1), "status": "safe", "case_id": None,
              "event_time_ms": 5, "evidence_spans": (), "source": Source("in", 0, 0),
              "origin": "replay-abc"}
    return JudgmentEvent(**{**fields, **changes})


def test_the_wire_format_before_schema_versions_still_decodes_and_today_adds_them_only():
    assert JudgmentEvent.decode(TODAYS_WIRE) == TODAYS_EVENT
    assert TODAYS_EVENT.encode() == b'{"kind":"judgment","schema_version":1,' + TODAYS_WIRE[1:]


@pytest.mark.parametrize("changes, kind, version", [
    ({"kind": "probe"}, "probe", "1"),
    ({"schema_version": 2}, "judgment", "2"),
    ({"kind": "probe", "schema_version": 7, "status": "maybe"}, "probe", "7"),
])
def test_kinds_and_versions_of_a_newer_release_are_unknown_not_malformed(changes, kind,
                                                                         version):
    data = {**orjson.loads(TODAYS_EVENT.encode()), **changes}
    with pytest.raises(UnknownEvent) as caught:
        JudgmentEvent.decode(orjson.dumps(data))
    assert (caught.value.kind, caught.value.version) == (kind, version)
    with pytest.raises(MalformedEvent):  # a version 1 status it does not know is malformed
        JudgmentEvent.decode(orjson.dumps({**orjson.loads(TODAYS_EVENT.encode()),
                                           "status": "maybe"}))


@pytest.mark.parametrize("event", [
    _event(),
    _event(status="unsafe", case_id="c1", evidence_spans=("a", "b, c"), origin="live"),
    _event(status="error", source=None, group={}),
    _event(source=Source("in", 0, 9), floor=7),
])
def test_encode_decode_round_trip(event):
    assert JudgmentEvent.decode(event.encode()) == event


def test_events_from_before_replays_are_live_and_without_an_offset_are_not_deduplicated():
    older = (b'{"metric":"toxicity","group":{"model":"m"},"table_key":"toxicity|model=m",'
             b'"status":"safe","case_id":"c1","event_time_ms":7,"evidence_spans":[],'
             b'"source":{"topic":"in","partition":0,"offset":3}}')
    assert JudgmentEvent.decode(older).origin == "live"
    assert JudgmentEvent.decode(older).dedup_mark == ("live|in|0", (3, 0))
    for source in (b'{"topic":"in","partition":0}', b'{"topic":"in","partition":0,"offset":"3"}',
                   b"null"):
        event = JudgmentEvent.decode(older.replace(b'{"topic":"in","partition":0,"offset":3}',
                                                   source))
        assert (event.source, event.dedup_mark) == (None, None)


def test_the_dedup_mark_is_per_origin_and_source_partition():
    assert _event(source=Source("in", 4, 9), origin="replay-1").dedup_mark == \
        ("replay-1|in|4", (9, 0))
    assert _event(source=None).dedup_mark is None


def test_cases_of_one_record_are_ordered_by_their_index_and_travel_with_it():
    """An OTLP record holds many cases at one offset: the mark orders them by
    (offset, index), and the index survives the wire."""
    marks = [_event(source=Source("in", 0, 9, index=i)).dedup_mark[1] for i in range(3)]
    assert marks == sorted(marks) and len(set(marks)) == 3
    assert _event(source=Source("in", 0, 8, index=7)).dedup_mark[1] < marks[0]
    event = _event(source=Source("in", 0, 9, index=2))
    assert JudgmentEvent.decode(event.encode()).source == Source("in", 0, 9, index=2)
    # Stored marks: a plain offset for a first case (as cells always held), else a pair.
    assert [mark_value(m) for m in marks] == [9, [9, 1], [9, 2]]
    assert [mark_position(mark_value(m)) for m in marks] == marks
    assert mark_position(None) < (0, 0)


def test_window_and_partition_keys_keep_their_format():
    event = _event(metric="toxicity", group=dict(V2))
    assert event.window_key == "toxicity|model=m,model_version=v2,prompt_version=p1"
    assert event.partition_key("model_version") == b"toxicity|model=m,prompt_version=p1"
    assert partition_key("toxicity", V2, "release") == window_key("toxicity", V2)


def test_key_parse_round_trip_even_with_separators_inside_labels():
    odd = {"model": "a=b", "team": "x,y|z"}
    key = window_key("tox-icity.v2", odd)
    assert key == "tox-icity.v2|model=a=b,team=x,y|z"  # unescaped, as the old keys were
    assert parse_window_key(key) == ("tox-icity.v2", "model=a=b,team=x,y|z")
    assert parse_window_key(window_key("pii", {})) == ("pii", "")


def test_versions_of_a_group_share_a_partition_but_not_a_window_key():
    assert partition_key("toxicity", V1, "model_version") == \
        partition_key("toxicity", V2, "model_version")
    assert window_key("toxicity", V1) != window_key("toxicity", V2)


def test_other_groups_and_metrics_get_other_keys():
    other_model = {**V1, "model": "n"}
    other_prompt = {**V1, "prompt_version": "p2"}
    keys = {partition_key("toxicity", V1, "model_version"),
            partition_key("toxicity", other_model, "model_version"),
            partition_key("toxicity", other_prompt, "model_version"),
            partition_key("pii", V1, "model_version")}
    assert len(keys) == 4
    assert len({window_key("toxicity", V1), window_key("pii", V1),
                window_key("toxicity", other_model)}) == 3


def test_version_label_is_configurable():
    a = {"model": "m", "release": "r1"}
    b = {"model": "m", "release": "r2"}
    assert partition_key("toxicity", a, "release") == partition_key("toxicity", b, "release")
    assert partition_key("toxicity", a, "model_version") != \
        partition_key("toxicity", b, "model_version")


def test_missing_labels_still_make_distinct_keys():
    dashed = {"model": "-", "model_version": "v1", "prompt_version": "-"}
    assert window_key("toxicity", dashed) != window_key("toxicity", V1)
    assert window_key("toxicity", dashed) == window_key("toxicity", dict(dashed))


def _wire(**changes):
    """Today's wire JSON with some fields replaced (or, for None, removed)."""
    data = orjson.loads(TODAYS_WIRE)
    for name, value in changes.items():
        if value is None:
            del data[name]
        else:
            data[name] = value
    return orjson.dumps(data)


@pytest.mark.parametrize("raw, reason", [
    (None, "no value"),
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object, got list"),
    (_wire(metric=None), "metric must be"),
    (_wire(metric="a|b", table_key="a|b|model=m,model_version=v2,prompt_version=-"),
     "without '|'"),
    (_wire(group=["m"]), "group must be"),
    (_wire(group={"model": 1}), "group must be"),
    (_wire(status="maybe"), "status must be one of safe, unsafe, error"),
    (_wire(status=None), "status must be"),
    (_wire(case_id=7), "case_id must be"),
    (_wire(event_time_ms="1700000000123"), "event_time_ms must be an integer"),
    (_wire(event_time_ms=None), "event_time_ms must be an integer"),
    (_wire(evidence_spans="you idiot"), "evidence_spans must be a list of strings"),
    (_wire(source="in"), "source must be an object"),
    (_wire(source={"partition": 2, "offset": 41}), "string topic and an integer partition"),
    (_wire(origin=5), "origin must be a string"),
    (_wire(table_key="toxicity|model=other"), "does not match metric and group"),
])
def test_malformed_events_raise_with_a_reason(raw, reason):
    with pytest.raises(MalformedEvent, match=re.escape(reason)) as caught:
        JudgmentEvent.decode(raw)
    assert isinstance(caught.value, ValueError)


def test_the_contract_module_imports_no_kafka_client():
    code = ("import sys, guardrail.stream.events; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'faust', 'aiokafka'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_a_not_sampled_event_round_trips_and_older_events_still_decode():
    event = _event(status="not_sampled", case_id="c9")
    assert JudgmentEvent.decode(event.encode()) == event
    assert b'"status":"not_sampled"' in event.encode()
    assert JudgmentEvent.decode(TODAYS_WIRE) == TODAYS_EVENT  # no new field is required


def test_a_bundle_carries_many_events_in_order_and_a_single_event_still_reads():
    events = [JudgmentEvent("toxicity", {"model": "m"}, status, f"c{i}", 1_000 + i,
                            source=Source("in", 0, i)) for i, status in
              enumerate(["safe", "unsafe", "not_sampled", "error"])]
    value = encode_bundle(events)
    assert orjson.loads(value)["kind"] == BUNDLE_KIND
    assert decode_events(value) == (events, [])
    assert decode_events(events[1].encode()) == ([events[1]], [])  # an older worker's record


def test_a_bad_item_of_a_bundle_is_reported_and_the_others_still_count():
    good = JudgmentEvent("bias", {"model": "m"}, "safe", "c1", 5, source=Source("in", 1, 7))
    newer = {**good.as_dict(), "schema_version": 9}
    value = orjson.dumps({"kind": "judgments", "schema_version": 1,
                          "events": [{"metric": "bias"}, good.as_dict(), newer]})
    events, problems = decode_events(value)
    assert events == [good]
    assert [type(p) for p in problems] == [MalformedEvent, UnknownEvent]


@pytest.mark.parametrize("raw, problem", [
    (b"{broken", MalformedEvent),
    (None, MalformedEvent),
    (b'{"kind": "judgments", "schema_version": 1, "events": {}}', MalformedEvent),
    (b'{"kind": "judgments", "schema_version": 2, "events": []}', UnknownEvent),
])
def test_a_record_that_is_no_bundle_and_no_event_is_one_problem(raw, problem):
    events, problems = decode_events(raw)
    assert events == [] and [type(p) for p in problems] == [problem]


def test_the_floor_travels_only_when_known_and_must_be_an_integer():
    assert "floor" not in orjson.loads(_event().encode())
    assert orjson.loads(_event(floor=0).encode())["floor"] == 0
    with pytest.raises(MalformedEvent, match="floor must be an integer"):
        JudgmentEvent.decode(_event(floor=3).encode().replace(b'"floor":3', b'"floor":"3"'))
