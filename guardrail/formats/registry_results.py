"""Result, DLQ and alert records in the Schema Registry wire format
(``results_format``, ``dlq_format``, ``alerts_format``): the JSON the stream
writes, re-encoded under the schema of ``schemas/`` registered for the topic::

    text = result_schema("avro")                        # schemas/redteam_result.avsc
    text = result_schema("protobuf", "dlq")             # schemas/dlq_record.proto
    subject = subject_name("topic-record", "redteam-results")
    # 'redteam-results-dev.guardrail.RedteamResult'
    encoder = ResultEncoder("avro", schema_id=12)
    encoder.encode(b'{"metrics": [...], "cost": {...}, "case_id": "c1", ...}')   # b"\\x00\\x00\\x00\\x00\\x0c..."
    ResultEncoder("protobuf", 13, "alert").encode(b'{"kind": "budget", ...}')

Avro has no "absent": fields the JSON leaves out are written as null, and the
free-form ``run`` and ``session`` summaries as JSON text. Protobuf leaves absent
and null fields unset (proto3 ``optional``), with ``headers``, ``run`` and
``session`` as ``Struct`` messages; its message is the file's first (index ``[0]``).
``json_schema`` keeps the JSON bytes as they are, framed.

Alerts are of three kinds: the Avro schema is a union of their records (``kind``
a one-symbol enum, so each alert matches one branch), the JSON Schema a
``oneOf``; in Protobuf the file's first message, ``Alert``, holds the alert in
its ``oneof`` under the alert's kind (``{"budget": {...}}``), so a consumer
reads every kind with one generated class.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .registry import SCHEMA_TYPES
from .registry_codecs import codec_for
from .registry_wire import frame

__all__ = ["RECORD_NAMES", "RESULT_RECORD", "SCHEMA_FILES", "ResultEncoder", "result_schema",
           "subject_name"]

#: Record kind → the schema's full name (the ``record`` naming strategies use it).
RECORD_NAMES = {"result": "dev.guardrail.RedteamResult", "dlq": "dev.guardrail.DlqRecord",
                "alert": "dev.guardrail.Alert"}
RESULT_RECORD = RECORD_NAMES["result"]
SCHEMAS = Path(__file__).with_name("schemas")
_STEMS = {"result": "redteam_result", "dlq": "dlq_record", "alert": "alert_record"}
_SUFFIXES = {"avro": ".avsc", "protobuf": ".proto", "json_schema": ".schema.json"}
#: (record kind, format) → the schema file registered for it.
SCHEMA_FILES = {(kind, fmt): stem + suffix for kind, stem in _STEMS.items()
                for fmt, suffix in _SUFFIXES.items()}
_FREE_FORM = ("run", "session")


def result_schema(fmt: str, kind: str = "result") -> str:
    """The schema text registered for a format (``avro``, ``protobuf``,
    ``json_schema``) of a record kind (``result``, ``dlq``, ``alert``)."""
    if (kind, fmt) not in SCHEMA_FILES:
        raise ValueError(f"no {kind} schema for {fmt!r}: one of {', '.join(_SUFFIXES)}")
    return (SCHEMAS / SCHEMA_FILES[kind, fmt]).read_text(encoding="utf-8")


def subject_name(strategy: str, topic: str, record: str = RESULT_RECORD) -> str:
    """The subject of a topic's values under a naming strategy, as Confluent's
    serializers name it: ``topic`` → ``<topic>-value``, ``record`` → the record's
    full name, ``topic-record`` → ``<topic>-<record>``."""
    if strategy == "topic":
        return f"{topic}-value"
    if strategy == "record":
        return record
    if strategy == "topic-record":
        return f"{topic}-{record}"
    raise ValueError(f"unknown subject name strategy {strategy!r}")


class ResultEncoder:
    """JSON record values of one kind → framed values of one registered schema id."""

    def __init__(self, fmt: str, schema_id: int, kind: str = "result") -> None:
        self.results_format = fmt
        self.schema_type = SCHEMA_TYPES[fmt]
        self.schema_id = schema_id
        self.kind = kind
        self._codec = codec_for(self.schema_type, result_schema(fmt, kind))

    @staticmethod
    def schema_type_of(fmt: str) -> str:
        """The registry's ``schemaType`` of a format."""
        return SCHEMA_TYPES[fmt]

    def encode(self, value: bytes) -> bytes:
        """One record's JSON as a framed value."""
        if self.schema_type == "JSON":
            return frame(self.schema_id, value)
        record: dict[str, Any] = orjson.loads(value)
        if self.schema_type == "PROTOBUF":
            if self.kind == "alert":  # the Alert message's oneof, set under the kind
                record = {record["kind"]: record}
            return frame(self.schema_id, self._codec.encode(record), indexes=[0])
        for name in _FREE_FORM:
            if record.get(name) is not None:
                record[name] = orjson.dumps(record[name]).decode()
        return frame(self.schema_id, self._codec.encode(record))
