"""The ``registry`` settings group (flat names ``schema_registry_url``,
``schema_registry_username`` …, ``results_format``, ``dlq_format``,
``alerts_format``, ``subject_name_strategy``):
which Schema Registry the registry formats use, how to reach it, and how
results are written; part of :class:`guardrail.config.Settings`.

The commands that talk to the registry refuse a registry format without
``schema_registry_url`` (:func:`check_registry`); ``guardrail run`` and
``inputs check`` on a file never do, their records being the decoded JSON."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from .._group_config import GROUP_CONFIG
from ..errors import ConfigError

__all__ = ["RegistrySettings", "WRITTEN_FORMATS", "check_registry"]

#: The format settings' values that are the registry wire format.
_REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")
#: The format settings of the topics the worker writes (``replay`` writes no alerts).
WRITTEN_FORMATS = ("results_format", "dlq_format", "alerts_format")


class RegistrySettings(BaseModel):
    """A Schema Registry's Confluent-compatible API, for topics in its wire format."""

    model_config = GROUP_CONFIG

    schema_registry_url: str | None = None
    """Base URL of the registry's Confluent-compatible REST API
    (``http://registry:8081``; Apicurio: ``…/apis/ccompat/v7``). The registry
    formats (``input_format``, ``results_format``, ``dlq_format`` or
    ``alerts_format`` ``avro``, ``protobuf``, ``json_schema``) need it in the
    worker, ``replay`` and ``inputs check --topic``; ``guardrail run`` and
    ``inputs check`` on a file read decoded JSON, without it. Unset: no registry."""
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


def check_registry(registry: RegistrySettings, input_format: str, *,
                   writes: Iterable[str] = WRITTEN_FORMATS) -> None:
    """Refuse registry formats without ``schema_registry_url`` where a registry is
    used: :class:`~guardrail.errors.ConfigError`, naming the settings. The worker
    reads ``input_format`` and writes the topics of :data:`WRITTEN_FORMATS`;
    ``replay`` writes results and the DLQ; ``inputs check --topic`` only reads::

        check_registry(settings.registry, settings.inputs.input_format)
        check_registry(settings.registry, "avro", writes=())   # inputs check --topic
        # ConfigError: the registry formats (input_format avro) need schema_registry_url …
    """
    named = [("input_format", input_format)]
    named += [(name, getattr(registry, name)) for name in writes]
    used = [f"{name} {value}" for name, value in named if value in _REGISTRY_FORMATS]
    if used and not registry.schema_registry_url:
        raise ConfigError(f"the registry formats ({', '.join(used)}) need schema_registry_url "
                          "(the registry's Confluent-compatible API; "
                          "GUARDRAIL_SCHEMA_REGISTRY_URL)")
