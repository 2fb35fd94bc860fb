"""The streaming message contract: decode inputs, build result and DLQ records.

Pure functions over bytes and dicts — no Kafka here, so every rule about bad
input is testable on its own::

    source = Source("model-outputs", 0, 42, key=b"c1", headers=(("traceparent", b"00-4bf9"),))
    decoded = decode_input(raw_bytes, max_bytes=1_000_000, source=source)
    if isinstance(decoded, BadInput):
        record = dlq_record(decoded.reason, raw_bytes, source)
    else:
        record = result_record(decoded, metrics, source, judge_model="...")

Both records carry the input's Kafka ``key`` and ``headers`` (a name → value
map) so results join back to traces. Bytes that are not UTF-8 travel as
``"b64:"`` + base64, and so does text that itself starts with ``b64:``, so a
reader can always tell: :func:`bytes_from_text` turns a value back into the
original bytes::

    text_or_b64(b"00-4bf9")     # '00-4bf9'
    text_or_b64(b"\xff\x00")    # 'b64:/wA='
    bytes_from_text("b64:/wA=") # b'\xff\x00'
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from pydantic import ValidationError

from ..formats.base import InputDecoder, Notice, UndecodableRecord
from ..formats.case import CaseDecoder, conversation_id
from ..formats.reader import default_case_id, describe_validation
from ..judging.models import Case, RedteamMetrics
from .._event_time import now_ms, parse_event_time, utc_iso

#: The ``conversation`` field's default budget (``conversation_max_chars``).
DEFAULT_CONVERSATION_CHARS = 8000
_CASE_FORMAT = CaseDecoder()

__all__ = ["Source", "Headers", "InputMessage", "BadInput", "DecodedRecord", "decode_input",
           "decode_record", "message_from_case", "trace_from_headers", "result_record",
           "result_value", "dlq_record", "group_labels", "parse_event_time", "utc_iso",
           "text_or_b64", "bytes_from_text", "headers_map", "B64_PREFIX"]

#: Originals up to this size travel whole on the DLQ; larger ones as an excerpt.
DLQ_MAX_ORIGINAL = 256 * 1024
_EXCERPT = 2048
_MAX_LABEL = 200
#: Marks a value carried as base64 in ``key`` and ``headers`` of the records.
B64_PREFIX = "b64:"

#: Kafka record headers as clients hand them over: (name, value) pairs, in order.
Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Source:
    """Where a message came from (so consumers can de-duplicate), with its
    Kafka key and headers (so results can be joined back to traces).

    ``index`` is a case's position inside its record when one record holds
    several cases (an OTLP batch of spans): results, DLQ records and judgment
    events then name ``topic/partition/offset/index``, and the window
    counter's de-duplication orders cases by ``(offset, index)``."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None
    key: bytes | None = None
    headers: Headers = ()
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        coordinates: dict[str, Any] = {"topic": self.topic, "partition": self.partition,
                                       "offset": self.offset}
        if self.index is not None:
            coordinates["index"] = self.index
        return coordinates

    @property
    def coordinates(self) -> str:
        """``topic/partition/offset`` (``/index`` inside a many-case record):
        names a message that has no other name."""
        where = f"{self.topic}/{self.partition}/{self.offset}"
        return where if self.index is None else f"{where}/{self.index}"

    @property
    def position(self) -> tuple[int, int]:
        """``(offset, index)``: the order of cases within one input partition."""
        return self.offset, self.index or 0

    def at(self, index: int) -> Source:
        """This record's source for its case number ``index``."""
        return replace(self, index=index)


def text_or_b64(value: bytes | None) -> str | None:
    """Bytes as JSON text: UTF-8 as is, anything else as ``b64:`` + base64.

    Text that happens to start with ``b64:`` is encoded too, so reading a
    value back (:func:`bytes_from_text`) is never ambiguous.
    """
    if value is None:
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.startswith(B64_PREFIX):
        return text
    return B64_PREFIX + base64.b64encode(value).decode()


def bytes_from_text(text: str | None) -> bytes | None:
    """The original bytes of a ``key`` or header value from a record."""
    if text is None:
        return None
    if text.startswith(B64_PREFIX):
        return base64.b64decode(text[len(B64_PREFIX):])
    return text.encode("utf-8")


def headers_map(headers: Headers) -> dict[str, str | None]:
    """Headers as a JSON object. Kafka allows a name twice; the map keeps the
    last value (as ``lastHeader`` lookups do), while the published record's
    Kafka headers keep every pair."""
    return {name: text_or_b64(value) for name, value in headers}


@dataclass(frozen=True)
class InputMessage:
    case: Case
    metadata: dict[str, str] = field(default_factory=dict)
    event_time_ms: int | None = None
    #: ``{"trace_id": 32 hex, "span_id": 16 hex}``: the judged span (``otlp``)
    #: or the input's W3C ``traceparent`` header; None when unknown.
    trace: dict[str, str] | None = None
    #: An agent run's summary (agent, version, spans, tool calls, models,
    #: status) when the case is a whole run (:func:`guardrail.assembly.runs.run_case`).
    run: dict[str, Any] | None = None
    #: The conversation id the turn carries (``conversation_id`` of a case, a
    #: span's ``gen_ai.conversation.id`` / ``session.id`` …): its session.
    session_id: str | None = None
    #: A session's summary (id, turns, traces, times, status, trigger) when the
    #: case is a whole session judged at once (:mod:`guardrail.assembly.sessions`).
    session: dict[str, Any] | None = None


@dataclass(frozen=True)
class BadInput:
    reason: str


@dataclass(frozen=True)
class DecodedRecord:
    """One input record's cases, each with its own source (``index`` set when
    the format can hold several), plus what was counted and not judged."""

    items: list[tuple[Source, InputMessage | BadInput]]
    skipped: dict[str, int] = field(default_factory=dict)
    notices: tuple[Notice, ...] = ()
    #: Spans of agent runs the record held (assembled into runs elsewhere).
    run_spans: tuple[Any, ...] = ()
    #: The span conventions the record's answers were read in (``otlp``).
    conventions: dict[str, int] = field(default_factory=dict)


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("metadata must be a JSON object of labels")
    labels: dict[str, str] = {}
    for key, label in value.items():
        if isinstance(label, (dict, list)):
            raise ValueError(f"metadata.{key[:40]} must be a string, number or boolean")
        if label is not None:
            labels[str(key)[:_MAX_LABEL]] = str(label)[:_MAX_LABEL]
    return labels


def decode_record(raw: bytes | None, *, max_bytes: int, source: Source,
                  decoder: InputDecoder | None = None,
                  conversation_max_chars: int = DEFAULT_CONVERSATION_CHARS,
                  budgets: Mapping[str, int] | None = None,
                  ) -> DecodedRecord | BadInput:
    """Decode one input record with ``decoder`` (the ``case`` format by default).

    ``budgets`` are further validation budgets of a case's derived fields
    (``trajectory_max_chars``, ``tool_result_max_chars``).

    A record that cannot be read is one :class:`BadInput`; otherwise each case
    is validated on its own, so one bad span of a batch does not sink the rest.
    """
    decoder = decoder or _CASE_FORMAT
    try:
        decoded = decoder.decode(_checked(raw, max_bytes), dict(source.headers))
    except UndecodableRecord as exc:
        return BadInput(str(exc))
    header_trace = trace_from_headers(source.headers)
    items: list[tuple[Source, InputMessage | BadInput]] = []
    for index, data in enumerate(decoded.cases):
        where = source.at(index) if decoder.many_per_record else source
        items.append((where, message_from_case(data, where, trace=header_trace,
                                               conversation_max_chars=conversation_max_chars,
                                               budgets=budgets)))
    return DecodedRecord(items, dict(decoded.skipped), decoded.notices, decoded.run_spans,
                         dict(decoded.conventions))


def _checked(raw: bytes | None, max_bytes: int) -> bytes:
    if raw is None:
        raise UndecodableRecord("message has no value (tombstone)")
    if len(raw) > max_bytes:
        raise UndecodableRecord(f"message is {len(raw)} bytes, over the limit of {max_bytes}")
    return raw


def decode_input(raw: bytes | None, *, max_bytes: int,
                 source: Source | None = None) -> InputMessage | BadInput:
    """Validate one message of the ``case`` format; every failure names its reason.

    With its ``source``, a case without ``case_id`` is named by the rule file
    runs use too (:func:`~guardrail.formats.reader.default_case_id`): its Kafka key,
    else ``topic/partition/offset``.
    """
    try:
        data = _CASE_FORMAT.decode(_checked(raw, max_bytes), {}).cases[0]
    except UndecodableRecord as exc:
        return BadInput(str(exc))
    return message_from_case(data, source,
                             trace=trace_from_headers(source.headers) if source else None)


def message_from_case(data: dict[str, Any], source: Source | None, *,
                      trace: dict[str, str] | None = None,
                      conversation_max_chars: int = DEFAULT_CONVERSATION_CHARS,
                      budgets: Mapping[str, int] | None = None,
                      ) -> InputMessage | BadInput:
    """Validate one case dict of a decoded record (see :mod:`guardrail.formats.base`);
    its conversation id (:func:`~guardrail.formats.case.conversation_id`) is ``session_id``."""
    try:
        case = Case.model_validate(
            data, context={**(budgets or {}), "conversation_max_chars": conversation_max_chars})
        metadata = _metadata(data.get("metadata"))
        event_time = (parse_event_time(data["timestamp"])
                      if data.get("timestamp") is not None else None)
        trace = _trace(data["trace"]) if data.get("trace") is not None else trace
        run = _run(data.get("run"))
        session = _block(data.get("session_block"), "session_block")
        session_id = conversation_id(data)
    except ValidationError as exc:
        return BadInput(f"invalid case: {describe_validation(exc)}")
    except ValueError as exc:
        return BadInput(f"invalid case: {exc}")
    if not case.has_output:
        return BadInput("not judged: output is required and is missing or empty")
    if source is not None and not case.case_id:
        case = case.model_copy(
            update={"case_id": default_case_id(source.key, source.coordinates)})
    return InputMessage(case=case, metadata=metadata, event_time_ms=event_time, trace=trace,
                        run=run, session_id=session_id, session=session)


def _run(value: Any) -> dict[str, Any] | None:
    return _block(value, "run (agent, agent_version, spans, tool_calls, models, status)")


def _block(value: Any, what: str) -> dict[str, Any] | None:
    """A summary block a case carries through (a run's, a session's)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object")
    return value


_TRACE_ID, _SPAN_ID = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")


def _trace(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("trace must be an object with trace_id and span_id")
    trace_id, span_id = str(value.get("trace_id", "")).lower(), str(value.get("span_id", "")).lower()
    if not (_TRACE_ID.fullmatch(trace_id) and _SPAN_ID.fullmatch(span_id)):
        raise ValueError("trace needs trace_id (32 hex) and span_id (16 hex)")
    return {"trace_id": trace_id, "span_id": span_id}


def trace_from_headers(headers: Headers) -> dict[str, str] | None:
    """The trace context of a W3C ``traceparent`` header
    (``00-<trace_id>-<parent_id>-<flags>``), None when absent or malformed
    (and for the all-zero ids the spec calls invalid)."""
    value = next((v for name, v in reversed(headers) if name.lower() == "traceparent"), None)
    if not value:
        return None
    parts = value.decode("latin-1").strip().lower().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    trace_id, span_id = parts[1], parts[2]
    if not (_TRACE_ID.fullmatch(trace_id) and _SPAN_ID.fullmatch(span_id)) \
            or not trace_id.strip("0") or not span_id.strip("0"):
        return None
    return {"trace_id": trace_id, "span_id": span_id}


def group_labels(metadata: dict[str, str], labels: tuple[str, ...]) -> dict[str, str]:
    """The alerting group of a message: the chosen labels, '-' where missing."""
    return {label: metadata.get(label, "-") for label in labels}


def result_record(message: InputMessage, metrics: RedteamMetrics, source: Source, *,
                  judge_model: str, event_time_ms: int) -> dict[str, Any]:
    """The results-topic value: the spec's RedteamMetrics plus identity fields
    (``case_id``, ``source``, and the input's ``key`` and ``headers``)."""
    record = metrics.model_dump(mode="json")
    record.update(_identity(message, source, judge_model=judge_model,
                            event_time_ms=event_time_ms))
    return record


#: The spec's part of a result as JSON, from the model (pydantic's writer).
_METRICS_JSON = RedteamMetrics.__pydantic_serializer__.to_json


def result_value(message: InputMessage, metrics: RedteamMetrics, source: Source, *,
                 judge_model: str, event_time_ms: int) -> bytes:
    """:func:`result_record` as JSON, byte for byte, written in one pass: the
    metrics straight from the model, the identity fields appended to them
    (building the dict first, then writing it, cost a third more per result)."""
    head = _METRICS_JSON(metrics)  # b'{"metrics":[...],"cost":{...}}'
    tail = orjson.dumps(_identity(message, source, judge_model=judge_model,
                                  event_time_ms=event_time_ms))
    return b"%s,%s" % (head[:-1], tail[1:])


def _identity(message: InputMessage, source: Source, *, judge_model: str,
              event_time_ms: int) -> dict[str, Any]:
    """What a result adds to the spec's RedteamMetrics, in the record's order."""
    record = {
        "case_id": message.case.case_id,
        "metadata": message.metadata,
        "judge_model": judge_model,
        "event_time": utc_iso(event_time_ms),
        "judged_at": utc_iso(now_ms()),
        "source": source.as_dict(),
        "key": text_or_b64(source.key),
        "headers": headers_map(source.headers),
    }
    if message.trace is not None:
        record["trace"] = message.trace
    if message.run is not None:
        record["run"] = message.run
    if message.session is not None:
        record["session"] = message.session
    return record


def dlq_record(reason: str, raw: bytes | None, source: Source) -> dict[str, Any]:
    """The DLQ value: the reason, where it came from, the input's ``key`` and
    ``headers`` (as in result records), and the original bytes (base64) or, for
    big values, an excerpt plus size and digest. ``source.key`` (always plain
    base64) stays for readers written before ``key``."""
    raw = raw or b""
    record: dict[str, Any] = {
        "reason": reason,
        "source": {**source.as_dict(), "timestamp": source.timestamp_ms,
                   "key": base64.b64encode(source.key).decode() if source.key else None},
        "key": text_or_b64(source.key),
        "headers": headers_map(source.headers),
        "size": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "failed_at": utc_iso(now_ms()),
    }
    if len(raw) <= DLQ_MAX_ORIGINAL:
        record["value_base64"] = base64.b64encode(raw).decode()
    else:
        record["value_excerpt"] = raw[:_EXCERPT].decode("utf-8", "replace")
    return record
