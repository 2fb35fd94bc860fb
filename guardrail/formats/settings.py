"""The ``inputs`` settings group (flat names ``input_format``, ``input_mapping``,
``otlp_labels``, ``conversation_max_chars``, ``otlp_endpoint``); part of
:class:`guardrail.config.settings.Settings`, kept beside the formats it configures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from .._group_config import GROUP_CONFIG

__all__ = ["InputSettings", "INPUT_FORMATS"]

#: The values of ``input_format``.
INPUT_FORMATS = ("case", "otlp", "openai", "mapping", "avro", "protobuf", "json_schema")


class InputSettings(BaseModel):
    """How an input record becomes cases (:mod:`guardrail.formats`), and where
    verdicts go besides Kafka."""

    model_config = GROUP_CONFIG

    input_format: Literal["case", "otlp", "openai", "mapping",
                          "avro", "protobuf", "json_schema"] = "case"
    """How an input record becomes cases: ``case`` (guardrail's own case JSON),
    ``otlp`` (the OpenTelemetry Collector kafka exporter's spans, protobuf or
    JSON), ``openai`` (chat-completions request/response logs) or ``mapping`` (any
    JSON event, through ``input_mapping``). Left at ``case``, it becomes ``mapping``
    when ``input_mapping`` is set. ``avro``, ``protobuf`` and ``json_schema``:
    records in a Schema Registry's wire format (``schema_registry_url``), decoded,
    then read as ``schema_record_format`` says."""
    schema_record_format: Literal["case", "otlp", "openai"] = "case"
    """For the registry formats: what a decoded record is, read as the JSON of that
    format (``case``: the case's fields). ``input_mapping``, when set, is used
    instead."""
    input_mapping: dict[str, str] | None = None
    """For ``mapping``: case field (``output``, ``input``, ``messages``,
    ``metadata.<label>`` …) → JMESPath expression over the event. Unset: no
    mapping (the ``mapping`` format needs one)."""
    otlp_labels: dict[str, list[str]] = Field(default_factory=dict)
    """For ``otlp``: alerting label → span or resource attribute names, the first one
    present wins; extends and overrides the built-in ones (``model``,
    ``model_version`` …)."""
    conversation_max_chars: int = Field(default=8000, ge=200)
    """Longest rendering, in characters, of a conversation's earlier turns (the
    ``conversation`` field); the latest turns are kept, with a note of how many
    were cut."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP endpoint (``http://collector:4318``) to which the worker also exports
    every judged metric, as a ``gen_ai.evaluation.result`` log record on its span.
    Unset: no export."""

    @model_validator(mode="after")
    def _mapping_implies_format(self) -> InputSettings:
        if self.input_mapping and self.input_format == "case":
            object.__setattr__(self, "input_format", "mapping")
        if self.input_format == "mapping" and not self.input_mapping:
            raise ValueError("input_format 'mapping' needs input_mapping "
                             "(case field -> JMESPath expression)")
        return self
