"""A registered schema as a codec: payload bytes ↔ a JSON-ready record.

The registry returns a schema's type (``AVRO`` when it says none, ``PROTOBUF``,
``JSON``) and text; :func:`codec_for` makes the codec once, and it is kept by
schema id (:class:`~.registry.SchemaBook`)::

    codec = codec_for("AVRO", '{"type": "record", "name": "Case", "fields": [...]}')
    record = codec.decode(payload)          # {"case_id": "c1", "output": "…"}
    payload = codec.encode(record)

Decoded records hold only JSON types (bytes as base64 text, times as ISO-8601,
decimals as numbers), so every input format reads them as it reads JSON.
A payload the schema cannot read raises :class:`~.base.UndecodableRecord`.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import uuid
from decimal import Decimal
from typing import Any, Protocol

import orjson

from .base import UndecodableRecord
from .registry_wire import SchemaUnusable

__all__ = ["SchemaCodec", "AvroCodec", "JsonSchemaCodec", "SchemaUnusable", "codec_for",
           "jsonable"]


class SchemaCodec(Protocol):
    #: ``AVRO``, ``PROTOBUF`` or ``JSON``: the registry's ``schemaType``.
    schema_type: str

    def decode(self, payload: bytes, indexes: list[int] | None = None) -> Any: ...

    def encode(self, record: Any) -> bytes: ...


def codec_for(schema_type: str | None, text: str,
              imports: dict[str, str] | None = None) -> SchemaCodec:
    """The codec of a registry schema (``schema_type`` None means Avro, as the API
    says); ``imports`` are the schemas it references, by name, dependencies first."""
    kind = (schema_type or "AVRO").upper()
    if kind == "AVRO":
        return AvroCodec(text, imports)
    if kind == "JSON":
        if imports:
            raise SchemaUnusable("JSON Schemas that reference other schemas are not read")
        return JsonSchemaCodec(text)
    if kind == "PROTOBUF":
        from .registry_protobuf import ProtobufCodec  # protoc is loaded only when used

        return ProtobufCodec(text, imports)
    raise SchemaUnusable(f"schema type {schema_type!r} is not one guardrail reads")


def jsonable(value: Any) -> Any:
    """Avro's and Protobuf's Python values as JSON types (recursively)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _has_special(value: Any) -> bool:
    """True when a decoded value holds anything but JSON types (rare: skip the copy)."""
    if isinstance(value, dict):
        return any(_has_special(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_special(v) for v in value)
    return not isinstance(value, (str, int, float, bool, type(None)))


class AvroCodec:
    """Avro's binary encoding without a container (what the registry frames)."""

    schema_type = "AVRO"

    def __init__(self, text: str, imports: dict[str, str] | None = None) -> None:
        import fastavro

        self._fastavro = fastavro
        named: dict[str, Any] = {}  # the referenced named types, known to the schema
        try:
            for referenced in (imports or {}).values():
                fastavro.parse_schema(orjson.loads(referenced), named_schemas=named)
            self.schema = fastavro.parse_schema(orjson.loads(text), named_schemas=named)
        except Exception as exc:  # noqa: BLE001 - any parse failure is an unusable schema
            raise SchemaUnusable(f"not an Avro schema guardrail can read: {exc}") from None

    def decode(self, payload: bytes, indexes: list[int] | None = None) -> Any:
        buffer = io.BytesIO(payload)
        try:
            record = self._fastavro.schemaless_reader(buffer, self.schema, None)
        except Exception as exc:  # noqa: BLE001 - a payload of another shape fails anyhow
            raise UndecodableRecord(f"Avro payload does not match its schema: "
                                    f"{type(exc).__name__}: {str(exc)[:160]}") from None
        if buffer.tell() != len(payload):
            raise UndecodableRecord(f"Avro payload does not match its schema: "
                                    f"{len(payload) - buffer.tell()} bytes left over")
        return jsonable(record) if _has_special(record) else record

    def encode(self, record: Any) -> bytes:
        buffer = io.BytesIO()
        self._fastavro.schemaless_writer(buffer, self.schema, record)
        return buffer.getvalue()


class JsonSchemaCodec:
    """JSON text checked against its JSON Schema (the payload is plain JSON)."""

    schema_type = "JSON"

    def __init__(self, text: str) -> None:
        import jsonschema

        try:
            schema = orjson.loads(text)
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except (orjson.JSONDecodeError, jsonschema.SchemaError, TypeError) as exc:
            raise SchemaUnusable(f"not a JSON Schema guardrail can read: "
                                 f"{str(exc).splitlines()[0][:200]}") from None
        self.validator = cls(schema)

    def decode(self, payload: bytes, indexes: list[int] | None = None) -> Any:
        try:
            record = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise UndecodableRecord(f"JSON Schema payload is not valid JSON: "
                                    f"{str(exc)[:160]}") from None
        try:
            error = next(iter(self.validator.iter_errors(record)), None)
        except Exception as exc:  # noqa: BLE001 - e.g. a $ref the schema cannot resolve
            raise UndecodableRecord(f"JSON payload cannot be checked against its schema: "
                                    f"{type(exc).__name__}: {str(exc)[:160]}") from None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "the record"
            raise UndecodableRecord(f"JSON payload does not match its schema at {where}: "
                                    f"{error.message[:160]}")
        return record

    def encode(self, record: Any) -> bytes:
        return orjson.dumps(record)
