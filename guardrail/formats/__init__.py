"""Input formats: one input record → zero, one or many cases to judge.

Pure decoding, no Kafka: the stream (:mod:`guardrail.stream.envelope`), the
batch commands and ``guardrail inputs check`` all go through one decoder::

    decoder = build_decoder(settings.inputs, settings.sessions)   # input_format, input_mapping
    decoded = decoder.decode(raw_bytes, {"content-type": b"application/x-protobuf"})
    for case in decoded.cases: ...                     # dicts in the case schema
    decoded.skipped                                    # {"no_genai_span": 1}

    cases, problems = read_cases(Path("cases.jsonl"))  # a file: JSON, a JSON array or JSON Lines

Formats:

- ``case`` (:class:`CaseDecoder`): guardrail's case JSON (the default).
- ``otlp`` (:class:`~guardrail.formats.otlp.OtlpDecoder`): the OpenTelemetry Collector
  kafka exporter's ``ExportTraceServiceRequest`` records (``otlp_proto`` or
  ``otlp_json``); every GenAI span is a case, in the OTel GenAI, OpenInference and
  OpenLLMetry conventions (:mod:`.otlp_conventions`).
- ``openai`` (:class:`~guardrail.formats.openai.OpenAIDecoder`): chat-completions
  request/response logs.
- ``mapping`` (:class:`~guardrail.formats.mapping.MappingDecoder`): any JSON event,
  fields picked by JMESPath expressions (``input_mapping``).
- ``avro``, ``protobuf``, ``json_schema`` (:class:`~guardrail.formats.registry.RegistryDecoder`):
  records in a Schema Registry's wire format, decoded with schemas from a
  :class:`~guardrail.formats.registry.SchemaBook`, then read as one of the above;
  results written back in it by :mod:`.registry_results`.

Files of cases are read by :mod:`.reader`; the ``inputs`` settings group is
:mod:`.settings`. It imports the judging core (a case's shape), never the stream,
assembly or Kafka; the OTLP decoder is imported only when chosen (protobuf).
"""

from __future__ import annotations

from typing import Any, Protocol

from .base import Decoded, Headers, InputDecoder, Notice, UndecodableRecord, load_json
from .case import CaseDecoder
from .reader import InputProblem, InputRead, read_cases, read_inputs
from .settings import InputSettings

__all__ = ["Decoded", "Headers", "InputDecoder", "Notice", "UndecodableRecord", "load_json",
           "CaseDecoder", "build_decoder", "AssociationKeys", "InputSettings", "InputProblem",
           "InputRead", "read_cases", "read_inputs"]


class AssociationKeys(Protocol):
    """The part of the ``sessions`` group the OTLP decoder reads (the group lives with
    the sessions, :mod:`guardrail.assembly.sessions`)."""

    @property
    def session_association_keys(self) -> tuple[str, ...]: ...


def build_decoder(inputs: InputSettings, sessions: AssociationKeys | None = None, *,
                  runs: Any = None, schemas: Any = None) -> InputDecoder:
    """The decoder ``inputs.input_format`` names (a bad ``input_mapping`` raises
    :class:`~guardrail.errors.ConfigError` here, at startup). For ``otlp``:
    ``sessions.session_association_keys`` are the OpenLLMetry association
    properties read as a conversation id (their default without ``sessions``),
    and ``runs`` a :class:`~guardrail.assembly.runs.routing.RunRouter` when agent runs are
    assembled (their spans then come out as ``run_spans``). For the registry
    formats, ``schemas`` is the :class:`~.registry.SchemaBook` the caller fills
    (a new, empty one when None)."""
    if inputs.input_format in ("avro", "protobuf", "json_schema"):
        from .registry import RegistryDecoder, SchemaBook

        inner = "mapping" if inputs.input_mapping else inputs.schema_record_format
        inner_decoder = build_decoder(inputs.model_copy(update={"input_format": inner}),
                                      sessions, runs=runs)
        return RegistryDecoder(inputs.input_format, schemas or SchemaBook(), inner_decoder)
    if inputs.input_format == "otlp":
        from .otlp import OtlpDecoder

        keys = sessions.session_association_keys if sessions is not None else None
        return OtlpDecoder(labels=inputs.otlp_labels, runs=runs, association_keys=keys)
    if inputs.input_format == "openai":
        from .openai import OpenAIDecoder

        return OpenAIDecoder()
    if inputs.input_format == "mapping":
        from .mapping import MappingDecoder

        return MappingDecoder(inputs.input_mapping or {})
    return CaseDecoder()
