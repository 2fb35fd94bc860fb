"""The records reference cannot lie: records made by the real producers (the
worker's batch processing against the stand-in judge, the window counter, the
budget governor, the agreement tracker, the review labels) validate against the
models the page is generated from, unknown keys refused and nothing lost on the
way back, and every documented field turns up in some real record."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ValidationError
from support.otel_traffic import genai_spans, otlp_proto
from support.records import (T0, agreement_tracker, budget_governor, feed_labels,
                             judgment_event, polite_judge_labels, spend_at, versioned_event,
                             window_counter)

from guardrail.reference.records import RECORDS, records_page
from guardrail.review.records import LabelRecord, ReviewItem
from guardrail.stream.alert_schemas import AgreementAlert, BudgetAlert, RegressionAlert
from guardrail.stream.envelope import Source
from guardrail.stream.events import decode_events
from guardrail.stream.processing import MessageJudge, RawMessage
from guardrail.stream.schemas import DlqRecord, JudgmentBundle, JudgmentRecord, ResultRecord

TRACEPARENT = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
DETAILED = {"scoring_mode": "scale_1_5", "include_reasoning": True, "include_probability": True}


def described(model: type[BaseModel], value: bytes | dict[str, Any]) -> dict[str, Any]:
    """Validate a record as its topic carries it (JSON, strict, unknown keys
    refused) and check the model gives back exactly what it read."""
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    record = orjson.loads(raw)
    parsed = model.model_validate_json(raw, strict=True)
    assert parsed.model_dump(mode="json", exclude_unset=True) == record
    return record


def assert_every_field_seen(model: type[BaseModel], records: list[dict[str, Any]]) -> None:
    seen = {key for record in records for key in record}
    documented = {name for name, field in model.model_fields.items() if not field.exclude}
    assert documented - seen == set(), f"{model.__name__} documents fields never written"


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.anchor)
def test_each_example_on_the_page_is_a_valid_record_of_its_kind(record):
    described(record.model, record.example)
    page = records_page()
    assert orjson.dumps(record.example, option=orjson.OPT_INDENT_2).decode() in page
    for name, field in record.model.model_fields.items():
        assert (f"| `{name}` |" in page) is not field.exclude


def test_a_key_the_models_do_not_describe_is_refused_and_null_is_no_absent_key():
    example = dict(RECORDS[0].example)
    with pytest.raises(ValidationError, match="extra"):
        described(ResultRecord, {**example, "new_field": 1})
    with pytest.raises(ValidationError, match="never null"):
        described(ResultRecord, {**example, "trace": None})


def test_the_overview_names_each_topic_setting_with_its_default():
    page = records_page()
    for record in RECORDS:
        assert (f"| [{record.title}](#{record.anchor}) | {record.setting_link} | "
                f"`{record.default_topic}` |") in page
    assert "| [`results_topic`](settings.md#kafka) | `redteam-results` |" in page


def _run_case() -> bytes:
    """A judged agent run's case, as the run assembler hands it to judging."""
    from support.run_traffic import agent_run

    from guardrail.formats.otlp import OtlpDecoder
    from guardrail.assembly.runs.case import run_case
    from guardrail.assembly.runs.routing import RunRouter

    decoder = OtlpDecoder(runs=RunRouter())
    spans = [s for r in agent_run().records for s in decoder.decode(r, {}).run_spans]
    return orjson.dumps(run_case(spans, status="complete"))


def _session_case() -> bytes:
    """A closing session judgment's case, as the session assembler hands it to judging."""
    from guardrail.assembly.sessions.book import SessionHeader
    from guardrail.assembly.sessions.gathering import SessionGathering
    from guardrail.assembly.sessions.turns import Turn
    from guardrail.config.settings import Settings
    from guardrail.stream.telemetry import Telemetry

    turns = [Turn(turn_id=f"t{n}", started_ms=1_714_564_800_000 + n, user=f"question {n}",
                  answer=f"answer {n}", trace_id=f"{n:032x}", span_id=f"{n:016x}",
                  metadata={"model": "m", "model_version": "v2"}) for n in (1, 2)]
    header = SessionHeader(session_id="chat-1", turns=2, judging_turns=2, status="idle")
    gathering = SessionGathering(Settings().sessions, Telemetry())
    return orjson.dumps(gathering.case("chat-1", header, turns))


async def _worker_records(settings, evaluators, batch) -> dict[str, list[Any]]:
    judge = MessageJudge.from_settings(evaluators(settings), settings)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for outgoing in await judge.process(batch):
        by_topic[outgoing.topic].append(outgoing)
    return by_topic


async def test_what_the_worker_publishes_is_what_the_page_describes(make_settings, evaluators,
                                                                     tmp_path):
    settings = make_settings(review_users_file=str(tmp_path / "users"), review_rate_safe=1.0)
    k, r = settings.kafka, settings.review
    headers = (("traceparent", TRACEPARENT), ("bin", b"\xff\x00"))
    batch = [
        RawMessage(orjson.dumps({"case_id": "c1", "output": "you idiot", "input": "hi",
                                 "metadata": {"model": "m", "model_version": "v2"},
                                 "timestamp": "2024-05-01T12:00:00Z"}),
                   Source("in", 0, 1, timestamp_ms=1, key=b"c1", headers=headers)),
        RawMessage(orjson.dumps({"output": "Happy to help.", "redteam": DETAILED}),
                   Source("in", 0, 2, key=b"\xff")),
        RawMessage(b"{broken", Source("in", 1, 3, key=b"k3", headers=headers)),
        RawMessage(b"x" * 300_000, Source("in", 1, 4)),  # too big to travel whole
        RawMessage(_run_case(), Source("app-run-spans", 0, 9, key=b"run")),  # an agent run
        RawMessage(_session_case(), Source("app-session-turns", 0, 5, key=b"chat-1")),
    ]
    out = await _worker_records(settings, evaluators, batch)
    results = [described(ResultRecord, o.value) for o in out[k.results_topic]]
    assert [o.key for o in out[k.results_topic]] == [res["case_id"].encode()
                                                     for res in results]
    assert results[0]["trace"]["trace_id"] == TRACEPARENT.decode()[3:35]
    assert results[1]["key"].startswith("b64:")
    detailed = results[1]["metrics"][0]["result"][0]
    assert {"severity", "reasoning", "probability_unsafe"} <= set(detailed)
    dlq = [described(DlqRecord, o.value) for o in out[k.dlq_topic]]
    assert [o.key for o in out[k.dlq_topic]] == [b"k3", None]
    assert "value_base64" in dlq[0] and "value_excerpt" in dlq[1]
    bundles = [described(JudgmentBundle, o.value) for o in out[k.judgments_topic]]
    events = [event for bundle in bundles for event in bundle["events"]]
    for outgoing in out[k.judgments_topic]:
        decoded, problems = decode_events(outgoing.value)
        assert problems == [] and {e.partition_key(settings.windows.version_label)
                                   for e in decoded} == {outgoing.key}
        assert outgoing.timestamp_ms == decoded[0].event_time_ms
    items = [described(ReviewItem, o.value) for o in out[r.review_topic]]
    assert [o.key for o in out[r.review_topic]] == [i["case_id"].encode() for i in items]
    assert len(items) == 4  # every metric of the four results chosen (rates 1.0)
    assert results[2]["run"]["status"] == "complete" and items[2]["run"] == results[2]["run"]
    assert results[3]["case_id"] == "chat-1#2" and results[3]["session"]["status"] == "closed"
    assert results[3]["trace"] == {"trace_id": f"{2:032x}", "span_id": f"{2:016x}"}
    labels = []
    for raw in out[r.review_topic]:
        item = ReviewItem.decode(raw.value)
        for metric in item.metrics:
            label = LabelRecord.from_choice(item, metric.name, "disagree_unsafe",
                                            reviewer="ana", note="rude")
            assert label.key() == f"{item.case_id}|{metric.name}".encode()
            labels.append(described(LabelRecord, label.encode()))
    assert_every_field_seen(ResultRecord, results)
    assert_every_field_seen(DlqRecord, dlq)
    assert_every_field_seen(JudgmentBundle, bundles)
    assert_every_field_seen(JudgmentRecord, events)
    assert_every_field_seen(ReviewItem, items)
    assert_every_field_seen(LabelRecord, labels)


async def test_many_case_records_name_each_case_by_its_index(make_settings, evaluators):
    settings = make_settings(input_format="otlp")
    spans = genai_spans(["Happy to help.", "Go away, idiot."])
    out = await _worker_records(settings, evaluators, [RawMessage(otlp_proto(spans),
                                                                  Source("in", 0, 5))])
    results = [described(ResultRecord, o.value) for o in out[settings.kafka.results_topic]]
    assert [r["source"]["index"] for r in results] == [0, 1]
    assert all(set(r["trace"]) == {"trace_id", "span_id"} for r in results)
    events = [event for o in out[settings.kafka.judgments_topic]
              for event in described(JudgmentBundle, o.value)["events"]]
    assert {e["source"]["index"] for e in events} == {0, 1}
    # A record of two choices whose shared timestamp is bad: one DLQ record per case.
    settings = make_settings(input_format="openai")
    choices = [{"index": i, "finish_reason": "stop",
                "message": {"role": "assistant", "content": f"answer {i}"}} for i in range(2)]
    logged = {"response": {"id": "chatcmpl-9", "object": "chat.completion", "model": "gpt-4o",
                           "created": 1718000000, "choices": choices}, "timestamp": "yesterday"}
    out = await _worker_records(settings, evaluators, [RawMessage(orjson.dumps(logged),
                                                                  Source("in", 0, 6))])
    dlq = [described(DlqRecord, o.value) for o in out[settings.kafka.dlq_topic]]
    assert [d["source"]["index"] for d in dlq] == [0, 1]


def test_regression_alerts_against_a_version_and_earlier_windows_are_described():
    versioned = window_counter(alert_rules=[{"metric": "*", "max_unsafe_rate": None,
                                       "min_judgments": 20, "baseline_windows": 0,
                                       "baseline_version": "v1"}],
                         group_labels=["model", "model_version"])
    for offset in range(100):
        versioned.apply(versioned_event(offset, "v1", "unsafe" if offset < 3 else "safe"), 1000.0)
    for offset in range(40):
        versioned.apply(versioned_event(offset, "v2", "unsafe" if offset % 2 else "safe"), 1000.0)
    previous = window_counter()  # the default rule: 20% and the previous 3 windows
    for offset in range(40):
        previous.apply(judgment_event(offset, "unsafe" if offset % 2 else "error"), 1000.0)
    alerts = [described(RegressionAlert, a)
              for a in versioned.dispatcher.alerts + previous.dispatcher.alerts]
    assert [a["baseline"]["kind"] for a in alerts] == ["version", "previous_windows"]
    assert_every_field_seen(RegressionAlert, alerts)


def test_budget_alerts_both_ways_are_described():
    governor, clock, alerts, _ = budget_governor(sample_rate=0.8, budget_usd_per_hour=1.0,
                                           budget_min_sample_rate=0.1, budget_step_seconds=10)
    spend_at(governor, clock, 1000, 1.5)
    for at in range(4610, 4660, 10):  # over an hour later: back up to the sample rate
        spend_at(governor, clock, at, 0.01)
    assert [described(BudgetAlert, a)["state"] for a in alerts] == ["throttled", "restored"]


def test_agreement_alerts_are_described(tmp_path):
    now = [T0 / 1000 + 60]
    tracker, dispatcher, _ = agreement_tracker(tmp_path, now)
    feed_labels(tracker, [], caught_up=True)
    feed_labels(tracker, polite_judge_labels(0, 10, ms=T0))
    (alert,) = dispatcher.sent
    described(AgreementAlert, alert)


async def test_alerts_are_keyed_as_the_page_says():
    from guardrail.agents.app import _alerts_sender
    from guardrail.config.settings import load_settings

    sent = []

    async def send(key, value):
        sent.append(key)

        async def acked():
            return None
        return acked()

    app = SimpleNamespace(topic=lambda *args, **kwargs: SimpleNamespace(send=send))
    send_alert = _alerts_sender(app, load_settings(environ={}))
    by_anchor = {r.anchor: r for r in RECORDS}
    for anchor in ("regression-alert", "budget-alert", "agreement-alert"):
        await send_alert(by_anchor[anchor].example)
    assert sent == [b"toxicity", b"budget", b"toxicity"]
    assert by_anchor["budget-alert"].key == "`budget`"
