"""Records in the Schema Registry wire format (``input_format``: ``avro``,
``protobuf``, ``json_schema``), read as the JSON of another format.

The decoder is pure: it reads schemas from a :class:`SchemaBook` that whoever
moves records fills first (the stream asks the registry for the ids a batch
names, :mod:`guardrail.kafka.schema_registry`), so decoding never waits::

    book = SchemaBook()
    book.learn(7, "AVRO", avro_schema_text)      # or book.unknown(7): the registry has none
    decoder = RegistryDecoder("avro", book, CaseDecoder())
    book.missing(decoder.schema_ids([(raw, {})])) # set(): nothing to fetch
    decoder.decode(raw, {}).cases                 # [{"case_id": "c1", "output": "…"}]

A record without the magic byte, of a schema id the registry does not know, of
another schema type than the setting says, or whose payload does not match its
schema raises :class:`~.base.UndecodableRecord` (the DLQ reason).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Decoded, Headers, InputDecoder, UndecodableRecord
from .registry_codecs import SchemaCodec, SchemaUnusable, codec_for
from .registry_wire import SCHEMA_HEADER, SchemaRef, from_header, schema_id_of, unframe

__all__ = ["RegistryDecoder", "SchemaBook", "REGISTRY_FORMATS", "SCHEMA_TYPES"]

#: ``input_format`` / ``results_format`` value → the registry's ``schemaType``.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
REGISTRY_FORMATS = tuple(SCHEMA_TYPES)


class SchemaBook:
    """Schemas by id, each made into a codec once; ids the registry said it does
    not have are remembered as such (their records go to the DLQ)."""

    def __init__(self) -> None:
        self._codecs: dict[SchemaRef, SchemaCodec | str] = {}

    def learn(self, schema_id: SchemaRef, schema_type: str | None, text: str,
              imports: dict[str, str] | None = None) -> None:
        """Keep a schema the registry returned, with the schemas it references by
        name (an unusable one keeps its reason)."""
        try:
            self._codecs[schema_id] = codec_for(schema_type, text, imports)
        except SchemaUnusable as exc:
            self._codecs[schema_id] = f"schema id {schema_id} is unusable: {exc}"

    def unknown(self, schema_id: SchemaRef) -> None:
        """The registry answered that it has no schema of this id (or GUID)."""
        kind = "guid" if isinstance(schema_id, str) else "id"
        self._codecs[schema_id] = f"unknown schema {kind} {schema_id} (the registry has none)"

    def missing(self, ids: Iterable[SchemaRef]) -> set[SchemaRef]:
        """The ids not asked of the registry yet."""
        return {i for i in ids if i not in self._codecs}

    def codec(self, schema_id: SchemaRef) -> SchemaCodec:
        found = self._codecs.get(schema_id)
        if found is None:  # the stream fills the book first: only a misuse lands here
            raise UndecodableRecord(f"schema id {schema_id} was not fetched from the registry")
        if isinstance(found, str):
            raise UndecodableRecord(found)
        return found


class RegistryDecoder:
    """Registry-framed records of one schema type, handed on to ``inner``
    (``case``, ``otlp``, ``openai`` or ``mapping``) as the JSON they hold."""

    def __init__(self, name: str, book: SchemaBook, inner: InputDecoder) -> None:
        if name not in SCHEMA_TYPES:
            raise ValueError(f"no registry format {name!r}")
        self.name = name
        self.schema_type = SCHEMA_TYPES[name]
        self.book = book
        self.inner = inner
        self.many_per_record = inner.many_per_record

    def schema_ids(self, records: Iterable[tuple[bytes | None, Headers]]) -> set[SchemaRef]:
        """The schemas (ids, GUIDs) these ``(value, headers)`` name; unreadable ones, none."""
        found: set[SchemaRef] = set()
        for value, headers in records:
            header = headers.get(SCHEMA_HEADER)
            if header:
                try:
                    found.add(from_header(header, protobuf=self._protobuf)[0])
                except UndecodableRecord:
                    pass  # decoding says why
            elif value and (schema_id := schema_id_of(value)) is not None:
                found.add(schema_id)
        return found

    @property
    def _protobuf(self) -> bool:
        return self.schema_type == "PROTOBUF"

    def record(self, raw: bytes, headers: Headers | None = None) -> Any:
        """The JSON-ready record a framed value holds (or a bare one, its schema
        named by the ``__value_schema_id`` header)."""
        header = (headers or {}).get(SCHEMA_HEADER)
        if header:
            ref, indexes = from_header(header, protobuf=self._protobuf)
            payload = raw
        else:
            framed = unframe(raw, protobuf=self._protobuf)
            ref, indexes, payload = framed.schema_id, framed.indexes, framed.payload
        codec = self.book.codec(ref)
        if codec.schema_type != self.schema_type:
            raise UndecodableRecord(f"schema {ref} is {codec.schema_type}, "
                                    f"not {self.schema_type} as input_format {self.name} says")
        return codec.decode(payload, indexes)

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        return self.inner.decode_json(self.record(raw, headers))

    def decode_json(self, record: Any) -> Decoded:
        """A file's JSON items are already decoded: read as the inner format does."""
        return self.inner.decode_json(record)
