"""Records in the Schema Registry wire format (``input_format``: ``avro``,
``protobuf``, ``json_schema``), read as the JSON of another format.

The decoder is pure: it reads schemas from a :class:`SchemaBook` that whoever
moves records fills first (the stream asks the registry for the ids a batch
names, :mod:`guardrail.kafka.schema_registry`), so decoding never waits::

    book = SchemaBook()
    book.learn(7, "AVRO", avro_schema_text)      # or book.unknown(7): the registry has none
    decoder = RegistryDecoder("avro", book, CaseDecoder())
    book.missing(decoder.schema_ids([raw]))       # set(): nothing to fetch
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
from .registry_wire import schema_id_of, unframe

__all__ = ["RegistryDecoder", "SchemaBook", "REGISTRY_FORMATS", "SCHEMA_TYPES"]

#: ``input_format`` / ``results_format`` value → the registry's ``schemaType``.
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
REGISTRY_FORMATS = tuple(SCHEMA_TYPES)


class SchemaBook:
    """Schemas by id, each made into a codec once; ids the registry said it does
    not have are remembered as such (their records go to the DLQ)."""

    def __init__(self) -> None:
        self._codecs: dict[int, SchemaCodec | str] = {}

    def learn(self, schema_id: int, schema_type: str | None, text: str) -> None:
        """Keep a schema the registry returned (an unusable one keeps its reason)."""
        try:
            self._codecs[schema_id] = codec_for(schema_type, text)
        except SchemaUnusable as exc:
            self._codecs[schema_id] = f"schema id {schema_id} is unusable: {exc}"

    def unknown(self, schema_id: int) -> None:
        """The registry answered that it has no schema of this id."""
        self._codecs[schema_id] = f"unknown schema id {schema_id} (the registry has none)"

    def missing(self, ids: Iterable[int]) -> set[int]:
        """The ids not asked of the registry yet."""
        return {i for i in ids if i not in self._codecs}

    def codec(self, schema_id: int) -> SchemaCodec:
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

    @staticmethod
    def schema_ids(values: Iterable[bytes | None]) -> set[int]:
        """The schema ids named by these record values (unframed ones named none)."""
        ids = (schema_id_of(v) for v in values if v)
        return {i for i in ids if i is not None}

    def record(self, raw: bytes) -> Any:
        """The JSON-ready record a framed value holds."""
        framed = unframe(raw, protobuf=self.schema_type == "PROTOBUF")
        codec = self.book.codec(framed.schema_id)
        if codec.schema_type != self.schema_type:
            raise UndecodableRecord(f"schema id {framed.schema_id} is {codec.schema_type}, "
                                    f"not {self.schema_type} as input_format {self.name} says")
        return codec.decode(framed.payload, framed.indexes)

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        return self.inner.decode_json(self.record(raw))

    def decode_json(self, record: Any) -> Decoded:
        """A file's JSON items are already decoded: read as the inner format does."""
        return self.inner.decode_json(record)
