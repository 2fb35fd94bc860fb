"""Items on their way to assembly, bundled per partition: what a bundle holds,
where it goes, and what an assembler makes of it (the same as of the items
sent alone)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import orjson
import pytest
from support.assembly_records import Message
from support.run_traffic import agent_run
from test_run_book import _age, _assembly, _run_spans

from guardrail.agents.judging import item_bundler
from guardrail.assembly.base import RUN_SPAN_HEADERS, TURN_HEADERS
from guardrail.config.settings import Settings
from guardrail.stream.item_bundles import BUNDLE_MAX_BYTES, bundle_items, read_bundle
from guardrail.stream.processing import Outgoing

SPANS, TURNS = "app-run-spans", "app-session-turns"
KINDS = {SPANS: RUN_SPAN_HEADERS[0], TURNS: TURN_HEADERS[0]}


def _partition_of(topic: str, key: bytes) -> int:
    return int(key.decode()[-1]) % 2  # the last digit: even keys to 0, odd to 1


def _span(key: str, value: str, timestamp_ms: int | None = None) -> Outgoing:
    return Outgoing(SPANS, key.encode(), value.encode(), timestamp_ms=timestamp_ms,
                    headers=RUN_SPAN_HEADERS)


def test_items_are_bundled_per_partition_in_their_order_after_the_other_records():
    result = Outgoing("results", b"r", b"{}")
    turn = Outgoing(TURNS, b"s1", b'{"turn":1}', headers=TURN_HEADERS)
    records = [_span("t1", '{"a":1}', 5), result, _span("t2", '{"b":2}', 9),
               _span("t1", '{"a":2}', 7), turn]
    out = bundle_items(records, kinds=KINDS, partition_of=_partition_of)
    assert out[0] == result and len(out) == 4
    bundles = {(r.topic, r.partition): r for r in out[1:]}
    odd = bundles[(SPANS, 1)]
    assert read_bundle(odd.value) == [("t1", b'{"a":1}'), ("t1", b'{"a":2}')]
    assert odd.headers == (("guardrail-run", b"items"),) and odd.key is None
    assert odd.timestamp_ms == 7  # the latest of its items
    assert read_bundle(bundles[(SPANS, 0)].value) == [("t2", b'{"b":2}')]
    assert read_bundle(bundles[(TURNS, 1)].value) == [("s1", b'{"turn":1}')]
    assert bundles[(TURNS, 1)].headers == (("guardrail-session", b"items"),)


def test_items_go_alone_when_the_partition_is_unknown_or_the_record_is_no_item():
    tick = Outgoing(SPANS, b"t1", b"", headers=(("guardrail-run", b"tick"),))
    span = _span("t3", "{}")
    unknown = bundle_items([span, tick], kinds=KINDS, partition_of=lambda topic, key: None)
    assert unknown == [span, tick]
    assert bundle_items([tick], kinds=KINDS, partition_of=_partition_of) == [tick]
    assert bundle_items([span], kinds={}, partition_of=_partition_of) == [span]
    # Not UTF-8 text: it cannot ride in a JSON bundle, so it goes alone as before.
    binary = Outgoing(SPANS, b"t5", b"\xff\xfe", headers=RUN_SPAN_HEADERS)
    assert bundle_items([binary], kinds=KINDS, partition_of=_partition_of) == [binary]


def test_a_bundle_is_closed_before_it_passes_its_size_limit():
    big = "x" * (BUNDLE_MAX_BYTES // 3)
    records = [_span("t1", f'"{big}{n}"') for n in range(7)]
    out = bundle_items(records, kinds=KINDS, partition_of=_partition_of)
    sizes = [len(read_bundle(r.value)) for r in out]
    assert sizes == [2, 2, 2, 1]
    assert all(len(r.value) < BUNDLE_MAX_BYTES + 1000 for r in out)
    values = [v for r in out for _, v in read_bundle(r.value)]
    assert values == [r.value for r in records]  # every item once, in order
    # One item past the limit still goes, alone in its bundle.
    huge = bundle_items([_span("t1", '"' + "y" * BUNDLE_MAX_BYTES + '"')], kinds=KINDS,
                        partition_of=_partition_of)
    assert len(huge) == 1 and len(read_bundle(huge[0].value)) == 1


@pytest.mark.parametrize("value", [b"not json", b'{"v":2,"items":[]}', b'[1,2]',
                                   b'{"v":1,"items":[["k",1]]}', b'{"v":1,"items":[["k"]]}'])
def test_a_value_that_is_no_bundle_of_this_release_is_refused_whole(value):
    with pytest.raises(ValueError):
        read_bundle(value)


def test_the_assembler_applies_a_bundle_as_the_items_one_by_one():
    runs = [agent_run(), agent_run(tool="send_email")]
    alone, bundled = _assembly(), _assembly()
    items = [(run.trace_id, span) for run in runs for span in _run_spans(run)]
    for trace, span in items:
        alone.send(b"span", trace, span)
    records = [_span(trace, span.decode()) for trace, span in items + items[:3]]  # 3 twice
    for bundle in bundle_items(records, kinds=KINDS, partition_of=lambda topic, key: 0):
        bundled.offset += 1
        bundled.assembler.apply(SimpleNamespace(message=Message(
            None, bundle.value, list(bundle.headers), offset=bundled.offset)))
    assert bundled.table == alone.table
    for run in runs:
        times = dict.fromkeys(("first_ms", "last_ms", "root_ms"), 0)  # clocks differ
        assert replace(bundled.assembler.book.headers[run.trace_id], **times) == \
            replace(alone.assembler.book.headers[run.trace_id], **times)
        _age(bundled, run.trace_id, 2)
        case = orjson.loads(bundled.send(b"tick", run.trace_id)[0].value)
        assert case["run"]["spans"] == len(run.spans)


def test_an_unreadable_bundle_is_skipped_and_said(caplog):
    assembly = _assembly()
    message = Message(None, b'{"v":9,"items":[]}', [("guardrail-run", b"items")], offset=4)
    assert assembly.assembler.apply(SimpleNamespace(message=message)) is None
    assert "cannot read" in caplog.text and "v=9" in caplog.text
    assert assembly.table == {}


def test_the_worker_bundles_with_assembly_bundles_on_and_sends_alone_without_metadata():
    judge = SimpleNamespace(run_spans_topic=SPANS, session_turns_topic=None)

    def runtime(on: bool, key_partition) -> SimpleNamespace:
        producer = SimpleNamespace(key_partition=key_partition)
        return SimpleNamespace(settings=Settings(assembly_bundles=on),
                               app=SimpleNamespace(producer=producer))

    def no_metadata(topic, key):
        raise TypeError("'NoneType' object is not iterable")  # aiokafka before metadata

    records = [_span("t1", "{}"), _span("t2", "{}")]
    one = lambda topic, key: SimpleNamespace(partition=1)
    assert item_bundler(runtime(False, one), judge)(records) == records
    out = item_bundler(runtime(True, one), judge)(records)
    assert len(out) == 1 and out[0].partition == 1 and len(read_bundle(out[0].value)) == 2
    assert item_bundler(runtime(True, no_metadata), judge)(records) == records
