"""The ``otlp`` input format's cost: decoding a Collector record and extracting its cases.

    python bench/worker/otlp_decode.py [--seconds 0.5] [--rounds 5]
    python bench/worker/otlp_decode.py --conventions     # per span convention, 100-span records

Records of 1, 10 and 100 GenAI spans, in both encodings the Collector's kafka
exporter writes: ``otlp_proto`` (the real OTLP encoder's bytes) and
``otlp_json`` (protobuf's JSON mapping with hex ids, as the Collector writes
it). The spans are built once with the OpenTelemetry SDK and carry what
``opentelemetry-instrumentation-openai-v2`` writes with content capture on (a
system and a user message, a ~100-word answer as ``gen_ai.output.messages``).
Per record: the wire decode alone (``request_from_bytes``) and the whole
``OtlpDecoder.decode`` (wire decode + finding GenAI spans + building the case
dicts), best of ``--rounds`` rounds of ``--seconds`` each, in µs per record and
per span. Pure CPU in this process, no Kafka: compare with the worker's
per-message budget (a judge call is ~100x more).

``--conventions`` measures the same exchange written in each convention's attributes
as the tracing clients write them (Langfuse's generation attributes, MLflow's
JSON-encoded ``mlflow.span*`` with an OpenAI request and response, the Vercel AI SDK's
``doGenerate`` span, ADK's legacy ``call_llm`` span): decode + cases µs per span of
records of 100 spans (``otlp_proto``), and each against OTel GenAI.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import base64
import json
import time
from collections.abc import Callable
from typing import Any

from bench.common import meta, write_json
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from guardrail.formats.otlp import OtlpDecoder, request_from_bytes

SIZES = (1, 10, 100)
_SENTENCE = ("The central theme of the play is mortality, and the prince keeps returning to "
             "what it means to act when every choice seems to lead to loss. ")
ANSWER = (_SENTENCE * 4).strip()  # ~100 words, as bench/judge/tokens.py's typical answer


def _messages(*messages: tuple[str, str]) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}
                       for role, text in messages], separators=(",", ":"))


def genai_spans(n: int) -> list[Any]:
    """``n`` chat spans as the official OpenAI instrumentation writes them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "chat-app", "service.version": "1.4.2"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as span:
            span.set_attributes({
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini", "gen_ai.response.model": "gpt-4o-mini",
                "gen_ai.response.id": f"chatcmpl-{i:08d}", "gen_ai.usage.input_tokens": 40,
                "gen_ai.usage.output_tokens": 130, "gen_ai.response.finish_reasons": ("stop",),
                "gen_ai.input.messages": _messages(("system", "Answer briefly."),
                                                   ("user", f"Question {i}: what is Hamlet about?")),
                "gen_ai.output.messages": _messages(("assistant", ANSWER))})
    provider.shutdown()
    return list(exporter.get_finished_spans())


_SYSTEM, _USER = "Answer briefly.", "Question {i}: what is Hamlet about?"


def _openai(i: int) -> tuple[str, str]:
    messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER.format(i=i)}]
    return json.dumps(messages), json.dumps({"role": "assistant", "content": ANSWER})


def _convention_attributes(name: str, i: int) -> dict[str, Any]:
    """The exchange of :func:`genai_spans` in ``name``'s attributes."""
    inputs, answer = _openai(i)
    if name == "langfuse":
        return {"langfuse.observation.type": "generation", "langfuse.observation.input": inputs,
                "langfuse.observation.output": answer, "session.id": f"chat-{i}",
                "langfuse.observation.model.name": "gpt-4o-mini", "langfuse.release": "1.4.2"}
    if name == "mlflow":
        response = {"id": f"chatcmpl-{i:08d}", "object": "chat.completion", "choices": [
            {"index": 0, "finish_reason": "stop", "message": json.loads(answer)}]}
        return {"mlflow.spanType": '"CHAT_MODEL"', "mlflow.traceRequestId": f'"tr-{i}"',
                "mlflow.spanInputs": json.dumps({"model": "gpt-4o-mini",
                                                 "messages": json.loads(inputs)}),
                "mlflow.spanOutputs": json.dumps(response), "mlflow.llm.model": '"gpt-4o-mini"'}
    if name == "vercel_ai":
        prompt = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": [
            {"type": "text", "text": _USER.format(i=i)}]}]
        return {"ai.operationId": "ai.generateText.doGenerate", "operation.name":
                "ai.generateText.doGenerate", "ai.model.id": "gpt-4o-mini",
                "gen_ai.system": "openai.chat", "ai.prompt.messages": json.dumps(prompt),
                "ai.response.text": ANSWER, "ai.telemetry.metadata.sessionId": f"chat-{i}"}
    if name == "google_adk":
        request = {"model": "gpt-4o-mini", "config": {"system_instruction": _SYSTEM},
                   "contents": [{"role": "user", "parts": [{"text": _USER.format(i=i)}]}]}
        response = {"content": {"role": "model", "parts": [{"text": ANSWER}]}}
        return {"gen_ai.system": "gcp.vertex.agent", "gen_ai.request.model": "gpt-4o-mini",
                "gcp.vertex.agent.session_id": f"chat-{i}",
                "gcp.vertex.agent.llm_request": json.dumps(request),
                "gcp.vertex.agent.llm_response": json.dumps(response)}
    raise ValueError(name)


CONVENTIONS = ("langfuse", "mlflow", "vercel_ai", "google_adk")


def convention_spans(name: str, n: int) -> list[Any]:
    """``n`` spans of one model call each, in ``name``'s attributes."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "chat-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        with tracer.start_as_current_span("model call", kind=SpanKind.CLIENT,
                                          attributes=_convention_attributes(name, i)):
            pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def measure_conventions(seconds: float, rounds: int, n: int = 100) -> list[dict[str, Any]]:
    decoder = OtlpDecoder()
    spans = {"otel_genai": genai_spans(n), **{c: convention_spans(c, n) for c in CONVENTIONS}}
    rows = []
    for name, made in spans.items():
        raw = encode_spans(made).SerializeToString()
        decoded = decoder.decode(raw, {})
        assert len(decoded.cases) == n and decoded.conventions == {name: n}, name
        full = best_us(lambda: decoder.decode(raw, {}), seconds, rounds)
        rows.append({"convention": name, "spans": n, "bytes": len(raw),
                     "total_us_per_span": round(full / n, 1)})
    base = rows[0]["total_us_per_span"]
    for row in rows:
        row["vs_otel_genai"] = round(row["total_us_per_span"] / base, 2)
    return rows


def otlp_json(spans: list[Any]) -> bytes:
    """The Collector's OTLP/JSON: protobuf's JSON mapping, ids as hex."""
    record = json_format.MessageToDict(encode_spans(spans))
    for resource_spans in record["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(record, separators=(",", ":")).encode()


def best_us(call: Callable[[], Any], seconds: float, rounds: int) -> float:
    """Best µs per call over ``rounds`` rounds of about ``seconds`` each."""
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < seconds / 10 or calls < 3:  # size the rounds
        call()
        calls += 1
    per_round = max(1, int(calls * 10))
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            call()
        best = min(best, (time.perf_counter() - t0) / per_round)
    return best * 1e6


def measure(seconds: float, rounds: int) -> list[dict[str, Any]]:
    decoder = OtlpDecoder()
    spans = genai_spans(max(SIZES))
    rows = []
    for n in SIZES:
        encodings = {"otlp_proto": encode_spans(spans[:n]).SerializeToString(),
                     "otlp_json": otlp_json(spans[:n])}
        for encoding, raw in encodings.items():
            assert len(decoder.decode(raw, {}).cases) == n  # measure what works
            wire = best_us(lambda: request_from_bytes(raw, {}), seconds, rounds)
            full = best_us(lambda: decoder.decode(raw, {}), seconds, rounds)
            rows.append({"encoding": encoding, "spans": n, "bytes": len(raw),
                         "wire_us": round(wire, 1), "total_us": round(full, 1),
                         "total_us_per_span": round(full / n, 1)})
    return rows


def print_rows(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    print(f"\n{info['date']}  {info['machine']}  commit {info['commit']}  "
          f"load {info.get('load_at_start')}")
    print("| encoding | spans/record | record bytes | wire decode µs | decode + cases µs "
          "| µs per span |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['encoding']} | {r['spans']} | {r['bytes']:,} | {r['wire_us']:,.1f} "
              f"| {r['total_us']:,.1f} | {r['total_us_per_span']:,.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the best counts")
    parser.add_argument("--conventions", action="store_true",
                        help="decode cost per span convention instead of per record size")
    args = parser.parse_args()
    info = meta()
    if args.conventions:
        rows = measure_conventions(args.seconds, args.rounds)
        print(f"\n{info['date']}  {info['machine']}  commit {info['commit']}")
        print("| convention | record bytes (100 spans) | decode + cases µs per span "
              "| vs OTel GenAI |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['convention']} | {r['bytes']:,} | {r['total_us_per_span']:,.1f} "
                  f"| {r['vs_otel_genai']:.2f}× |")
        write_json("otlp_decode_conventions", {"meta": info, "rows": rows})
        return 0
    rows = measure(args.seconds, args.rounds)
    print_rows(rows, info)
    write_json("otlp_decode", {"meta": info, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
