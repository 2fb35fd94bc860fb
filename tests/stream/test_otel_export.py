"""Verdicts go back into tracing as OTLP ``gen_ai.evaluation.result`` log
records: the real SDK pipeline and OTLP/HTTP exporter against a small OTLP
receiver on loopback, and an endpoint that is down, refusing or hanging; a
conversation's verdicts carry its id, a session's go on its latest turn."""

from __future__ import annotations

import asyncio
import gzip
import time

import orjson
import pytest
from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (ExportLogsServiceRequest,
                                                                    ExportLogsServiceResponse)
from opentelemetry.sdk.trace import TracerProvider

from guardrail._processes import free_port
from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.judging.models import Case, CostEstimate, JudgeVerdict, MetricResult, RedteamMetrics
from guardrail.assembly.sessions.book import SessionHeader
from guardrail.assembly.sessions.gathering import SessionGathering
from guardrail.assembly.sessions.settings import SessionSettings
from guardrail.assembly.sessions.turns import Turn
from guardrail.stream.envelope import InputMessage, Source
from guardrail.stream.otel_export import (EVENT_NAME, EvaluationExporter,
                                          conversation_attributes, logs_url)
from guardrail.stream.processing import MessageJudge, RawMessage
from guardrail.stream.telemetry import Telemetry

TRACE = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}


class Receiver:
    """An OTLP/HTTP logs endpoint: keeps each request, answers ``status``;
    while ``hold`` is set it does not answer at all."""

    def __init__(self) -> None:
        self.requests: list[ExportLogsServiceRequest] = []
        self.status = 200
        self.hold: asyncio.Event | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if body[:2] == b"\x1f\x8b":  # gzip, unless aiohttp already inflated it
            body = gzip.decompress(body)
        self.requests.append(ExportLogsServiceRequest.FromString(body))
        if self.hold is not None:
            await self.hold.wait()
        return web.Response(status=self.status, content_type="application/x-protobuf",
                            body=ExportLogsServiceResponse().SerializeToString())

    def records(self) -> list:
        return [(rl.resource, record) for req in self.requests for rl in req.resource_logs
                for sl in rl.scope_logs for record in sl.log_records]


@pytest.fixture
async def receiver():
    rcv = Receiver()
    app = web.Application()
    app.router.add_post("/v1/logs", rcv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    rcv.url = f"http://{host}:{port}"
    yield rcv
    if rcv.hold is not None:
        rcv.hold.set()
    await runner.cleanup()


def _judged() -> RedteamMetrics:
    return RedteamMetrics(metrics=[
        MetricResult(name="toxicity", score=0.0, probability_unsafe=0.93, result=[JudgeVerdict(
            verdict="UNSAFE", passed=False, violations=["insult", "threat"],
            evidence_spans=["you clown"])]),
        MetricResult(name="bias", score=1.0, result=[JudgeVerdict(verdict="SAFE", passed=True)]),
    ], cost=CostEstimate())


def _failed() -> RedteamMetrics:
    return RedteamMetrics(metrics=[MetricResult(name="pii", score=None,
                                                error="judge answered no JSON")],
                          cost=CostEstimate())


def _attrs(record) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in record.attributes}


def _count(telemetry: Telemetry, name: str, **labels: str) -> float:
    return telemetry.registry.get_sample_value(name, labels) or 0.0


async def test_each_metric_becomes_an_evaluation_record_on_the_judged_span(receiver):
    telemetry = Telemetry()
    exporter = EvaluationExporter(endpoint=receiver.url, telemetry=telemetry,
                                  service_name="guardrail-test", judge_model="openai/gpt-4o-mini")
    # Inside an unrelated active span: a record without a trace must not take its ids.
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("worker-loop"):
        exporter.export(_judged(), TRACE, case_id="c1", event_time_ms=1_700_000_000_000,
                        attributes={"topic": "model-outputs"})
        exporter.export(_failed(), None, case_id="c2", event_time_ms=None)
    await exporter.aclose()

    records = receiver.records()
    assert len(records) == 3
    resource = {kv.key: kv.value.string_value for kv in records[0][0].attributes}
    assert resource["service.name"] == "guardrail-test"
    by_name = {_attrs(r)["gen_ai.evaluation.name"]: r for _, r in records}
    for record in by_name.values():
        assert record.event_name == EVENT_NAME
        assert record.severity_number == 9 and record.severity_text == "INFO"  # INFO
        assert record.time_unix_nano > 0 and record.observed_time_unix_nano > 0

    toxicity, bias, pii = by_name["toxicity"], by_name["bias"], by_name["pii"]
    for record in (toxicity, bias):
        assert record.trace_id == bytes.fromhex(TRACE["trace_id"])
        assert record.span_id == bytes.fromhex(TRACE["span_id"])
    assert _attrs(toxicity) == {
        "gen_ai.evaluation.name": "toxicity", "gen_ai.evaluation.score.value": 0.0,
        "gen_ai.evaluation.score.label": "UNSAFE",
        "gen_ai.evaluation.explanation": "insult; threat",
        "guardrail.probability_unsafe": 0.93, "guardrail.judge_model": "openai/gpt-4o-mini",
        "guardrail.case_id": "c1", "guardrail.event_time_ms": 1_700_000_000_000,
        "guardrail.topic": "model-outputs"}
    assert _attrs(bias)["gen_ai.evaluation.score.value"] == 1.0
    assert _attrs(bias)["gen_ai.evaluation.score.label"] == "SAFE"
    assert "gen_ai.evaluation.explanation" not in _attrs(bias)

    assert pii.trace_id == b"" and pii.span_id == b""
    assert pii.body.string_value == "judge answered no JSON"
    assert _attrs(pii)["error.type"] == "judge_error"
    assert not {"gen_ai.evaluation.score.value", "gen_ai.evaluation.score.label"} & set(_attrs(pii))
    assert _count(telemetry, "guardrail_otlp_exported_records_total") == 3
    assert _count(telemetry, "guardrail_otlp_export_failures_total") == 0


def test_endpoint_with_or_without_the_logs_path():
    assert logs_url("http://collector:4318") == "http://collector:4318/v1/logs"
    assert logs_url("http://collector:4318/") == "http://collector:4318/v1/logs"
    assert logs_url("http://collector:4318/v1/logs") == "http://collector:4318/v1/logs"


async def test_a_bad_trace_is_exported_without_one(receiver):
    exporter = EvaluationExporter(endpoint=f"{receiver.url}/v1/logs")
    exporter.export(_judged(), {"trace_id": "0x" + "1" * 30, "span_id": "nothex!!nothex!!"},
                    case_id="c3", event_time_ms=None)
    await exporter.aclose()
    records = [r for _, r in receiver.records()]
    assert len(records) == 2 and all(r.trace_id == b"" and r.span_id == b"" for r in records)


async def test_a_down_endpoint_costs_the_caller_nothing_and_is_counted():
    telemetry = Telemetry()
    exporter = EvaluationExporter(endpoint=f"http://127.0.0.1:{free_port()}",
                                  telemetry=telemetry, timeout_s=1.0)
    started = time.monotonic()
    for i in range(50):
        exporter.export(_judged(), TRACE, case_id=f"c{i}", event_time_ms=None)
    assert time.monotonic() - started < 0.5
    started = time.monotonic()
    await exporter.aclose(timeout_s=3.0)
    assert time.monotonic() - started < 5.0
    assert _count(telemetry, "guardrail_otlp_export_failures_total") >= 1
    assert _count(telemetry, "guardrail_otlp_dropped_records_total", reason="export_failed") == 100
    assert _count(telemetry, "guardrail_otlp_exported_records_total") == 0


async def test_an_endpoint_answering_503_is_counted_as_failed(receiver):
    receiver.status = 503
    telemetry = Telemetry()
    exporter = EvaluationExporter(endpoint=receiver.url, telemetry=telemetry, timeout_s=1.0)
    exporter.export(_judged(), TRACE, case_id="c1", event_time_ms=None)
    started = time.monotonic()
    await exporter.aclose(timeout_s=3.0)
    assert time.monotonic() - started < 5.0
    assert receiver.requests  # it did reach the endpoint
    assert _count(telemetry, "guardrail_otlp_export_failures_total") == 1
    assert _count(telemetry, "guardrail_otlp_dropped_records_total", reason="export_failed") == 2


async def test_a_hanging_endpoint_does_not_hold_the_shutdown(receiver):
    receiver.hold = asyncio.Event()
    exporter = EvaluationExporter(endpoint=receiver.url, timeout_s=30.0)
    exporter.export(_judged(), TRACE, case_id="c1", event_time_ms=None)
    started = time.monotonic()
    await exporter.aclose(timeout_s=1.0)
    assert time.monotonic() - started < 3.0
    assert len(receiver.requests) == 1  # the flush was tried, then given up on
    exporter.export(_judged(), TRACE, case_id="c2", event_time_ms=None)  # closed: counted
    assert _count(exporter.telemetry, "guardrail_otlp_dropped_records_total",
                  reason="shutdown") == 2


async def test_a_full_queue_drops_and_counts_instead_of_waiting():
    telemetry = Telemetry()
    exporter = EvaluationExporter(endpoint=f"http://127.0.0.1:{free_port()}",
                                  telemetry=telemetry, timeout_s=1.0, max_queue_size=3,
                                  schedule_delay_ms=60_000)
    exporter.export(_judged(), TRACE, case_id="c1", event_time_ms=None)  # 2 of 3 slots
    exporter.export(_judged(), TRACE, case_id="c2", event_time_ms=None)  # does not fit
    assert _count(telemetry, "guardrail_otlp_dropped_records_total", reason="queue_full") == 2
    await exporter.aclose(timeout_s=3.0)
    assert _count(telemetry, "guardrail_otlp_dropped_records_total", reason="export_failed") == 2


def _turn(number: int) -> Turn:
    """Turn ``number`` of conversation chat-7, each in its own trace."""
    return Turn(turn_id=f"t{number}", started_ms=1_700_000_000_000 + number * 1000,
                user=f"Question {number}?", answer=f"Answer {number}.",
                trace_id=f"{number:032x}", span_id=f"{number:016x}",
                metadata={"model_version": "v4"})


def _session_judgment(turns: list[Turn]) -> bytes:
    """The case the session assembler judges after ``turns`` (trigger every_n)."""
    gathering = SessionGathering(SessionSettings(), Telemetry())
    header = SessionHeader.new("chat-7", now_ms=0)
    for turn in turns:
        gathering.add(header, turn, now_ms=0, size=100)
    header.status = "every_n"
    gathering.start(header)
    return orjson.dumps(gathering.case("chat-7", header, turns))


async def test_conversations_are_findable_from_their_turns_and_latest_trace(
        receiver, make_settings):
    """Through the worker's MessageJudge: a turn's events carry its conversation id;
    a session judgment's go on its latest turn's span with the session block."""
    settings = make_settings(judge_max_retries=0)
    turns = [_turn(n) for n in (1, 2, 3)]
    exporter = EvaluationExporter(endpoint=receiver.url)
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation)
    judge = MessageJudge.from_settings(evaluator, settings, exporter=exporter)
    turn_case = {"case_id": "t3", "conversation_id": "chat-7", "input": "Question 3?",
                 "output": "Answer 3.", "trace": {"trace_id": turns[2].trace_id,
                                                  "span_id": turns[2].span_id}}
    batch = [RawMessage(value, Source("in", 0, i, timestamp_ms=1_700_000_000_000))
             for i, value in enumerate([orjson.dumps(turn_case), _session_judgment(turns),
                                        orjson.dumps({"case_id": "solo", "output": "Hi"})])]
    await judge.process(batch)
    await evaluator.aclose()
    await exporter.aclose()

    by_case: dict[str, list] = {}
    for _, record in receiver.records():
        by_case.setdefault(_attrs(record)["guardrail.case_id"], []).append(record)
    assert set(by_case) == {"t3", "chat-7#3", "solo"}
    for record in by_case["t3"]:
        assert record.span_id == bytes.fromhex(turns[2].span_id)
        assert _attrs(record)["gen_ai.conversation.id"] == "chat-7"
        assert not [key for key in _attrs(record) if key.startswith("guardrail.session.")]
    assert {_attrs(r)["gen_ai.evaluation.name"] for r in by_case["chat-7#3"]} >= {
        "multi_turn_jailbreak", "conversation_harm"}
    for record in by_case["chat-7#3"]:  # on the latest turn's span, in its trace
        assert record.trace_id == bytes.fromhex(turns[-1].trace_id)
        assert record.span_id == bytes.fromhex(turns[-1].span_id)
        attrs = _attrs(record)
        assert {key: attrs[key] for key in attrs if "session" in key or "conversation" in key
                } == {"gen_ai.conversation.id": "chat-7", "guardrail.session.trigger": "every_n",
                      "guardrail.session.status": "open", "guardrail.session.turns": 3,
                      "guardrail.session.traces": 3}
    assert all("gen_ai.conversation.id" not in _attrs(r) for r in by_case["solo"])


def test_conversation_attributes_of_a_message():
    plain = InputMessage(case=Case(output="Hi"))
    assert conversation_attributes(plain) == {}
    turn = InputMessage(case=Case(output="Hi"), session_id="chat-7")
    assert conversation_attributes(turn) == {"gen_ai.conversation.id": "chat-7"}
    closed = InputMessage(case=Case(output="Hi"), session={
        "id": "chat-7", "turns": 4, "traces": 2, "status": "truncated", "trigger": "idle",
        "flagged_turns": [2]})
    assert conversation_attributes(closed) == {
        "gen_ai.conversation.id": "chat-7", "guardrail.session.trigger": "idle",
        "guardrail.session.status": "truncated", "guardrail.session.turns": 4,
        "guardrail.session.traces": 2}
