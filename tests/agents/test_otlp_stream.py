"""OpenTelemetry spans in, verdicts out and back into tracing, on the real worker.

A real app (the OpenAI client, instrumented by the official OpenTelemetry
OpenAI instrumentation with content on the span) asks a local model; its spans
are encoded by the real OTLP encoder and published as the Collector's kafka
exporter does. The worker (``input_format=otlp``) judges exactly the GenAI
spans, and exports one ``gen_ai.evaluation.result`` log record per metric to
an OTLP/HTTP receiver.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from support.harness import OtlpLogSink, StreamEnv, consume, produce
from support.otel_traffic import (chunks, genai_spans, http_span, openai_app_spans, otlp_json,
                                  otlp_proto, span_ids)

from guardrail.local.rule_judge import ContentReply, JudgeServer

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

ANSWERS = {"v1": ["Open Settings, then Security, then Reset password.",
                  "Your order ships within two days."],
           "v2": ["Read the manual, you idiot.", "Orders ship within two days."]}


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return response.read().decode()


@pytest.fixture(params=["official", "openinference"])
def app_spans(request, monkeypatch):
    """GenAI spans of the app for v1 and v2 (content captured on the span), from
    the official OpenTelemetry instrumentation or OpenInference."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    spans = {}
    with JudgeServer() as model:  # the app's model, not the judge
        for version, answers in ANSWERS.items():
            model.script(*(ContentReply(text) for text in answers))
            spans[version] = openai_app_spans(model.api_base, ["How do I reset my password?",
                                                               "When does my order ship?"],
                                              instrumentation=request.param,
                                              version=version, model="shop-model")
    return spans


@pytest.mark.both_brokers
def test_worker_judges_exactly_the_genai_spans_and_exports_verdicts_to_tracing(
        kafka_bootstrap, thread_judge, tmp_path, app_spans):
    thread_judge.reset()
    genai = app_spans["v1"] + app_spans["v2"]
    assert len(genai) == 4
    records = [(None, otlp_proto(app_spans["v1"] + [http_span()]), None),  # otlp_proto
               (None, otlp_json(app_spans["v2"] + [http_span(version="v2")]), None),  # otlp_json
               (None, otlp_proto([http_span()]), None)]  # nothing to judge
    with OtlpLogSink() as sink:
        env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, input_format="otlp",
                        otlp_endpoint=sink.url)
        try:
            assert env.cli("produce", "--input", "/dev/null").returncode == 0
            asyncio.run(produce(env.bootstrap, env.topic("input"), records))
            worker = env.start_worker()
            results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=4,
                                          timeout=120, settle=2))
            deadline = time.monotonic() + 30
            while len(sink.log_records()) < 8 and time.monotonic() < deadline:
                time.sleep(0.3)
            rates = json.loads(_get(worker.web_port, "/rates"))["rates"]
            metrics = _get(worker.web_port, "/metrics")
        finally:
            env.stop_workers()
        logs = env.logs()
    expected = {":".join(span_ids(s)) for s in genai}
    assert sorted(r["case_id"] for r in results) == sorted(expected), logs[-3000:]
    by_id = {r["case_id"]: r for r in results}
    for span in genai:
        trace_id, span_id = span_ids(span)
        result = by_id[f"{trace_id}:{span_id}"]
        assert result["trace"] == {"trace_id": trace_id, "span_id": span_id}
        assert result["metadata"]["model"] == "shop-model"
        assert result["metadata"]["service"] == "chat-app"
    verdicts = {(r["metadata"]["model_version"], r["metrics"][1]["result"][0]["verdict"])
                for r in results}
    assert verdicts == {("v1", "SAFE"), ("v2", "SAFE"), ("v2", "UNSAFE")}
    # The two spans of one record share its offset and differ by their index.
    first = [by_id[":".join(span_ids(s))]["source"] for s in app_spans["v1"]]
    assert first[0]["offset"] == first[1]["offset"] and first[0]["partition"] == \
        first[1]["partition"] and {first[0]["index"], first[1]["index"]} == {0, 1}
    # Windows count the spans under their model and version.
    toxicity = {r["group"]: (r["total"], r["unsafe"]) for r in rates if r["metric"] == "toxicity"}
    assert toxicity == {"model=shop-model,model_version=v1,prompt_version=-": (2, 0),
                        "model=shop-model,model_version=v2,prompt_version=-": (2, 1)}, rates
    assert 'guardrail_messages_total{outcome="no_genai_span"} 1.0' in metrics
    assert 'guardrail_messages_total{outcome="judged"} 4.0' in metrics
    assert 'guardrail_messages_total{outcome="dlq"} 1' not in metrics
    # One gen_ai.evaluation.result per metric, on the judged span.
    exported = sink.log_records()
    assert len(exported) == 8, logs[-3000:]
    on_span = {(r.trace_id.hex(), r.span_id.hex()) for r in exported}
    assert on_span == {span_ids(s) for s in genai}
    names = sorted(a.value.string_value for r in exported for a in r.attributes
                   if a.key == "gen_ai.evaluation.name")
    assert names == ["bias"] * 4 + ["toxicity"] * 4
    assert all(r.event_name == "gen_ai.evaluation.result" for r in exported)


def test_a_span_without_content_is_counted_and_named_once_never_judged_empty(
        kafka_bootstrap, thread_judge, tmp_path, monkeypatch):
    """Instrumentations omit content unless told to: such spans are counted as
    ``no_content`` and the log says once which setting turns capture on."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    with JudgeServer() as model:
        model.script(ContentReply("Fine."), ContentReply("Also fine."))
        spans = openai_app_spans(model.api_base, ["a", "b"], service="quiet-app")
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, input_format="otlp")
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        marker = genai_spans(["marker answer"])  # a judged span after them: all were read
        asyncio.run(produce(env.bootstrap, env.topic("input"),
                            [(None, otlp_proto(spans[:1]), None),
                             (None, otlp_proto(spans[1:]), None),
                             (None, otlp_proto(marker), None)]))
        worker = env.start_worker()
        results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=1,
                                      timeout=120, settle=2))
        metrics = _get(worker.web_port, "/metrics")
    finally:
        env.stop_workers()
    logs = env.logs()
    assert [r["case_id"] for r in results] == [":".join(span_ids(marker[0]))]
    assert 'guardrail_messages_total{outcome="no_content"} 2.0' in metrics
    assert logs.count("quiet-app") == 1, logs[-3000:]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in logs


def test_many_spans_per_record_each_get_a_result_and_one_count(kafka_bootstrap, thread_judge,
                                                             tmp_path):
    """100 spans in records of 10 and 25: one result per span, the
    windows count each once (positions inside a record are distinct)."""
    thread_judge.reset()
    outputs = [("you idiot" if i % 5 == 0 else f"helpful answer {i}") for i in range(100)]
    spans = genai_spans(outputs, service_version="v3")
    records = [(None, otlp_proto(chunk), None) for chunk in chunks(spans[:50], 10)]
    records += [(None, otlp_proto(chunk), None) for chunk in chunks(spans[50:], 25)]
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, input_format="otlp")
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        asyncio.run(produce(env.bootstrap, env.topic("input"), records))
        # Before any worker: what the topic's records would become.
        check = env.cli("inputs", "check", "--topic", env.topic("input"), "--max", "3", "--json")
        worker = env.start_worker()
        results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=100,
                                      timeout=120, settle=2))
        rates = json.loads(_get(worker.web_port, "/rates"))["rates"]
    finally:
        env.stop_workers()
    assert sorted(r["case_id"] for r in results) == sorted(":".join(span_ids(s)) for s in spans)
    assert check.returncode == 0, check.stderr
    checked = [json.loads(line) for line in check.stdout.splitlines()]
    assert len(checked) == 3 and {len(c["cases"]) for c in checked} <= {10, 25}
    toxicity = [r for r in rates if r["metric"] == "toxicity"]
    assert sum(r["total"] for r in toxicity) == 100 and sum(r["unsafe"] for r in toxicity) == 20
