"""The ``registry`` settings group (flat names ``schema_registry_url``,
``schema_registry_username`` …, ``results_format``, ``dlq_format``,
``alerts_format``, ``subject_name_strategy``):
which Schema Registry the registry formats use, how to reach it, and how
results are written; part of :class:`guardrail.config.Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from .._group_config import GROUP_CONFIG

__all__ = ["RegistrySettings"]


class RegistrySettings(BaseModel):
    """A Schema Registry's Confluent-compatible API, for topics in its wire format."""

    model_config = GROUP_CONFIG

    schema_registry_url: str | None = None
    """Base URL of the registry's Confluent-compatible REST API
    (``http://registry:8081``; Apicurio: ``…/apis/ccompat/v7``). The registry
    formats (``input_format`` or ``results_format`` ``avro``, ``protobuf``,
    ``json_schema``) need it. Unset: no registry."""
    schema_registry_username: str | None = None
    """User of the registry's HTTP basic auth; with ``schema_registry_password``."""
    schema_registry_password: SecretStr | None = None
    """Password of the registry's HTTP basic auth."""
    schema_registry_cafile: Path | None = None
    """CA bundle (PEM) that signed an ``https`` registry's certificate; unset: the
    system's CAs."""
    schema_registry_timeout: float = Field(default=10.0, gt=0)
    """Seconds one registry request may take; a registry slower than that is down
    for the worker (it pauses, as in a judge outage)."""
    results_format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    """How result records are written: ``json`` (guardrail's JSON) or, in the
    registry wire format, ``avro``, ``protobuf`` or ``json_schema``, with the
    schema of ``guardrail/formats/schemas/`` registered under the results topic's
    subject (``subject_name_strategy``). The DLQ follows ``dlq_format``, alerts
    ``alerts_format``; the other topics stay JSON."""
    dlq_format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    """How DLQ records are written: ``json``, or in the registry wire format as
    ``results_format`` (schemas ``dlq_record.*``, record ``dev.guardrail.DlqRecord``,
    registered under the DLQ topic's subject)."""
    alerts_format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    """How alerts are written to ``alerts_topic``: ``json``, or in the registry wire
    format as ``results_format`` (schemas ``alert_record.*``: an Avro union of the
    three alert records, a Protobuf ``dev.guardrail.Alert`` holding one of them, a
    JSON Schema ``oneOf``), registered under the alerts topic's subject at the
    first alert. The webhook still gets the JSON."""
    subject_name_strategy: Literal["topic", "record", "topic-record"] = "topic"
    """The subject the results (DLQ, alerts) schema is registered under: ``topic``
    (``<results_topic>-value``), ``record`` (the record's full name,
    ``dev.guardrail.RedteamResult``) or ``topic-record`` (both, joined by ``-``),
    as the Confluent serializers name them."""
