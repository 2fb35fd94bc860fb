"""The run assembler's bookkeeping, without Kafka: what a span, a tick and a done
record do to a run, and what a redelivery changes (nothing, or the same
judgment under the same name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from support.assembly_records import Message
from support.run_traffic import agent_run

from guardrail.agents.run_assembly import RunAssembler
from guardrail.formats.otlp import OtlpDecoder, request_from_bytes
from guardrail.assembly.runs.assembly import RunBook, RunHeader, RunLimits, due
from guardrail.assembly.runs.routing import RunRouter
from guardrail.assembly.runs.spans import RunSpan
from guardrail.config.settings import Settings
from guardrail.stream.telemetry import Telemetry


@dataclass
class Assembly:
    """A RunAssembler over a dict table, with the records it was given."""

    assembler: RunAssembler
    table: dict = field(default_factory=dict)
    offset: int = 0

    def send(self, kind: bytes, trace: str, value: bytes = b"") -> Any:
        self.offset += 1
        message = Message(trace.encode(), value, [("guardrail-run", kind)], offset=self.offset)
        return self.assembler.apply(SimpleNamespace(message=message)), message


def _assembly(**runs: Any) -> Assembly:
    settings = Settings(**{"run_settle_seconds": 1, **runs})
    runtime = SimpleNamespace(settings=settings, telemetry=Telemetry())
    table: dict = {}
    return Assembly(RunAssembler(runtime, table, "app-run-spans"), table)


def _run_spans(run) -> list[bytes]:
    decoder = OtlpDecoder(runs=RunRouter())
    return [span.to_bytes() for record in run.records
            for span in decoder._cases(request_from_bytes(record, {})).run_spans]


def _age(assembly: Assembly, trace: str, seconds: float) -> None:
    header = assembly.assembler.book.headers[trace]
    header.last_ms -= int(seconds * 1000)
    if header.closed_ms:
        header.closed_ms -= int(seconds * 1000)


def test_a_run_is_due_after_the_settle_time_and_judged_with_every_span():
    run = agent_run(tool="send_email", arguments={"to": "eve@evil.example"})
    assembly = _assembly()
    spans = _run_spans(run)
    for value in spans + spans:  # each span twice: a redelivered record changes nothing
        assembly.send(b"span", run.trace_id, value)
    header = assembly.assembler.book.headers[run.trace_id]
    assert header.spans == len(run.spans) == 4
    assert assembly.send(b"tick", run.trace_id)[0] is None  # not quiet long enough yet
    _age(assembly, run.trace_id, 2)
    judged, tick = assembly.send(b"tick", run.trace_id)
    case = orjson.loads(judged.value)
    assert case["case_id"] == f"{run.trace_id}:{run.root_span_id}"
    assert case["run"]["status"] == "complete" and case["run"]["spans"] == 4
    assert "eve@evil.example" in case["trajectory"]
    assert (judged.source.partition, judged.source.offset) == (tick.partition, tick.offset)
    # The same tick again (a crash before its ack): the same run under the same name.
    again = assembly.assembler.apply(SimpleNamespace(message=tick))
    assert again.value == judged.value and again.source == judged.source
    # Another tick while closing does nothing.
    assert assembly.send(b"tick", run.trace_id)[0] is None


def test_done_closes_the_run_drops_its_spans_and_later_spans_are_late():
    run = agent_run()
    assembly = _assembly()
    for value in _run_spans(run):
        assembly.send(b"span", run.trace_id, value)
    _age(assembly, run.trace_id, 2)
    assembly.send(b"tick", run.trace_id)
    assembly.send(b"done", run.trace_id)
    header = assembly.assembler.book.headers[run.trace_id]
    assert header.state == "closed"
    assert [k for k in assembly.table if k.startswith("s/")] == []
    assembly.send(b"span", run.trace_id, _run_spans(run)[0])
    assert header.late == 1 and assembly.assembler.book.spans_held == 0
    telemetry = assembly.assembler.telemetry.render().decode()
    assert 'guardrail_runs_total{outcome="late_span"} 1.0' in telemetry
    # Forgotten after the horizon: a tick then deletes the header.
    _age(assembly, run.trace_id, RunLimits().forget_after_ms / 1000 + 1)
    assembly.send(b"tick", run.trace_id)
    assert run.trace_id not in assembly.assembler.book.headers
    assert "h/" + run.trace_id not in assembly.table


def test_rebuild_restores_the_book_from_the_table():
    run = agent_run()
    assembly = _assembly()
    for value in _run_spans(run):
        assembly.send(b"span", run.trace_id, value)
    runtime = SimpleNamespace(settings=Settings(run_settle_seconds=1), telemetry=Telemetry())
    fresh = RunAssembler(runtime, assembly.table, "app-run-spans")
    fresh.rebuild()
    assert fresh.book.headers[run.trace_id].spans == 4
    assert fresh.book.spans_held == 4


class RecordingTable(dict):
    """A dict table that counts writes per key kind (``h`` headers, ``s`` spans)."""

    def __init__(self):
        super().__init__()
        self.writes = {"h": 0, "s": 0}

    def __setitem__(self, key, value):
        self.writes[key[0]] += 1
        super().__setitem__(key, value)


def test_a_batch_writes_each_runs_header_once_after_its_spans():
    run = agent_run(tools=3)
    runtime = SimpleNamespace(settings=Settings(run_settle_seconds=1), telemetry=Telemetry())
    table = RecordingTable()
    assembly = Assembly(RunAssembler(runtime, table, "app-run-spans"), table)
    spans = _run_spans(run)
    for value in spans:
        assembly.send(b"span", run.trace_id, value)
    assert table.writes == {"h": 0, "s": len(spans)}  # not yet: once, at the batch's end
    current = []
    assembly.assembler.write_headers(SimpleNamespace(_set_current_event=current.append))
    assert table.writes == {"h": 1, "s": len(spans)}
    assert [e.message.key for e in current] == [run.trace_id.encode()]  # the trace's partition
    assert RunHeader.from_bytes(table["h/" + run.trace_id].encode()).spans == len(spans)


def test_only_a_root_or_a_dropped_span_is_followed_by_a_header_write():
    """A span that changes only counts and times writes no header (a recovery
    recounts them from the spans): one changelog record per span, not two."""
    run = agent_run(tools=3)
    runtime = SimpleNamespace(settings=Settings(run_settle_seconds=1), telemetry=Telemetry())
    table = RecordingTable()
    assembly = Assembly(RunAssembler(runtime, table, "app-run-spans"), table)
    spans = [RunSpan.from_bytes(value) for value in _run_spans(run)]
    children = [span.to_bytes() for span in spans if span.parent_id is not None]
    roots = [span.to_bytes() for span in spans if span.parent_id is None]
    write_headers = assembly.assembler.write_headers
    stream = SimpleNamespace(_set_current_event=lambda event: None)
    for value in children:  # one batch per span, the worst case
        assembly.send(b"span", run.trace_id, value)
        write_headers(stream)
    assert table.writes == {"h": 0, "s": len(children)}
    assembly.send(b"span", run.trace_id, roots[0])
    write_headers(stream)
    assert table.writes == {"h": 1, "s": len(spans)}


def test_a_recovered_run_counts_its_spans_and_waits_its_settle_time_again():
    """The header was written at the root; later spans were not followed by a
    write. After a restart the run holds every span, and is not due at once
    (its quiet time starts at the recovery, not at the header's last write)."""
    run = agent_run(tools=2)
    spans = [RunSpan.from_bytes(value) for value in _run_spans(run)]
    ordered = [s for s in spans if s.parent_id is None] + [s for s in spans if s.parent_id]
    crashed = _assembly()
    stream = SimpleNamespace(_set_current_event=lambda event: None)
    for span in ordered:
        crashed.send(b"span", run.trace_id, span.to_bytes())
        crashed.assembler.write_headers(stream)
    written = RunHeader.from_bytes(crashed.table["h/" + run.trace_id].encode())
    assert written.spans == 1 and written.root_ms is not None
    written.last_ms -= 60_000  # the header's write was a minute before the crash
    crashed.table["h/" + run.trace_id] = written.to_bytes().decode()
    runtime = SimpleNamespace(settings=Settings(run_settle_seconds=1), telemetry=Telemetry())
    restarted = Assembly(RunAssembler(runtime, crashed.table, "app-run-spans"), crashed.table)
    restarted.assembler.rebuild()
    header = restarted.assembler.book.headers[run.trace_id]
    assert (header.spans, header.root_ms is not None) == (len(spans), True)
    assert restarted.send(b"tick", run.trace_id)[0] is None  # not yet: settle again
    _age(restarted, run.trace_id, 2)
    judged, _ = restarted.send(b"tick", run.trace_id)
    assert orjson.loads(judged.value)["run"]["spans"] == len(spans)


def test_spans_kept_without_their_headers_write_are_counted_and_the_root_still_marks_the_run():
    """A crash after a batch's span writes reached the changelog but before its
    header write did: the recovered book counts the spans, and the redelivered
    batch (duplicates now) still marks the root, so the run is judged complete."""
    run = agent_run()
    crashed = _assembly()
    spans = _run_spans(run)
    for value in spans:
        crashed.send(b"span", run.trace_id, value)  # no write_headers: the crash
    runtime = SimpleNamespace(settings=Settings(run_settle_seconds=1), telemetry=Telemetry())
    restarted = Assembly(RunAssembler(runtime, crashed.table, "app-run-spans"), crashed.table)
    restarted.assembler.rebuild()
    header = restarted.assembler.book.headers[run.trace_id]
    assert (header.spans, header.root_ms) == (len(spans), None)
    for value in spans:  # the unacked batch, redelivered
        restarted.send(b"span", run.trace_id, value)
    assert header.spans == len(spans) and header.root_ms is not None
    _age(restarted, run.trace_id, 2)
    judged, _ = restarted.send(b"tick", run.trace_id)
    case = orjson.loads(judged.value)
    assert case["run"]["status"] == "complete" and case["run"]["spans"] == len(spans)


def test_caps_truncate_a_run_and_memory_pressure_judges_the_quietest_early():
    run = agent_run(tools=10)  # 22 spans
    assembly = _assembly(run_max_spans=8)
    for value in _run_spans(run):
        assembly.send(b"span", run.trace_id, value)
    header = assembly.assembler.book.headers[run.trace_id]
    assert header.spans == 9 and header.dropped == 13  # 8 and the root, exported last
    assert due(header, now_ms=header.last_ms, limits=assembly.assembler.limits) == "truncated"
    # Without its root yet, a truncated run waits the settle time (1 s here) after
    # its last span, a dropped one too.
    rootless = agent_run(tools=10)
    spans = _run_spans(rootless)
    for value in spans[:-1]:
        assembly.send(b"span", rootless.trace_id, value)
    header = assembly.assembler.book.headers[rootless.trace_id]
    assert header.truncated and header.root_ms is None
    limits = assembly.assembler.limits
    assert due(header, now_ms=header.last_ms + 999, limits=limits) is None
    assert due(header, now_ms=header.last_ms + 1000, limits=limits) == "truncated"
    before = header.last_ms
    _age(assembly, rootless.trace_id, 2)
    assembly.send(b"span", rootless.trace_id, spans[-2])  # a duplicate of a dropped one
    assert header.last_ms > before - 2000 and header.dropped == 14
    # A runaway run that keeps sending is judged at the latest run_idle_seconds
    # after its first span.
    header.last_ms = header.first_ms + 180_000 - 10
    assert due(header, now_ms=header.first_ms + 179_999, limits=limits) is None
    assert due(header, now_ms=header.first_ms + 180_000, limits=limits) == "truncated"
    book = RunBook()
    quiet, busy = RunHeader.new("a" * 32, now_ms=0), RunHeader.new("b" * 32, now_ms=5)
    book.headers = {quiet.trace_id: quiet, busy.trace_id: busy}
    assert book.quietest_open()[:1] == [(quiet.trace_id, quiet)]


@pytest.mark.parametrize("root_ms, quiet_s, expected", [
    (None, 179, None), (None, 180, "idle"), (0, 4.9, None), (0, 5, "complete")])
def test_due(root_ms, quiet_s, expected):
    header = RunHeader(trace_id="t", root_ms=root_ms, last_ms=0)
    assert due(header, now_ms=int(quiet_s * 1000), limits=RunLimits()) == expected


def test_header_round_trip_and_garbage():
    header = RunHeader(trace_id="t", state="closing", tick=[1, 42], status="idle", spans=3)
    assert RunHeader.from_bytes(header.to_bytes()) == header
    with pytest.raises(ValueError, match="not a run header"):
        RunHeader.from_bytes(b"{nope")


def test_plain_chat_spans_are_not_claimed_by_runs():
    from support.run_traffic import chat_span_record

    record, _ = chat_span_record("hello")
    decoded = OtlpDecoder(runs=RunRouter())._cases(request_from_bytes(record, {}))
    assert decoded.run_spans == () and len(decoded.cases) == 1


def test_a_run_is_sampled_by_its_trace_id():
    from guardrail.judging.models import Case
    from guardrail.stream.envelope import InputMessage, Source
    from guardrail.stream.sampling import sample_id

    trace = {"trace_id": "ab" * 16, "span_id": "cd" * 8}
    source = Source("app-run-spans", 0, 7)
    run = InputMessage(case=Case(case_id="x:y", output="o"), trace=trace, run={"spans": 3})
    plain = InputMessage(case=Case(case_id="x:y", output="o"), trace=trace)
    assert sample_id(run, source) == "ab" * 16
    assert sample_id(plain, source) == "x:y"


def test_past_the_memory_cap_the_quietest_runs_are_ticked_to_be_judged_early():
    assembly = _assembly(run_memory_bytes=1_000_000)
    assembler = assembly.assembler
    for number, last_ms in enumerate((5_000, 1_000, 3_000)):  # 600 KB each, quiet for a while
        trace = f"{number:032x}"
        assembler.book.headers[trace] = RunHeader(trace_id=trace, first_ms=0, last_ms=last_ms,
                                                  bytes=600_000, spans=1)
        assembler.book.span_ids[trace] = {"s": 600_000}
    ticks = assembler.due_ticks(now_ms=6_000)  # none is due: no root, not idle yet
    # 1.8 MB held, 1 MB allowed: the two quietest go, the most recent stays.
    assert ticks == [(f"{1:032x}", b"force"), (f"{2:032x}", b"force")]
    assert assembler.ticks_to_send(6_000) == ticks and assembler.ticks_to_send(6_001) == []


def test_a_forced_tick_judges_an_open_run_as_far_as_it_goes_marked_idle():
    run = agent_run(with_root=False)
    assembly = _assembly()
    for value in _run_spans(run):
        assembly.send(b"span", run.trace_id, value)
    assert assembly.send(b"tick", run.trace_id)[0] is None  # not due
    judged, _ = assembly.send(b"tick", run.trace_id, b"force")
    case = orjson.loads(judged.value)
    assert case["run"]["status"] == "idle" and case["run"]["spans"] == 3
