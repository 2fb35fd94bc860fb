"""Result records in the Schema Registry wire format (``results_format``): the
JSON result the stream writes, re-encoded under the schema of ``schemas/``
registered for the results topic::

    text = result_schema("avro")                        # schemas/redteam_result.avsc
    subject = subject_name("topic-record", "redteam-results")
    # 'redteam-results-dev.guardrail.RedteamResult'
    encoder = ResultEncoder("avro", schema_id=12)
    encoder.encode(b'{"metrics": [...], "cost": {...}, "case_id": "c1", ...}')   # b"\\x00\\x00\\x00\\x00\\x0c..."

Avro has no "absent": fields the JSON leaves out are written as null, and the
free-form ``run`` and ``session`` summaries as JSON text. Protobuf leaves absent
and null fields unset (proto3 ``optional``), with ``headers``, ``run`` and
``session`` as ``Struct`` messages; its message is the file's first (index ``[0]``).
``json_schema`` keeps the JSON bytes as they are, framed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .registry import SCHEMA_TYPES
from .registry_codecs import codec_for
from .registry_wire import frame

__all__ = ["RESULT_RECORD", "SCHEMA_FILES", "ResultEncoder", "result_schema", "subject_name"]

#: The results schema's full name (the ``record`` naming strategies use it).
RESULT_RECORD = "dev.guardrail.RedteamResult"
SCHEMAS = Path(__file__).with_name("schemas")
#: ``results_format`` → the schema file registered for it.
SCHEMA_FILES = {"avro": "redteam_result.avsc", "json_schema": "redteam_result.schema.json",
                "protobuf": "redteam_result.proto"}
_FREE_FORM = ("run", "session")


def result_schema(results_format: str) -> str:
    """The schema text registered for ``results_format`` (``avro``, ``json_schema``)."""
    if results_format not in SCHEMA_FILES:
        raise ValueError(f"no results schema for {results_format!r}: "
                         f"one of {', '.join(SCHEMA_FILES)}")
    return (SCHEMAS / SCHEMA_FILES[results_format]).read_text(encoding="utf-8")


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
    """JSON result values → framed values of one registered schema id."""

    def __init__(self, results_format: str, schema_id: int) -> None:
        self.results_format = results_format
        self.schema_type = SCHEMA_TYPES[results_format]
        self.schema_id = schema_id
        self._codec = codec_for(self.schema_type, result_schema(results_format))

    @staticmethod
    def schema_type_of(results_format: str) -> str:
        """The registry's ``schemaType`` of a ``results_format``."""
        return SCHEMA_TYPES[results_format]

    def encode(self, value: bytes) -> bytes:
        """One result record's JSON as a framed value."""
        if self.schema_type == "JSON":
            return frame(self.schema_id, value)
        record: dict[str, Any] = orjson.loads(value)
        if self.schema_type == "PROTOBUF":
            return frame(self.schema_id, self._codec.encode(record), indexes=[0])
        for name in _FREE_FORM:
            if record.get(name) is not None:
                record[name] = orjson.dumps(record[name]).decode()
        return frame(self.schema_id, self._codec.encode(record))
