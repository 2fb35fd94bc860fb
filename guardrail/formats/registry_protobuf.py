"""Protobuf schemas as the registry returns them: ``.proto`` text, compiled at run
time with the protoc that the ``grpcio-tools`` wheel ships (nothing downloaded),
or a base64 ``FileDescriptorProto`` (what Confluent's Python serializer registers,
and a registry may hand back as it was given)::

    codec = ProtobufCodec('syntax = "proto3"; message Case { string output = 1; }')
    codec.decode(payload, [0])     # {"output": "…"}: field names as in the .proto
    codec.encode({"output": "…"})  # the first message's bytes

Messages are picked by the wire format's indexes: ``[0]`` is the file's first
message, ``[1, 0]`` the first message nested in the second. Imports of
Protobuf's well-known types (``google/protobuf/timestamp.proto`` …) resolve
from the files bundled with protoc; others from the schema's references, which
the registry client fetched (``imports``: import path → schema text)::

    ProtobufCodec(text, {"company/labels.proto": labels_text})
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from pathlib import Path
from typing import Any

from .base import UndecodableRecord
from .registry_wire import SchemaUnusable

__all__ = ["ProtobufCodec", "compile_proto", "schema_files"]

#: The well-known types a descriptor may import, registered in protobuf's default pool.
_WELL_KNOWN = ("any", "api", "duration", "empty", "field_mask", "source_context", "struct",
               "timestamp", "type", "wrappers")


def compile_proto(text: str, imports: dict[str, str] | None = None) -> Any:
    """The ``FileDescriptorSet`` of one ``.proto`` text, its imports included
    (``imports``: the ``.proto`` text of each by its import path)."""
    from google.protobuf import descriptor_pb2

    try:
        from grpc_tools import protoc
    except ImportError:
        raise SchemaUnusable("reading Protobuf schemas needs grpcio-tools "
                             "(pip install 'guardrail[registry]')") from None
    bundled = Path(protoc.__file__).with_name("_proto")
    with tempfile.TemporaryDirectory(prefix="guardrail-proto-") as tmp:
        for name, imported in (imports or {}).items():
            path = (Path(tmp) / name).resolve()
            if not path.is_relative_to(Path(tmp).resolve()) or _descriptor(imported):
                raise SchemaUnusable(f"the Protobuf schema's import {name[:80]} cannot be "
                                     "used beside .proto text")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(imported, encoding="utf-8")
        (Path(tmp) / "schema.proto").write_text(text, encoding="utf-8")
        out = Path(tmp) / "schema.desc"
        code = protoc.main(["protoc", f"-I{tmp}", f"-I{bundled}", "--include_imports",
                            f"--descriptor_set_out={out}", "schema.proto"])
        if code != 0 or not out.exists():
            raise SchemaUnusable("protoc cannot compile the registry's Protobuf schema")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _descriptor(text: str) -> Any | None:
    """The ``FileDescriptorProto`` a base64 schema holds; None for ``.proto`` text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    if "message " in text or "syntax" in text:
        return None
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, DecodeError, ValueError):
        return None
    return proto if proto.name else None


def schema_files(text: str, imports: dict[str, str] | None = None) -> tuple[list[Any], str]:
    """Every ``FileDescriptorProto`` of a registry schema, imports first, and the
    name of the schema's own file."""
    proto = _descriptor(text)
    if proto is None:
        return list(compile_proto(text, imports).file), "schema.proto"
    files: dict[str, Any] = {}
    _with_dependencies(proto, imports or {}, files)
    return list(files.values()), proto.name


def _with_dependencies(proto: Any, imports: dict[str, str], files: dict[str, Any]) -> None:
    """``proto`` into ``files`` after what it imports (well-known types, references)."""
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool

    for dependency in proto.dependency:
        if dependency in files:
            continue
        stem = dependency.removeprefix("google/protobuf/").removesuffix(".proto")
        referenced = _descriptor(imports.get(dependency, ""))
        if referenced is not None:
            _with_dependencies(referenced, imports, files)
        elif dependency.startswith("google/protobuf/") and stem in _WELL_KNOWN:
            importlib.import_module(f"google.protobuf.{stem}_pb2")
            known = descriptor_pb2.FileDescriptorProto()
            descriptor_pool.Default().FindFileByName(dependency).CopyToProto(known)
            files[dependency] = known
        else:
            raise SchemaUnusable(f"the Protobuf schema imports {dependency}, which is neither "
                                 "one of its references nor a well-known type")
    files[proto.name] = proto


class ProtobufCodec:
    """One registered ``.proto`` file; its messages decoded to dicts."""

    schema_type = "PROTOBUF"

    def __init__(self, text: str, imports: dict[str, str] | None = None) -> None:
        from google.protobuf import descriptor_pool, json_format, message_factory

        files, name = schema_files(text, imports)
        pool = descriptor_pool.DescriptorPool()
        try:
            for proto in files:
                pool.Add(proto)
        except (TypeError, ValueError) as exc:  # a descriptor that does not hold together
            raise SchemaUnusable(f"the Protobuf schema's descriptor is broken: {exc}") from None
        mine = next(f for f in files if f.name == name)
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
