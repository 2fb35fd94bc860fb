"""The registry wire format and its codecs, without a registry: framing, Avro,
JSON Schema and Protobuf payloads read as cases, and the reasons a record goes
to the DLQ. (Against a real registry and Confluent's serializers:
tests/kafka/test_schema_registry.py.)"""

from __future__ import annotations

import io

import fastavro
import orjson
import pytest

from guardrail.formats import CaseDecoder, InputSettings, build_decoder
from guardrail.formats.base import UndecodableRecord
from guardrail.formats.registry import RegistryDecoder, SchemaBook
from guardrail.formats.registry_wire import frame, schema_id_of, unframe
from guardrail.stream.envelope import BadInput, DecodedRecord, Source, decode_record

CASE_AVRO = orjson.dumps({
    "type": "record", "name": "Case", "namespace": "test",
    "fields": [{"name": "case_id", "type": "string"},
               {"name": "output", "type": "string"},
               {"name": "input", "type": ["null", "string"], "default": None},
               {"name": "metadata", "type": {"type": "map", "values": "string"}},
               {"name": "blob", "type": ["null", "bytes"], "default": None}]}).decode()
CASE_JSON_SCHEMA = orjson.dumps({
    "type": "object", "required": ["output"],
    "properties": {"case_id": {"type": "string"}, "output": {"type": "string"}}}).decode()
CASE_PROTO = """
syntax = "proto3";
package test;
message Other { string x = 1; }
message Envelope {
  message Case { string case_id = 1; string output = 2; map<string, string> metadata = 3; }
  Case case = 1;
}
"""


def avro_payload(record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(orjson.loads(CASE_AVRO)), record)
    return out.getvalue()


def book() -> SchemaBook:
    schemas = SchemaBook()
    schemas.learn(1, None, CASE_AVRO)  # the registry leaves schemaType out for Avro
    schemas.learn(2, "JSON", CASE_JSON_SCHEMA)
    schemas.unknown(404)
    return schemas


@pytest.mark.parametrize("indexes", [None, [0], [1, 0], [3, 2, 1]])
def test_framing_round_trips_with_and_without_message_indexes(indexes):
    framed = frame(70_000, b"payload", indexes=indexes)
    assert framed[:5] == b"\x00\x00\x01\x11\x70"
    assert schema_id_of(framed) == 70_000
    back = unframe(framed, protobuf=indexes is not None)
    assert (back.schema_id, back.indexes, back.payload) == (70_000, indexes, b"payload")
    if indexes == [0]:
        assert framed[5:6] == b"\x00"  # the lone 0 byte Confluent's serializer writes


@pytest.mark.parametrize("raw, reason", [
    (b'{"output": "hi"}', "magic byte 0 (first byte 123)"),
    (b"\x00\x00\x01", "too short for a schema id"),
    (b"", "value is empty")])
def test_unframed_values_say_why(raw, reason):
    with pytest.raises(UndecodableRecord, match=reason.replace("(", r"\(").replace(")", r"\)")):
        unframe(raw)
    assert schema_id_of(raw) is None


def test_an_avro_record_is_read_as_a_case_with_bytes_as_base64():
    decoder = RegistryDecoder("avro", book(), CaseDecoder())
    raw = frame(1, avro_payload({"case_id": "c1", "output": "Hello", "input": None,
                                 "metadata": {"model": "m1"}, "blob": b"\x01\x02"}))
    assert decoder.schema_ids([(raw, {}), (b"{}", {}), (None, {})]) == {1}
    (case,) = decoder.decode(raw, {}).cases
    assert case == {"case_id": "c1", "output": "Hello", "input": None,
                    "metadata": {"model": "m1"}, "blob": "AQI="}


@pytest.mark.parametrize("raw, reason", [
    (b'{"output": "plain JSON"}', "does not start with the schema registry magic byte"),
    (frame(404, b"\x02"), "unknown schema id 404 (the registry has none)"),
    (frame(1, b"\x02c1"), "Avro payload does not match its schema"),
    (frame(1, avro_payload({"case_id": "c", "output": "o", "metadata": {}}) + b"xx"),
     "2 bytes left over"),
    (frame(2, b'{"output": "json"}'), "schema 2 is JSON, not AVRO"),
    (frame(9, b""), "schema id 9 was not fetched")])
def test_records_that_cannot_be_read_go_to_the_dlq_with_their_reason(raw, reason):
    decoder = RegistryDecoder("avro", book(), CaseDecoder())
    decoded = decode_record(raw, max_bytes=10_000, source=Source("in", 0, 5), decoder=decoder)
    assert isinstance(decoded, BadInput)
    assert reason in decoded.reason


def test_json_schema_records_are_validated_against_their_schema():
    decoder = RegistryDecoder("json_schema", book(), CaseDecoder())
    assert decoder.decode(frame(2, b'{"case_id": "j", "output": "ok"}'), {}).cases == [
        {"case_id": "j", "output": "ok"}]
    with pytest.raises(UndecodableRecord, match="does not match its schema at output"):
        decoder.decode(frame(2, b'{"output": 5}'), {})
    with pytest.raises(UndecodableRecord, match="not valid JSON"):
        decoder.decode(frame(2, b"{nope"), {})


def test_protobuf_messages_are_picked_by_their_indexes_from_the_schema_text():
    schemas = SchemaBook()
    schemas.learn(3, "PROTOBUF", CASE_PROTO)
    codec = schemas.codec(3)
    nested = codec.encode({"case_id": "p1", "output": "Hi", "metadata": {"m": "v"}},
                          indexes=[1, 0])
    decoder = RegistryDecoder("protobuf", schemas, CaseDecoder())
    (case,) = decoder.decode(frame(3, nested, indexes=[1, 0]), {}).cases
    assert case == {"case_id": "p1", "output": "Hi", "metadata": {"m": "v"}}
    with pytest.raises(UndecodableRecord, match=r"index \[7\] is not in its schema"):
        decoder.decode(frame(3, nested, indexes=[7]), {})
    with pytest.raises(UndecodableRecord, match="Protobuf payload does not match"):
        decoder.decode(frame(3, b"\xff\xff\xff", indexes=[1, 0]), {})


def test_an_unusable_schema_puts_its_records_on_the_dlq_not_the_worker_down():
    schemas = SchemaBook()
    schemas.learn(5, "PROTOBUF", "this is not proto")
    schemas.learn(6, None, '{"type": "nonsense"}')
    decoder = RegistryDecoder("protobuf", schemas, CaseDecoder())
    with pytest.raises(UndecodableRecord, match="schema id 5 is unusable: protoc cannot compile"):
        decoder.decode(frame(5, b"", indexes=[0]), {})
    with pytest.raises(UndecodableRecord, match="schema id 6 is unusable: not an Avro schema"):
        RegistryDecoder("avro", schemas, CaseDecoder()).decode(frame(6, b""), {})


def test_the_settings_pick_the_registry_decoder_and_what_it_reads_the_record_as():
    avro = build_decoder(InputSettings(input_format="avro"))
    assert isinstance(avro, RegistryDecoder) and avro.inner.name == "case"
    mapped = build_decoder(InputSettings(input_format="avro",
                                         input_mapping={"output": "answer.text"}))
    assert mapped.inner.name == "mapping"
    mapped.book.learn(1, None, orjson.dumps({"type": "record", "name": "Answer", "fields": [
        {"name": "answer", "type": {"type": "record", "name": "Text",
                                    "fields": [{"name": "text", "type": "string"}]}}]}).decode())
    out = io.BytesIO()
    fastavro.schemaless_writer(out, mapped.book.codec(1).schema, {"answer": {"text": "yes"}})
    decoded = decode_record(frame(1, out.getvalue()), max_bytes=1000,
                            source=Source("in", 0, 1), decoder=mapped)
    assert isinstance(decoded, DecodedRecord)
    assert decoded.items[0][1].case.output == "yes"
    otlp = build_decoder(InputSettings(input_format="protobuf", schema_record_format="otlp"))
    assert otlp.inner.name == "otlp" and otlp.many_per_record


def test_a_base64_file_descriptor_is_read_as_the_proto_text_it_came_from():
    import base64

    from guardrail.formats.registry_protobuf import compile_proto

    (proto,) = compile_proto(CASE_PROTO).file
    schemas = SchemaBook()
    schemas.learn(4, "PROTOBUF", base64.b64encode(proto.SerializeToString()).decode())
    payload = schemas.codec(4).encode({"output": "from a descriptor"}, indexes=[1, 0])
    decoder = RegistryDecoder("protobuf", schemas, CaseDecoder())
    assert decoder.decode(frame(4, payload, indexes=[1, 0]), {}).cases == [
        {"output": "from a descriptor"}]
    proto.dependency.append("company/shared.proto")
    schemas.learn(5, "PROTOBUF", base64.b64encode(proto.SerializeToString()).decode())
    with pytest.raises(UndecodableRecord, match="imports company/shared.proto"):
        decoder.decode(frame(5, payload, indexes=[0]), {})


def test_a_schema_named_by_the_header_reads_the_bare_payload():
    import uuid

    from guardrail.formats.registry_wire import from_header

    guid = uuid.UUID("3f2a6c1e-8d4b-4e0a-9b7c-5d6e7f8a9b0c")
    schemas = book()
    schemas.learn(str(guid), None, CASE_AVRO)
    decoder = RegistryDecoder("avro", schemas, CaseDecoder())
    bare = avro_payload({"case_id": "h1", "output": "by header", "metadata": {}})
    by_guid = {"__value_schema_id": b"\x01" + guid.bytes}
    by_id = {"__value_schema_id": b"\x00\x00\x00\x00\x01"}
    assert decoder.schema_ids([(bare, by_guid), (bare, by_id), (frame(2, b"{}"), {})]) == {
        str(guid), 1, 2}
    for headers in (by_guid, by_id):
        assert decoder.decode(bare, headers).cases[0]["case_id"] == "h1"
    assert from_header(b"\x01" + guid.bytes + b"\x02\x02", protobuf=True) == (str(guid), [1])
    with pytest.raises(UndecodableRecord, match="holds no schema id or GUID"):
        decoder.decode(bare, {"__value_schema_id": b"\x07oops"})
    unknown = SchemaBook()
    unknown.unknown(str(guid))
    with pytest.raises(UndecodableRecord, match=f"unknown schema guid {guid}"):
        RegistryDecoder("avro", unknown, CaseDecoder()).decode(bare, by_guid)


def test_schemas_that_reference_others_are_read_with_their_references():
    labels = orjson.dumps({"type": "record", "name": "Labels", "namespace": "company",
                           "fields": [{"name": "model", "type": "string"}]}).decode()
    case = orjson.dumps({"type": "record", "name": "Case", "fields": [
        {"name": "output", "type": "string"}, {"name": "metadata", "type": "company.Labels"}]})
    schemas = SchemaBook()
    schemas.learn(1, None, case.decode(), {"company.Labels": labels})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schemas.codec(1).schema,
                               {"output": "hi", "metadata": {"model": "m"}})
    decoder = RegistryDecoder("avro", schemas, CaseDecoder())
    assert decoder.decode(frame(1, out.getvalue()), {}).cases == [
        {"output": "hi", "metadata": {"model": "m"}}]
    shared = 'syntax = "proto3"; package company; message Labels { string model = 1; }'
    proto = ('syntax = "proto3"; import "company/labels.proto"; '
             'message Case { string output = 1; company.Labels labels = 2; }')
    schemas.learn(2, "PROTOBUF", proto, {"company/labels.proto": shared})
    payload = schemas.codec(2).encode({"output": "yo", "labels": {"model": "m"}})
    assert RegistryDecoder("protobuf", schemas, CaseDecoder()).decode(
        frame(2, payload, indexes=[0]), {}).cases == [{"output": "yo", "labels": {"model": "m"}}]
    schemas.learn(3, "PROTOBUF", proto)  # the reference not fetched: unusable, said so
    schemas.learn(4, None, case.decode())
    with pytest.raises(UndecodableRecord, match="schema id 3 is unusable: protoc cannot"):
        schemas.codec(3)
    with pytest.raises(UndecodableRecord, match="schema id 4 is unusable: not an Avro schema"):
        schemas.codec(4)
