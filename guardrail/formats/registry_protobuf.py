"""Protobuf schemas as the registry returns them (``.proto`` text), compiled at run
time with the protoc that the ``grpcio-tools`` wheel ships (nothing downloaded)::

    codec = ProtobufCodec('syntax = "proto3"; message Case { string output = 1; }')
    codec.decode(payload, [0])     # {"output": "…"}: field names as in the .proto
    codec.encode({"output": "…"})  # the first message's bytes

Messages are picked by the wire format's indexes: ``[0]`` is the file's first
message, ``[1, 0]`` the first message nested in the second. Imports of
Protobuf's well-known types (``google/protobuf/timestamp.proto`` …) resolve
from the files bundled with protoc; other imports are not supported.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .base import UndecodableRecord
from .registry_wire import SchemaUnusable

__all__ = ["ProtobufCodec", "compile_proto"]


def compile_proto(text: str) -> Any:
    """The ``FileDescriptorSet`` of one ``.proto`` text (its imports included)."""
    from google.protobuf import descriptor_pb2

    try:
        from grpc_tools import protoc
    except ImportError:
        raise SchemaUnusable("reading Protobuf schemas needs grpcio-tools "
                             "(pip install 'guardrail[registry]')") from None
    bundled = Path(protoc.__file__).with_name("_proto")
    with tempfile.TemporaryDirectory(prefix="guardrail-proto-") as tmp:
        (Path(tmp) / "schema.proto").write_text(text, encoding="utf-8")
        out = Path(tmp) / "schema.desc"
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{bundled}", "--include_imports",
                            f"--descriptor_set_out={out}", "schema.proto"])
        if code != 0 or not out.exists():
            raise SchemaUnusable("protoc cannot compile the registry's Protobuf schema")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


class ProtobufCodec:
    """One registered ``.proto`` file; its messages decoded to dicts."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str) -> None:
        from google.protobuf import descriptor_pool, json_format, message_factory

        files = compile_proto(text)
        pool = descriptor_pool.DescriptorPool()
        for proto in files.file:
            pool.Add(proto)
        mine = next(f for f in files.file if f.name == "schema.proto")
        prefix = f"{mine.package}." if mine.package else ""
        # In declaration order: the wire format's first index counts them so.
        self._top = [pool.FindMessageTypeByName(prefix + m.name) for m in mine.message_type]
        self._json_format = json_format
        self._classes: dict[tuple[int, ...], Any] = {}
        self._message_class = message_factory.GetMessageClass
        if not self._top:
            raise SchemaUnusable("the Protobuf schema defines no message")

    def _class(self, indexes: list[int]) -> Any:
        key = tuple(indexes)
        if key not in self._classes:
            try:
                message = self._top[indexes[0]]
                for index in indexes[1:]:
                    message = message.nested_types[index]
            except IndexError:
                raise UndecodableRecord(f"Protobuf message index {list(key)} is not in "
                                        "its schema") from None
            self._classes[key] = self._message_class(message)
        return self._classes[key]

    def decode(self, payload: bytes, indexes: list[int] | None = None) -> Any:
        cls = self._class(indexes or [0])
        try:
            message = cls.FromString(payload)
        except Exception as exc:  # noqa: BLE001 - DecodeError and kin: the payload's fault
            raise UndecodableRecord(f"Protobuf payload does not match its schema: "
                                    f"{str(exc)[:160]}") from None
        return self._json_format.MessageToDict(message, preserving_proto_field_name=True)

    def encode(self, record: Any, indexes: list[int] | None = None) -> bytes:
        message = self._class(indexes or [0])()
        self._json_format.ParseDict(record, message, ignore_unknown_fields=False)
        return message.SerializeToString()
