"""OTLP attributes as plain Python, and the metadata labels read from them.

Shared by the per-span ``otlp`` format (:mod:`.otlp`) and agent runs
(:mod:`guardrail.assembly.runs`)::

    attrs = _attributes(span.attributes)      # {"gen_ai.request.model": "gpt-4o", ...}
    _label_values(DEFAULT_LABELS, attrs, resource)   # {"model": "gpt-4o", ...}
    _trace(span.trace_id, span.span_id)       # {"trace_id": hex, "span_id": hex} or None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["DEFAULT_LABELS", "_attributes", "_label_values", "_trace", "_value_of"]

#: The metadata labels read by default: label → attribute names, tried in order
#: (each on the span, then on the resource); the decoder's ``labels`` extend it.
DEFAULT_LABELS: dict[str, tuple[str, ...]] = {
    "model": ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name",
              "llm.response.model_name", "llm.request.model_name",
              "langfuse.observation.model.name", "ai.response.model", "ai.model.id",
              "mlflow.llm.model"),
    # Langfuse's release is the one version its users set (its resource has none).
    "model_version": ("langfuse.release", "service.version"),
    "prompt_version": ("gen_ai.prompt.version", "llm.prompt_template.version",
                       "prompt.version", "prompt_version"),
    "service": ("service.name",),
    "environment": ("deployment.environment.name", "deployment.environment",
                    "langfuse.environment"),
    "user": ("user.id", "langfuse.user.id", "ai.telemetry.metadata.userId"),
    "provider": ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"),
}


def _value_of(value: AnyValue) -> Any:
    """An ``AnyValue`` as Python: str, bool, int, float, bytes, list, or dict (kvlist)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _attributes(key_values: Any) -> dict[str, Any]:
    """Repeated ``KeyValue`` as a dict (the last of a repeated key wins)."""
    return {kv.key: _value_of(kv.value) for kv in key_values}


def _label_values(labels: Mapping[str, Sequence[str]], attrs: Mapping[str, Any],
                 resource: Mapping[str, Any]) -> dict[str, str]:
    """Metadata labels: per label, the first of its names present on the span,
    else on the resource; scalars as strings, arrays and maps skipped."""
    found: dict[str, str] = {}
    for label, names in labels.items():
        for name in names:
            value = _label(attrs.get(name))
            if value is None:
                value = _label(resource.get(name))
            if value is not None:
                found[label] = value
                break
    return found


def _label(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value:
        return value
    return None


def _trace(trace_id: bytes, span_id: bytes) -> dict[str, str] | None:
    """Hex ids, when both are of W3C size and not all zero (the invalid ids)."""
    if len(trace_id) != 16 or len(span_id) != 8 or not any(trace_id) or not any(span_id):
        return None
    return {"trace_id": trace_id.hex(), "span_id": span_id.hex()}
