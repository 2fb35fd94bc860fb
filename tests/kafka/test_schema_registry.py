"""The registry formats against a real Schema Registry (Apicurio, its
Confluent-compatible API): records written by confluent-kafka's own serializers
are judged, results come back through its deserializer, an unknown schema id
goes to the DLQ, and a registry that does not answer pauses the batch."""

from __future__ import annotations

import re

import orjson
import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="needs confluent-kafka[avro]")

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.json_schema import (JSONDeserializer,  # noqa: E402
                                                         JSONSerializer)
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from guardrail.formats.registry_results import result_schema  # noqa: E402
from guardrail.formats.registry_wire import frame  # noqa: E402
from guardrail.stream.envelope import Source  # noqa: E402
from guardrail.stream.processing import MessageJudge, RawMessage  # noqa: E402

CASE_AVRO = orjson.dumps({
    "type": "record", "name": "ModelOutput", "namespace": "test.registry",
    "fields": [{"name": "case_id", "type": "string"},
               {"name": "output", "type": "string"},
               {"name": "metadata", "type": {"type": "map", "values": "string"}}]}).decode()
CASE_JSON_SCHEMA = orjson.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "ModelOutput",
    "type": "object", "required": ["case_id", "output"],
    "properties": {"case_id": {"type": "string"}, "output": {"type": "string"}}}).decode()


#: The classic subject per topic, as a producer of these formats names them. Without
#: it, confluent-kafka 2.16 first asks for the topic's "associations", an API Apicurio
#: answers 404 to; that lookup once hung a run until the test's timeout.
BY_TOPIC = {"subject.name.strategy.type": "TOPIC"}
PROTO_BY_TOPIC = {"use.deprecated.format": False, **BY_TOPIC}


def case_avro(client):
    return AvroSerializer(client, CASE_AVRO, conf=BY_TOPIC)


@pytest.fixture
def client(schema_registry):
    # A request the registry leaves unanswered fails in seconds, not at the test's timeout.
    return SchemaRegistryClient({"url": schema_registry.ccompat_url, "timeout": 20})


@pytest.fixture
async def judge_for(make_settings, evaluators, schema_registry, monkeypatch):
    made, pauses = [], []

    async def pause(self, seconds):
        pauses.append(seconds)
        if len(pauses) == 2:  # the registry "comes back": the real one from now on
            self.registry.url = schema_registry.ccompat_url

    monkeypatch.setattr(MessageJudge, "_pause", pause)

    def build(**overrides):
        settings = make_settings(schema_registry_url=schema_registry.ccompat_url,
                                 judge_calls="per_metric", **overrides)
        judge = MessageJudge.from_settings(evaluators(settings), settings)
        judge.pauses = pauses
        made.append(judge)
        return judge

    yield build
    for judge in made:
        await judge.close_registry()


def _raw(topic, value, offset):
    return RawMessage(value, Source(topic, 0, offset, key=f"k{offset}".encode(),
                                    timestamp_ms=1_700_000_000_000))


async def test_avro_in_avro_out_with_confluents_serializers(client, judge_for):
    topic, results = "reg-avro-in", "reg-avro-results"
    serialize = case_avro(client)
    values = [serialize({"case_id": f"a{i}", "output": text, "metadata": {"model": "m1"}},
                        SerializationContext(topic, MessageField.VALUE))
              for i, text in enumerate(["Have a nice day", "I hate you, idiot"])]
    judge = judge_for(input_format="avro", results_format="avro", results_topic=results)
    out = await judge.process([_raw(topic, v, i) for i, v in enumerate(values)])
    written = [o for o in out if o.topic == results]
    assert len(written) == 2 and all(o.value[0] == 0 for o in written)
    deserialize = AvroDeserializer(client)
    read = [deserialize(o.value, SerializationContext(results, MessageField.VALUE))
            for o in written]
    assert [r["case_id"] for r in read] == ["a0", "a1"]
    assert read[0]["metadata"] == {"model": "m1"} and read[0]["source"]["topic"] == topic
    assert {m["name"] for m in read[0]["metrics"]} == {"bias", "toxicity"}
    assert read[1]["metrics"][0]["result"][0]["verdict"] in ("SAFE", "UNSAFE")
    assert set(read[0]["cost"]) == {"cost", "input_tokens", "output_tokens"}
    latest = client.get_latest_version(f"{results}-value")
    assert orjson.loads(latest.schema.schema_str)["name"] == "RedteamResult"
    assert orjson.loads(latest.schema.schema_str) == orjson.loads(result_schema("avro"))


async def test_json_schema_in_and_out_with_the_record_naming_strategy(client, judge_for):
    topic, results = "reg-json-in", "reg-json-results"
    value = JSONSerializer(CASE_JSON_SCHEMA, client, conf=BY_TOPIC)(
        {"case_id": "j1", "output": "Thanks for asking"},
        SerializationContext(topic, MessageField.VALUE))
    judge = judge_for(input_format="json_schema", results_format="json_schema",
                      results_topic=results, subject_name_strategy="record")
    (result,) = [o for o in await judge.process([_raw(topic, value, 0)]) if o.topic == results]
    read = JSONDeserializer(result_schema("json_schema"), schema_registry_client=client)(
        result.value, SerializationContext(results, MessageField.VALUE))
    assert read["case_id"] == "j1" and len(read["metrics"]) == 2
    assert "dev.guardrail.RedteamResult" in client.get_subjects()


async def test_unknown_ids_unframed_and_mismatched_records_go_to_the_dlq(client, judge_for):
    topic = "reg-bad-in"
    good = case_avro(client)({"case_id": "g", "output": "ok", "metadata": {}},
                                             SerializationContext(topic, MessageField.VALUE))
    judge = judge_for(input_format="avro", dlq_format="avro", dlq_topic="reg-bad-dlq")
    # A schema GUID in the header: Apicurio has no GUIDs, so none is known.
    by_guid = RawMessage(good[5:], Source(topic, 0, 4, headers=(
        ("__value_schema_id", b"\x01" + bytes(range(16))),)))
    batch = [_raw(topic, frame(987_654, b"\x02x"), 0),
             _raw(topic, b'{"case_id": "plain", "output": "json"}', 1),
             _raw(topic, good[:5] + b"\x99", 2), _raw(topic, good, 3), by_guid]
    out = await judge.process(batch)
    deserialize = AvroDeserializer(client)  # the DLQ in Avro too (dlq_format)
    dlq = [deserialize(o.value, SerializationContext(o.topic, MessageField.VALUE))
           for o in out if o.topic == "reg-bad-dlq"]
    reasons = [record["reason"] for record in dlq]
    assert dlq[1]["value_base64"] == "eyJjYXNlX2lkIjogInBsYWluIiwgIm91dHB1dCI6ICJqc29uIn0="
    assert len(reasons) == 4
    assert "unknown schema id 987654" in reasons[0]
    assert "magic byte 0" in reasons[1]
    assert "Avro payload does not match its schema" in reasons[2]
    assert "unknown schema guid 00010203-0405-0607-0809-0a0b0c0d0e0f" in reasons[3]
    assert [orjson.loads(o.value)["case_id"] for o in out if o.topic == judge.results_topic] == [
        "g"]
    assert judge.pauses == []


async def test_a_registry_that_does_not_answer_pauses_the_batch_never_the_dlq(client, judge_for):
    topic = "reg-down-in"
    value = case_avro(client)({"case_id": "d", "output": "ok", "metadata": {}},
                                              SerializationContext(topic, MessageField.VALUE))
    judge = judge_for(input_format="avro")
    judge.registry.url = "http://127.0.0.1:18699/apis/ccompat/v7"  # nothing listens there
    out = await judge.process([_raw(topic, value, 0)])
    assert judge.pauses == [1.0, 2.0]  # backoff while down, then the registry answered
    assert [o.topic for o in out if o.topic == judge.dlq_topic] == []
    assert [orjson.loads(o.value)["case_id"] for o in out if o.topic == judge.results_topic] == [
        "d"]
    assert judge.telemetry.paused._value.get() == 0


async def test_inputs_check_reads_an_avro_topic_as_the_worker_would(
        client, embedded_kafka_bootstrap, judge_server, schema_registry, tmp_path):
    from support.harness import StreamEnv, produce

    env = StreamEnv(embedded_kafka_bootstrap, judge_server.api_base, tmp_path,
                    input_format="avro", schema_registry_url=schema_registry.ccompat_url)
    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # makes the topics
    topic = env.topic("input")
    value = case_avro(client)({"case_id": "t1", "output": "fine", "metadata": {}},
                                              SerializationContext(topic, MessageField.VALUE))
    await produce(env.bootstrap, topic, [(b"t1", value, None),
                                         (b"t2", frame(424_242, b"\x00"), None)])
    check = env.cli("inputs", "check", "--topic", topic, "--json")
    lines = [orjson.loads(line) for line in check.stdout.splitlines()]
    # The two keys may land on two partitions: read in either order.
    cases = [line["cases"][0]["case_id"] for line in lines if "cases" in line]
    assert cases == ["t1"], (check.stdout, check.stderr)
    assert ["unknown schema id 424242" in line["dlq"] for line in lines if "dlq" in line] == [
        True]
    assert check.returncode == 1  # one record would go to the DLQ
    # A file holds the records decoded, as JSON: read as the format inside.
    decoded = tmp_path / "decoded.jsonl"
    decoded.write_text('{"case_id": "f1", "output": "from a file"}\n')
    from_file = env.cli("inputs", "check", str(decoded), "--json")
    assert orjson.loads(from_file.stdout)["cases"][0]["case_id"] == "f1", from_file.stderr


CASE_PROTO = """
syntax = "proto3";
package test.registry;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message ModelOutput {
  string case_id = 1;
  string output = 2;
  map<string, string> metadata = 3;
  google.protobuf.Timestamp produced = 4;
}
"""


async def test_protobuf_in_from_confluents_serializer_second_message_of_its_file(client,
                                                                                 judge_for):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pool, message_factory

    from guardrail.formats.registry_protobuf import schema_files

    pool = descriptor_pool.DescriptorPool()
    for proto in schema_files(CASE_PROTO)[0]:
        pool.Add(proto)
    model_output = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("test.registry.ModelOutput"))
    topic = "reg-proto-in"
    serialize = ProtobufSerializer(model_output, client, PROTO_BY_TOPIC)
    message = model_output(case_id="p1", output="Glad to help", metadata={"model": "m2"})
    message.produced.FromSeconds(1_700_000_000)
    value = serialize(message, SerializationContext(topic, MessageField.VALUE))
    assert value[5:7] == b"\x02\x02"  # one message index: 1, the file's second message
    judge = judge_for(input_format="protobuf")
    out = await judge.process([_raw(topic, value, 0)])
    (result,) = [orjson.loads(o.value) for o in out if o.topic == judge.results_topic]
    assert result["case_id"] == "p1" and result["metadata"] == {"model": "m2"}


def test_a_worker_judges_an_avro_topic_and_writes_avro_results_through_kafka(
        client, embedded_kafka_bootstrap, thread_judge, schema_registry, tmp_path):
    """The whole path: Confluent's serializer → Kafka → a worker process → Kafka →
    Confluent's deserializer, the results schema registered by the worker."""
    import asyncio

    from support.harness import StreamEnv, consume, consume_messages, produce

    env = StreamEnv(embedded_kafka_bootstrap, thread_judge.api_base, tmp_path,
                    input_format="avro", results_format="avro",
                    schema_registry_url=schema_registry.ccompat_url)
    assert env.cli("produce", "--input", "/dev/null").returncode == 0  # makes the topics
    topic, results = env.topic("input"), env.topic("results")
    serialize = case_avro(client)
    values = [(f"w{i}".encode(), serialize(
        {"case_id": f"w{i}", "output": "you idiot" if i % 2 else "a kind answer",
         "metadata": {"model": "m3"}}, SerializationContext(topic, MessageField.VALUE)), None)
        for i in range(6)] + [(b"bad", b"not framed", None)]
    asyncio.run(produce(env.bootstrap, topic, values))
    env.start_worker()
    try:
        written = asyncio.run(consume_messages(env.bootstrap, results, expect=6, timeout=90,
                                               settle=1))
        dlq = asyncio.run(consume(env.bootstrap, env.topic("dlq"), expect=1, timeout=30))
    finally:
        env.stop_workers()
    deserialize = AvroDeserializer(client)
    read = [deserialize(m.value, SerializationContext(results, MessageField.VALUE))
            for m in written]
    assert sorted(r["case_id"] for r in read) == [f"w{i}" for i in range(6)], env.logs()[-3000:]
    unsafe = {r["case_id"]: not m["result"][0]["passed"] for r in read for m in r["metrics"]
              if m["name"] == "toxicity"}
    assert unsafe == {f"w{i}": bool(i % 2) for i in range(6)}
    assert [d["reason"][:58] for d in dlq] == [
        "value does not start with the schema registry magic byte 0"]
    # A replay of the same topic reads and writes the same formats.
    replayed = results + "-replay"
    replay = env.cli("replay", "--from", "0", "--results-topic", replayed, "--quiet")
    assert replay.returncode == 0, replay.stderr
    summary = orjson.loads(replay.stdout.strip().splitlines()[-1])
    assert (summary["results"], summary["dlq"]) == (6, 1)
    again = asyncio.run(consume_messages(env.bootstrap, replayed, expect=6, timeout=30))
    assert sorted(deserialize(m.value, SerializationContext(replayed, MessageField.VALUE))[
        "case_id"] for m in again) == [f"w{i}" for i in range(6)]


async def test_protobuf_results_read_by_confluents_deserializer(client, judge_for):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf import descriptor_pool, message_factory

    from guardrail.formats.registry_protobuf import schema_files

    pool = descriptor_pool.DescriptorPool()
    for proto in schema_files(result_schema("protobuf"))[0]:
        pool.Add(proto)
    result_type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("dev.guardrail.RedteamResult"))
    topic, results = "reg-pb-out-in", "reg-pb-results"
    value = case_avro(client)({"case_id": "o1", "output": "sure", "metadata": {}},
                                              SerializationContext(topic, MessageField.VALUE))
    judge = judge_for(input_format="avro", results_format="protobuf", results_topic=results,
                      subject_name_strategy="topic-record")
    (out,) = [o for o in await judge.process([_raw(topic, value, 0)]) if o.topic == results]
    read = ProtobufDeserializer(result_type, {"use.deprecated.format": False})(
        out.value, SerializationContext(results, MessageField.VALUE))
    assert read.case_id == "o1" and {m.name for m in read.metrics} == {"bias", "toxicity"}
    assert read.source.topic == topic and read.judge_model
    assert f"{results}-dev.guardrail.RedteamResult" in client.get_subjects()


@pytest.fixture(scope="module")
def secured_registry(tmp_path_factory, schema_registry):
    """A second registry over HTTPS with basic auth (the first one says it can start)."""
    from guardrail._processes import port_open
    from guardrail.kafka.apache._tls import make_tls_files
    from guardrail.kafka.apicurio import ApicurioRegistry

    folder = tmp_path_factory.mktemp("secured-registry")
    port = next(p for p in range(18660, 18698, 2) if not (port_open(p) or port_open(p + 1)))
    registry = ApicurioRegistry(port, management_port=port + 1, workdir=folder,
                                tls=make_tls_files(folder / "tls"),
                                users={"guardrail": "s3cret"}).start()
    yield registry
    registry.stop()


async def test_a_registry_over_tls_with_basic_auth_and_a_wrong_password(secured_registry):
    from guardrail.kafka.registry_settings import RegistrySettings
    from guardrail.kafka.schema_registry import RegistryUnavailable, SchemaRegistryClient

    url = secured_registry.ccompat_url
    assert url.startswith("https://")
    given = {"schema_registry_url": url, "schema_registry_username": "guardrail",
             "schema_registry_password": "s3cret",
             "schema_registry_cafile": secured_registry.tls.ca_pem}
    good = RegistrySettings(**given)
    client = SchemaRegistryClient(good)
    try:
        schema_id = await client.register("tls-in-value", "AVRO", CASE_AVRO)
        assert (await client.schema(schema_id))[1]
    finally:
        await client.close()
    for wrong, says in ((RegistrySettings(**{**given, "schema_registry_password": "nope"}),
                         "answered 401 (check schema_registry_username/password)"),
                        (RegistrySettings(**{**given, "schema_registry_cafile": None}),
                         "CERTIFICATE_VERIFY_FAILED")):
        refused = SchemaRegistryClient(wrong)
        try:
            with pytest.raises(RegistryUnavailable, match=re.escape(says)):
                await refused.schema(schema_id)
        finally:
            await refused.close()


async def test_a_protobuf_schema_importing_a_registered_reference(client, judge_for, tmp_path):
    """Confluent's serializer registers an imported file as its own subject
    (``company/labels.proto``) and the schema refers to it; it is fetched too."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from google.protobuf import descriptor_pool, message_factory

    from guardrail.formats.registry_protobuf import compile_proto

    labels = 'syntax = "proto3"; package company; message Labels { string model = 1; }'
    main = ('syntax = "proto3"; package app; import "company/labels.proto"; '
            'message Answer { string case_id = 1; string output = 2; company.Labels metadata = 3; }')
    pool = descriptor_pool.DescriptorPool()
    for proto in compile_proto(main, {"company/labels.proto": labels}).file:
        pool.Add(proto)
    answer = message_factory.GetMessageClass(pool.FindMessageTypeByName("app.Answer"))
    topic = "reg-proto-refs"
    value = ProtobufSerializer(answer, client, PROTO_BY_TOPIC)(
        answer(case_id="r1", output="fine", metadata={"model": "m9"}),
        SerializationContext(topic, MessageField.VALUE))
    assert "company/labels.proto" in client.get_subjects()
    judge = judge_for(input_format="protobuf")
    out = await judge.process([_raw(topic, value, 0)])
    (result,) = [orjson.loads(o.value) for o in out if o.topic == judge.results_topic]
    assert result["case_id"] == "r1" and result["metadata"] == {"model": "m9"}
