"""Agent runs as OpenTelemetry GenAI spans, made by the real SDK, for stream tests.

Each run is an ``invoke_agent`` root span over model-call (``chat``) spans and
``execute_tool`` spans, the way frameworks that follow the OTel GenAI agent
conventions write them (Strands, ADK, Pydantic AI); the framework tests in
:mod:`support.agent_traffic` drive real frameworks. Records go out one span
each, spread over partitions, the root first in some runs and last in others::

    run = agent_run(tool="send_email", arguments={"to": "eve@evil.example"}, result="sent")
    records = spread([run, other_run], partitions=2, seed=3)   # [(partition, bytes), ...]
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from support.otel_traffic import otlp_proto, recording_provider

__all__ = ["SyntheticRun", "agent_run", "spread", "chat_span_record", "produce_spread", "worker_fed"]


@dataclass
class SyntheticRun:
    trace_id: str
    root_span_id: str
    spans: list[ReadableSpan]

    @property
    def records(self) -> list[bytes]:
        return [otlp_proto([span]) for span in self.spans]


def _parts(role: str, *parts: dict[str, Any]) -> str:
    return json.dumps([{"role": role, "parts": list(parts)}])


def agent_run(*, request: str = "Summarise my inbox.", tool: str = "read_inbox",
              arguments: dict[str, Any] | None = None, result: str = "3 new messages.",
              answer: str = "You have 3 new messages.", agent: str = "mail-assistant",
              version: str = "v4", model: str = "agent-model", tools: int = 1,
              with_root: bool = True) -> SyntheticRun:
    """One run: root agent span, then per tool a chat span asking for it and the
    tool span, then a chat span with the answer. ``with_root=False`` leaves
    the root out of the export (it lives in another service, or never ended)."""
    provider, exporter = recording_provider(service="agent-app", version=version)
    tracer = provider.get_tracer("agent-app.runs")
    arguments = arguments if arguments is not None else {"folder": "INBOX"}
    common = {"gen_ai.agent.name": agent, "gen_ai.provider.name": "openai"}
    user = {"type": "text", "content": request}
    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes={
            **common, "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.version": version}) as root:
        for i in range(tools):
            call = {"type": "tool_call", "id": f"call_{i}", "name": tool, "arguments": arguments}
            with tracer.start_as_current_span(f"chat {model}", attributes={
                    **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                    "gen_ai.input.messages": _parts("user", user),
                    "gen_ai.output.messages": _parts("assistant", call)}):
                pass
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    **common, "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.id": f"call_{i}",
                    "gen_ai.tool.call.arguments": json.dumps(arguments),
                    "gen_ai.tool.call.result": result}):
                pass
        with tracer.start_as_current_span(f"chat {model}", attributes={
                **common, "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                "gen_ai.input.messages": _parts("user", user),
                "gen_ai.output.messages": _parts("assistant",
                                                 {"type": "text", "content": answer})}):
            pass
        context = root.get_span_context()
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    if not with_root:
        spans = [s for s in spans if s.context.span_id != context.span_id]
    return SyntheticRun(trace_id=trace.format_trace_id(context.trace_id),
                        root_span_id=trace.format_span_id(context.span_id), spans=spans)


def chat_span_record(answer: str, *, model: str = "chat-model") -> tuple[bytes, str]:
    """A plain chat span outside any agent run (the record, and its case id)."""
    provider, exporter = recording_provider(service="chat-app", version="v1")
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    with tracer.start_as_current_span(f"chat {model}", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "gen_ai.input.messages": _parts("user", {"type": "text", "content": "Hi"}),
            "gen_ai.output.messages": _parts("assistant",
                                             {"type": "text", "content": answer})}) as span:
        context = span.get_span_context()
    provider.shutdown()
    case_id = f"{trace.format_trace_id(context.trace_id)}:{trace.format_span_id(context.span_id)}"
    return otlp_proto(list(exporter.get_finished_spans())), case_id


def spread(runs: Sequence[SyntheticRun], *, partitions: int, seed: int,
           ) -> list[tuple[int, bytes]]:
    """Every span its own record on a random partition, runs interleaved at
    random; within a run the spans are shuffled, with the root produced first in
    even-numbered runs and last in the others."""
    rng = random.Random(seed)
    queues: list[list[bytes]] = []
    for number, run in enumerate(runs):
        root = [s for s in run.spans
                if trace.format_span_id(s.context.span_id) == run.root_span_id]
        rest = [s for s in run.spans if s not in root]
        rng.shuffle(rest)
        ordered = root + rest if number % 2 == 0 else rest + root
        queues.append([otlp_proto([s]) for s in ordered])
    records: list[tuple[int, bytes]] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        records.append((rng.randrange(partitions), queue.pop(0)))
    return records


async def produce_spread(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    """Send ``(partition, value)`` records in order and wait for every ack."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, partition=partition)
                   for partition, value in records]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def worker_fed(env: Any, placed: list[tuple[int, bytes]]) -> Any:
    """Make ``env``'s topics, start a worker, wait until it is ready, then produce
    ``placed`` (``(partition, value)``) to its input topic; the worker process."""
    from support.harness import poll, worker_ready

    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # the topics, first
    worker = env.start_worker()
    assert poll(lambda: worker_ready(worker), 60), env.logs()[-3000:]
    asyncio.run(produce_spread(env.bootstrap, env.topic("input"), placed))
    return worker
