"""One span of an agent run, as the run assembly keeps it: what the span says, read
once from OTLP, with nothing of the protobuf left (so it travels as compact JSON)::

    request = request_from_bytes(record.value, {})
    for span in run_spans_of(request):
        span.kind            # 'agent' | 'tool' | 'llm' | 'other'
        span.tool_name, span.tool_arguments, span.tool_result      # tool spans
        span.messages, span.output, span.tool_calls                # llm (and agent) spans
        span.conversation_id     # 'chat-7': the conversation the run is a turn of, or None
        RunSpan.from_bytes(span.to_bytes()) == span                # True

    run_signal({"gen_ai.operation.name": "invoke_agent"}, "")    # True: an agent span
    run_signal({"gen_ai.operation.name": "chat"},
               "opentelemetry.util.genai.handler")               # False: plain chat

A span's kind, in any of the three conventions: ``agent`` (OTel GenAI
``gen_ai.operation.name`` ``invoke_agent`` / ``create_agent`` / ``invoke_workflow``,
OpenInference ``openinference.span.kind`` ``AGENT``, OpenLLMetry
``traceloop.span.kind`` ``agent`` / ``workflow``), ``tool`` (``execute_tool``,
``TOOL``, ``tool``), ``llm`` (a span that called a model,
:func:`~guardrail.formats.otlp_conventions.is_genai`), else ``other`` (chains,
Strands' event-loop cycles, handoffs, HTTP …). An agent span keeps its request in
``messages`` and its answer in ``output``, as an LLM span does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Literal, get_args

import orjson

from ...formats.otlp_attributes import DEFAULT_LABELS, _attributes, _label_values, _trace
from ...formats.otlp_conventions import SpanEvent, is_genai, read_exchange
from ...formats.otlp_frameworks import plain_attributes
from ...formats.otlp_sessions import TraceConversations
from .framework_spans import (framework_answer, framework_kind, framework_request,
                              framework_signal, framework_tool)
from .span_reading import (agent_answer, agent_request, as_text, legacy_exchange,
                           merged_events, requested_calls, semconv_turns, text_turns,
                           tool_call_of)

__all__ = ["SpanKind", "RunSpan", "run_signal", "read_run_span", "run_spans_of",
           "AGENT_SCOPES", "span_kind"]

SpanKind = Literal["agent", "tool", "llm", "other"]

#: Instrumentation scopes (name, or name prefix before a ``.``) of agent frameworks:
#: every span they write belongs to an agent run. Read from the packages' sources:
#: openinference-instrumentation-{openai-agents 2.6, google-adk 1.0, crewai 1.1,
#: smolagents 0.1, agno 1.0} (``get_tracer(__name__)``), opentelemetry-instrumentation-
#: openai-agents 0.62 (OpenLLMetry) and -openai-agents-v2 0.1 (both
#: ``opentelemetry.instrumentation.openai_agents``), opentelemetry-instrumentation-crewai
#: 0.62, strands-agents 1.62 (``strands.telemetry.tracer``), google-adk 2.13
#: (``gcp.vertex.agent``), pydantic-ai-slim 2.68 (``pydantic-ai``).
AGENT_SCOPES: tuple[str, ...] = (
    "openinference.instrumentation.openai_agents",
    "openinference.instrumentation.google_adk",
    "openinference.instrumentation.crewai",
    "openinference.instrumentation.smolagents",
    "openinference.instrumentation.agno",
    "opentelemetry.instrumentation.openai_agents",
    "opentelemetry.instrumentation.crewai",
    "strands.telemetry",
    "gcp.vertex.agent",
    "pydantic-ai",
)
_AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
#: Operations of spans that call a model; any other named operation (Strands'
#: ``execute_event_loop_cycle``, OpenLLMetry's ``handoff``) is no model call, even
#: when it carries messages.
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_AGENT_ATTRIBUTES = ("gen_ai.agent.name", "gen_ai.agent.id", "agent.name",
                     "traceloop.workflow.name")
_KINDS = frozenset(get_args(SpanKind))
_PYDANTIC_AI = "pydantic-ai"


@dataclass(frozen=True)
class RunSpan:
    """One span of an agent run, as plain values."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: SpanKind
    start_ns: int
    end_ns: int
    agent_name: str | None = None
    agent_version: str | None = None
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_result: str | None = None
    #: An LLM span's input turns; an agent span's request (``{"role", "content"}``).
    messages: tuple[dict[str, str], ...] = ()
    #: An LLM span's answer text; an agent span's final answer.
    output: str | None = None
    #: The tool calls an LLM span's answer asks for: ``{"name", "arguments"[, "id"]}``.
    tool_calls: tuple[dict[str, str], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The id that ties a tool span to the call the model asked for (``gen_ai.tool.call.id``).
    tool_call_id: str | None = None
    #: The conversation the span's trace is a turn of (its own attributes' or its
    #: trace's: :class:`~guardrail.formats.otlp_sessions.TraceConversations`).
    #: Absent from spans written before sessions: None.
    conversation_id: str | None = None
    #: The convention an LLM span's answer was read in (``langfuse`` …), for
    #: ``guardrail inputs check``; never written (:meth:`to_bytes` leaves it out).
    convention: str | None = field(default=None, compare=False)

    def to_bytes(self) -> bytes:
        """Compact JSON, without the fields at their defaults."""
        # The values are plain already: asdict's deep copy of every span was a
        # measurable share of a run's path through the worker.
        data = {}
        for name in _SPAN_FIELDS:
            value = getattr(self, name)
            if value not in (None, (), [], {}):
                data[name] = dict(value) if name == "labels" else value
        return orjson.dumps(data)

    @classmethod
    def from_bytes(cls, raw: bytes) -> RunSpan:
        """The span :meth:`to_bytes` wrote; ValueError naming what is wrong otherwise."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"run span: not JSON ({str(exc)[:120]})") from None
        if not isinstance(data, dict):
            raise ValueError(f"run span: expected a JSON object, got {type(data).__name__}")
        return cls(**_checked(data))

    @cached_property
    def size(self) -> int:
        """Bytes this span takes as :meth:`to_bytes` (for the runs' memory caps)."""
        return len(self.to_bytes())


#: RunSpan's fields in order, read once (RunSpan.to_bytes, _checked); the convention
#: stays in the process that read the span (older workers reject unknown fields).
_SPAN_FIELDS = tuple(f.name for f in fields(RunSpan) if f.name != "convention")


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    """``data``'s fields, each of the type :class:`RunSpan` declares."""
    unknown = sorted(set(data).difference(_SPAN_FIELDS))
    if unknown:
        raise ValueError(f"run span: unknown fields {unknown}")
    missing = [k for k in ("trace_id", "span_id", "name", "kind", "start_ns", "end_ns")
               if k not in data]
    if missing:
        raise ValueError(f"run span: missing {missing}")
    _hex(data, "trace_id", 32)
    _hex(data, "span_id", 16)
    if data.get("parent_id") is not None:
        _hex(data, "parent_id", 16)
    if data["kind"] not in _KINDS:
        raise ValueError(f"run span: kind must be one of {sorted(_KINDS)}, got {data['kind']!r}")
    for key in ("start_ns", "end_ns"):
        if not isinstance(data[key], int) or isinstance(data[key], bool):
            raise ValueError(f"run span: {key} must be an integer")
    for key in ("name", "agent_name", "agent_version", "tool_name", "tool_arguments",
                "tool_result", "tool_call_id", "output", "conversation_id"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"run span: {key} must be a string")
    checked = dict(data)
    checked.setdefault("parent_id", None)  # to_bytes leaves out a missing parent
    for key in ("messages", "tool_calls"):
        checked[key] = tuple(_string_map(item, key) for item in _list(data.get(key, []), key))
    checked["labels"] = _string_map(data.get("labels", {}), "labels")
    return checked


def _hex(data: Mapping[str, Any], key: str, size: int) -> None:
    value = data[key]
    if not isinstance(value, str) or len(value) != size or \
            value.strip("0123456789abcdef") != "":
        raise ValueError(f"run span: {key} must be {size} lowercase hex digits, got {value!r}")


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"run span: {key} must be an array")
    return value


def _string_map(value: Any, key: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"run span: {key} must hold objects of strings")
    return value


# -- what a span says about its run ---------------------------------------------------------

def _scope_is_agent(scope_name: str) -> bool:
    return any(scope_name == s or scope_name.startswith(s + ".") for s in AGENT_SCOPES)


def _lower(value: Any) -> str:
    return value.lower() if isinstance(value, str) else ""


def run_signal(attrs: Mapping[str, Any], scope_name: str) -> bool:
    """The span itself says it belongs to an agent run: an agent or tool span in any of
    the three conventions, agent attributes on it, or an agent framework's scope."""
    if _lower(attrs.get("gen_ai.operation.name")) in _AGENT_OPERATIONS | {"execute_tool"}:
        return True
    if _lower(attrs.get("openinference.span.kind")) in ("agent", "tool"):
        return True
    if _lower(attrs.get("traceloop.span.kind")) in ("agent", "workflow", "tool"):
        return True
    if any(attrs.get(key) for key in _AGENT_ATTRIBUTES) or framework_signal(attrs):
        return True
    return _scope_is_agent(scope_name)


def span_kind(attrs: Mapping[str, Any], events: Sequence[SpanEvent], scope_name: str = "",
              ) -> SpanKind:
    """What the span is in its run (see the module's docstring)."""
    operation = _lower(attrs.get("gen_ai.operation.name"))
    if operation in _AGENT_OPERATIONS:
        return "agent"
    if operation == "execute_tool":
        return "tool"
    openinference = _lower(attrs.get("openinference.span.kind"))
    if openinference:
        return {"agent": "agent", "tool": "tool", "llm": "llm"}.get(openinference, "other")
    traceloop = _lower(attrs.get("traceloop.span.kind"))
    if traceloop:  # OpenLLMetry marks its own spans (task, handoff …); model calls carry none
        return {"agent": "agent", "workflow": "agent", "tool": "tool"}.get(traceloop, "other")
    framework = framework_kind(attrs)  # Langfuse, MLflow, Vercel AI: their own kinds
    if framework is not None:
        return framework
    if operation and operation not in _MODEL_OPERATIONS:
        return "other"
    if is_genai(attrs, (e.name for e in events)):
        return "llm"
    if scope_name == _PYDANTIC_AI and attrs.get("agent_name"):  # its older "agent run" spans
        return "agent"
    return "other"


def _agent_name(attrs: Mapping[str, Any], kind: SpanKind) -> str | None:
    names = ["gen_ai.agent.name", "agent.name", "agent_name"]
    if kind == "agent":
        names += ["traceloop.entity.name", "ai.telemetry.functionId"]
    return next((text for key in names if (text := as_text(attrs.get(key)))), None)


def _agent_version(attrs: Mapping[str, Any], resource: Mapping[str, Any],
                   kind: SpanKind) -> str | None:
    version = as_text(attrs.get("gen_ai.agent.version"))
    if version is None and kind == "agent":
        version = as_text(attrs.get("traceloop.entity.version")) \
            or as_text(resource.get("service.version"))
    return version


def read_run_span(span: Any, attrs: dict[str, Any], resource: dict[str, Any], scope_name: str,
                  labels: Mapping[str, Sequence[str]] = DEFAULT_LABELS, *,
                  conversation_id: str | None = None) -> RunSpan | None:
    """``span`` (an ``opentelemetry.proto.trace.v1`` Span) as a :class:`RunSpan`;
    None when its ids are invalid. ``attrs`` and ``resource`` are its attributes and
    its resource's, unwrapped; ``labels`` as :class:`~guardrail.formats.otlp.OtlpDecoder`'s;
    ``conversation_id`` as the decoder resolved it for the span."""
    ids = _trace(span.trace_id, span.span_id)
    if ids is None:
        return None
    parent = span.parent_span_id
    events = merged_events([SpanEvent(e.name, _attributes(e.attributes)) for e in span.events])
    kind = span_kind(attrs, events, scope_name)
    agent_name = _agent_name(attrs, kind)
    if agent_name is None and kind == "agent" and framework_kind(attrs) == "agent":
        agent_name = span.name or None  # Langfuse and MLflow name it by the observation
    agent_version = _agent_version(attrs, resource, kind)
    found = _label_values(labels, attrs, resource)
    if agent_name:
        found["agent"] = agent_name
    if agent_version:
        found["agent_version"] = agent_version
    return RunSpan(
        trace_id=ids["trace_id"], span_id=ids["span_id"],
        parent_id=parent.hex() if len(parent) == 8 and any(parent) else None,
        name=span.name, kind=kind, start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano or span.start_time_unix_nano,
        agent_name=agent_name, agent_version=agent_version, labels=found,
        conversation_id=conversation_id, **_content(kind, attrs, events, span.name))


def _content(kind: SpanKind, attrs: Mapping[str, Any], events: Sequence[SpanEvent],
             name: str) -> dict[str, Any]:
    """The fields of a span's kind: a tool's call, a model's turn, an agent's request."""
    if kind == "tool":
        call = framework_tool(attrs, name) or tool_call_of(attrs, events, name)
        return {"tool_name": call.name, "tool_arguments": call.arguments,
                "tool_result": call.result, "tool_call_id": call.id}
    if kind == "agent":
        request = framework_request(attrs)
        return {"messages": tuple(agent_request(attrs, events) if request is None else request),
                "output": framework_answer(attrs) or agent_answer(attrs, events)}
    if kind != "llm":
        return {}
    exchange = read_exchange(attrs, events)
    turns = semconv_turns(attrs, events)
    if turns is None and exchange is not None:
        turns = text_turns(exchange.messages)
    output = exchange.output if exchange is not None else None
    if not turns and output is None:
        turns, output = legacy_exchange(events)
    calls = requested_calls(attrs, events) or (exchange.calls if exchange is not None else ())
    return {"messages": tuple(turns or ()), "output": output, "tool_calls": tuple(calls),
            "convention": exchange.convention if exchange is not None else None}


def run_spans_of(request: Any, labels: Mapping[str, Sequence[str]] = DEFAULT_LABELS,
                 ) -> Iterator[RunSpan]:
    """Every span of an ``ExportTraceServiceRequest`` with valid ids, as a :class:`RunSpan`
    (conversation ids read with the default association keys, within the request)."""
    spans = [(span, plain_attributes(_attributes(span.attributes)),
              _attributes(resource_spans.resource.attributes),
              scope_spans.scope.name)
             for resource_spans in request.resource_spans
             for scope_spans in resource_spans.scope_spans for span in scope_spans.spans]
    ids = TraceConversations().resolve([(span.trace_id.hex(), attrs) for span, attrs, *_ in spans])
    for (span, attrs, resource, scope), conversation_id in zip(spans, ids):
        run_span = read_run_span(span, attrs, resource, scope, labels,
                                 conversation_id=conversation_id)
        if run_span is not None:
            yield run_span
