"""The Schema Registry wire format: magic byte 0, the schema id as 4 bytes big
endian, then the payload; a Protobuf payload starts with the message indexes
(which message of the schema's file) as zig-zag varints::

    framed = frame(7, b"payload")                  # b"\\x00\\x00\\x00\\x00\\x07payload"
    unframe(framed)                                 # Framed(schema_id=7, indexes=None, payload=b"payload")
    unframe(frame(7, b"pb", indexes=[0]), protobuf=True).indexes   # [0]  (one 0 byte)

A producer may carry the schema in a header instead (``__value_schema_id``,
Confluent's ``header_schema_id_serializer``): magic byte 1 and a 16-byte schema
GUID (or 0 and a 4-byte id), then the Protobuf indexes; the value is then the
bare payload::

    from_header(b"\x01" + guid.bytes + b"\x00", protobuf=True)   # (str(guid), [0])

Pure bytes: no registry, no Kafka. A value that is not framed raises
:class:`~.base.UndecodableRecord` with the reason the DLQ record carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import UndecodableRecord

__all__ = ["Framed", "MAGIC", "SCHEMA_HEADER", "SchemaRef", "SchemaUnusable", "frame",
           "from_header", "unframe", "schema_id_of"]

MAGIC = 0
#: The header Confluent's serializers write a value's schema into, when told to.
SCHEMA_HEADER = "__value_schema_id"
_MAGIC_GUID = 1
#: A schema id (int) or GUID (its text form, as the registry's URLs take it).
SchemaRef = int | str
_HEAD = 5  # magic byte + 4-byte schema id
#: A Protobuf schema with more nesting than this is not one anybody writes.
_MAX_INDEXES = 64


class SchemaUnusable(ValueError):
    """A registry's schema text that cannot be made into a codec (its records go
    to the DLQ with this reason)."""


@dataclass(frozen=True)
class Framed:
    schema_id: int
    #: Protobuf only: the message's path in its file ([0] is the first message).
    indexes: list[int] | None
    payload: bytes


def schema_id_of(raw: bytes) -> int | None:
    """The schema id of a framed value, None when it is not framed (cheap: no copy)."""
    if len(raw) < _HEAD or raw[0] != MAGIC:
        return None
    return int.from_bytes(raw[1:_HEAD], "big")


def unframe(raw: bytes, *, protobuf: bool = False) -> Framed:
    """Split a framed value; ``protobuf`` reads the message indexes too."""
    if not raw:
        raise UndecodableRecord("value is empty, not in the schema registry wire format")
    if raw[0] != MAGIC:
        raise UndecodableRecord(f"value does not start with the schema registry magic byte 0 "
                                f"(first byte {raw[0]}): not in the registry wire format")
    if len(raw) < _HEAD:
        raise UndecodableRecord(f"value is {len(raw)} bytes, too short for a schema id")
    schema_id = int.from_bytes(raw[1:_HEAD], "big")
    if not protobuf:
        return Framed(schema_id, None, raw[_HEAD:])
    count, at = _read_varint(raw, _HEAD)
    if count == 0:  # the common case: a lone 0 stands for [0]
        return Framed(schema_id, [0], raw[at:])
    if count < 0 or count > _MAX_INDEXES:
        raise UndecodableRecord(f"bad Protobuf message index count {count}")
    indexes = []
    for _ in range(count):
        index, at = _read_varint(raw, at)
        if index < 0:
            raise UndecodableRecord(f"bad Protobuf message index {index}")
        indexes.append(index)
    return Framed(schema_id, indexes, raw[at:])


def from_header(value: bytes, *, protobuf: bool = False) -> tuple[SchemaRef, list[int] | None]:
    """The schema (id or GUID) and Protobuf indexes a ``__value_schema_id`` header holds."""
    import uuid

    if value[:1] == bytes([_MAGIC_GUID]) and len(value) >= 17:
        ref: SchemaRef = str(uuid.UUID(bytes=value[1:17]))
        rest = 17
    elif value[:1] == bytes([MAGIC]) and len(value) >= _HEAD:
        ref, rest = int.from_bytes(value[1:_HEAD], "big"), _HEAD
    else:
        raise UndecodableRecord(f"header {SCHEMA_HEADER} holds no schema id or GUID "
                                f"({len(value)} bytes)")
    if not protobuf:
        return ref, None
    return ref, unframe(bytes(_HEAD) + value[rest:], protobuf=True).indexes


def frame(schema_id: int, payload: bytes, *, indexes: list[int] | None = None) -> bytes:
    """A framed value; ``indexes`` (Protobuf) are written before the payload."""
    head = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
    if indexes is None:
        return head + payload
    if indexes == [0]:
        return head + b"\x00" + payload
    return head + _varint(len(indexes)) + b"".join(_varint(i) for i in indexes) + payload


def _varint(value: int) -> bytes:
    """Zig-zag, then base-128 little-endian groups (as Protobuf's sint64)."""
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(raw: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(raw):
            raise UndecodableRecord("value ends inside the Protobuf message indexes")
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at
        shift += 7
        if shift > 63:
            raise UndecodableRecord("Protobuf message index varint is too long")
