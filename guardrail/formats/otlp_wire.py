"""OTLP trace export records as bytes or JSON → ``ExportTraceServiceRequest``.

The wire half of the ``otlp`` format (:mod:`.otlp`): protobuf or OTLP/JSON, by
``content-type`` header or by sniffing; OTLP/JSON's hex ids turned into the
bytes protobuf's JSON mapping expects::

    request = request_from_bytes(record.value, {})   # protobuf or OTLP/JSON
    request = request_from_json({"resourceSpans": [...]})
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .base import Headers, UndecodableRecord, json_type, load_json

__all__ = ["request_from_bytes", "request_from_json"]

_JSON_TYPES = ("json",)
_PROTO_TYPES = ("protobuf", "x-protobuf", "proto")
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")  # JSON's whitespace


def request_from_bytes(raw: bytes, headers: Headers) -> ExportTraceServiceRequest:
    """One Kafka record value as a request, by content-type header or by sniffing."""
    declared = _declared_encoding(headers)
    if declared == "proto":
        return _parse_proto(raw)
    if declared == "json":
        return request_from_json(_load_json(raw))
    start = _LEADING_SPACE.match(raw).end()  # type: ignore[union-attr]  # * always matches
    if raw[start:start + 1] != b"{":
        return _parse_proto(raw)
    try:
        return request_from_json(_load_json(raw))
    except UndecodableRecord as json_problem:
        try:  # protobuf whose first bytes happen to read as whitespace and '{'
            return _parse_proto(raw)
        except UndecodableRecord:
            raise json_problem from None


def request_from_json(record: Any) -> ExportTraceServiceRequest:
    """An OTLP/JSON ``ExportTraceServiceRequest`` (already parsed) as a request."""
    if not isinstance(record, dict):
        raise UndecodableRecord(
            f"otlp: OTLP/JSON must be an ExportTraceServiceRequest object, got {json_type(record)}")
    prepared = _with_binary_ids(record)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(prepared, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise UndecodableRecord(f"otlp: not an OTLP/JSON trace export: {str(exc)[:300]}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # e.g. nesting past the parser's limit
        raise UndecodableRecord(f"otlp: not an OTLP/JSON trace export: {type(exc).__name__}") \
            from None
    return _checked(request)


def _declared_encoding(headers: Headers) -> str | None:
    """``json`` / ``proto`` from a content-type header, None when absent or neither."""
    value = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    if not value:
        return None
    kind = value.decode("latin-1").split(";")[0].strip().lower()
    if kind.endswith(_JSON_TYPES):
        return "json"
    if kind.endswith(_PROTO_TYPES):
        return "proto"
    return None


def _load_json(raw: bytes) -> Any:
    try:
        return load_json(raw)
    except UndecodableRecord as exc:
        raise UndecodableRecord(f"otlp: {exc}") from None


def _parse_proto(raw: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except Exception as exc:  # DecodeError, or the C parser's other complaints
        raise UndecodableRecord(
            f"otlp: value is neither OTLP protobuf nor OTLP/JSON ({str(exc)[:200]})") from None
    return _checked(request)


def _checked(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """A request with no resourceSpans is not a trace export: the Collector
    never sends empty ones, while stray bytes or JSON parse as exactly that."""
    if not request.resource_spans:
        raise UndecodableRecord("otlp: no resourceSpans: not an OTLP trace export")
    return request


def _with_binary_ids(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of the request with every span and link id as base64, which
    ``ParseDict`` reads for bytes fields (OTLP/JSON writes them as hex)."""
    return _mapped(record, ("resourceSpans", "resource_spans"), lambda rs: _mapped(
        rs, ("scopeSpans", "scope_spans"), lambda ss: _mapped(
            ss, ("spans",), _span_ids)))


def _span_ids(span: Any) -> Any:
    span = _ids(span, ("traceId", "trace_id", "spanId", "span_id", "parentSpanId",
                       "parent_span_id"))
    return _mapped(span, ("links",), lambda link: _ids(link, ("traceId", "trace_id",
                                                              "spanId", "span_id")))


def _mapped(obj: Any, keys: tuple[str, ...], change: Any) -> Any:
    """``obj`` with ``change`` applied to each item of its list under any of
    ``keys``; anything of the wrong shape passes unchanged for ParseDict to name."""
    if not isinstance(obj, dict):
        return obj
    copy = obj
    for key in keys:
        items = obj.get(key)
        if isinstance(items, list):
            copy = dict(copy) if copy is obj else copy
            copy[key] = [change(item) for item in items]
    return copy


def _ids(obj: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(obj, dict):
        return obj
    copy = dict(obj)
    for key in keys:
        if isinstance(copy.get(key), str):
            copy[key] = _id_base64(copy[key], key)
    return copy


def _id_base64(text: str, key: str) -> str:
    """A hex id (the OTLP/JSON spec) as base64; base64 itself (protobuf's JSON
    mapping, from non-conforming producers) is accepted as it is."""
    try:
        return base64.b64encode(bytes.fromhex(text)).decode()
    except ValueError:
        pass
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UndecodableRecord(f"otlp: {key} {text[:40]!r} is neither hex nor base64") from None
    return text
