"""The ``inputs`` settings group (flat names ``input_format``, ``input_mapping``,
``otlp_labels``, ``conversation_max_chars``, ``otlp_endpoint``); part of
:class:`guardrail.settings.Settings`, kept beside the formats it configures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["InputSettings", "INPUT_FORMATS"]

#: The values of ``input_format``.
INPUT_FORMATS = ("case", "otlp", "openai", "mapping")


class InputSettings(BaseModel):
    """How an input record becomes cases (:mod:`guardrail.formats`), and where
    verdicts go besides Kafka."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: ``case`` (guardrail's own case JSON), ``otlp`` (the OpenTelemetry
    #: Collector kafka exporter's spans, protobuf or JSON), ``openai``
    #: (chat-completions request/response logs), ``mapping`` (any JSON event,
    #: through ``input_mapping``). Setting ``input_mapping`` implies ``mapping``.
    input_format: Literal["case", "otlp", "openai", "mapping"] = "case"
    #: Case field (``output``, ``input``, ``messages``, ``metadata.<label>`` …)
    #: → JMESPath expression over the event.
    input_mapping: dict[str, str] | None = None
    #: ``otlp``: alerting label → span/resource attribute names, first present
    #: wins; extends and overrides the built-in ones (``model``, ``model_version``…).
    otlp_labels: dict[str, list[str]] = Field(default_factory=dict)
    #: Longest rendering of a conversation's earlier turns (the ``conversation``
    #: field); the latest turns are kept, with a marker of how many were cut.
    conversation_max_chars: int = Field(default=8000, ge=200)
    #: OTLP/HTTP endpoint (``http://collector:4318``): every judged metric is
    #: also exported as a ``gen_ai.evaluation.result`` log record on its span.
    otlp_endpoint: str | None = None

    @model_validator(mode="after")
    def _mapping_implies_format(self) -> InputSettings:
        if self.input_mapping and self.input_format == "case":
            object.__setattr__(self, "input_format", "mapping")
        if self.input_format == "mapping" and not self.input_mapping:
            raise ValueError("input_format 'mapping' needs input_mapping "
                             "(case field -> JMESPath expression)")
        return self
