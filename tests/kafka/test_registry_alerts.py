"""Alerts in the registry formats (``alerts_format``) against a real Schema
Registry (Apicurio): alerts fired by the window counter, the judge budget and
the agreement tracker, written by the worker's alerts sender, are read back
field-exact by confluent-kafka's deserializers."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest

pytest.importorskip("confluent_kafka.schema_registry", reason="needs confluent-kafka[avro]")

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from support.records import (T0, agreement_tracker, budget_governor, feed_labels,  # noqa: E402
                             judgment_event, polite_judge_labels, spend_at, window_counter)

from guardrail.agents.app import _alerts_sender  # noqa: E402
from guardrail.config.settings import load_settings  # noqa: E402
from guardrail.formats.registry_results import result_schema  # noqa: E402


def fired_alerts(tmp_path) -> list[dict]:
    """One alert of each kind, fired by the code that fires it in a worker."""
    counter = window_counter()  # the default rule: over 20% UNSAFE
    for offset in range(40):
        counter.apply(judgment_event(offset, "unsafe" if offset % 2 else "safe"), 1000.0)
    governor, clock, budget_alerts, _ = budget_governor(
        sample_rate=0.8, budget_usd_per_hour=1.0, budget_min_sample_rate=0.1,
        budget_step_seconds=10)
    spend_at(governor, clock, 1000, 1.5)
    tracker, dispatcher, _ = agreement_tracker(tmp_path, [T0 / 1000 + 60])
    feed_labels(tracker, [], caught_up=True)
    feed_labels(tracker, polite_judge_labels(0, 10, ms=T0))
    alerts = [counter.dispatcher.alerts[0], budget_alerts[0], dispatcher.sent[0]]
    assert [a["kind"] for a in alerts] == ["regression", "budget", "agreement"]
    return [orjson.loads(orjson.dumps(a)) for a in alerts]  # as the JSON topic has them


def alerts_sender(settings, sent: list[tuple[bytes, bytes]]):
    """The worker's alerts sender, its producer's ``send(key, value)`` kept in ``sent``."""

    async def send(key, value):
        sent.append((key, value))

        async def acked():
            return None
        return acked()

    app = SimpleNamespace(topic=lambda *args, **kwargs: SimpleNamespace(send=send))
    return _alerts_sender(app, settings)


async def send_through_the_alerts_sender(settings, alerts) -> list[tuple[bytes, bytes]]:
    """What the worker's alerts sender hands its producer, one alert after another."""
    sent: list[tuple[bytes, bytes]] = []
    send_alert = alerts_sender(settings, sent)
    for alert in alerts:
        await send_alert(alert)
    return sent


def as_avro_reads(alert: dict) -> dict:
    """Avro has no "absent": of a baseline's ``model_version`` and ``windows`` (one
    per baseline kind, the only fields an alert may leave out), the missing one is null."""
    if not alert.get("baseline"):
        return alert
    return {**alert, "baseline": {"model_version": None, "windows": None, **alert["baseline"]}}


async def test_alerts_written_in_avro_are_read_back_field_exact(schema_registry, tmp_path):
    topic = "reg-alerts"
    alerts = fired_alerts(tmp_path)
    settings = load_settings(environ={}, alerts_format="avro", alerts_topic=topic,
                             schema_registry_url=schema_registry.ccompat_url)
    sent = await send_through_the_alerts_sender(settings, alerts)
    assert [key for key, _ in sent] == [b"toxicity", b"budget", b"toxicity"]
    client = SchemaRegistryClient({"url": schema_registry.ccompat_url})
    deserialize = AvroDeserializer(client)
    read = [deserialize(value, SerializationContext(topic, MessageField.VALUE))
            for _, value in sent]
    assert read == [as_avro_reads(alert) for alert in alerts]
    assert read[0]["baseline"]["kind"] == "previous_windows" and read[0]["examples"]
    registered = client.get_latest_version(f"{topic}-value").schema
    assert orjson.loads(registered.schema_str) == orjson.loads(result_schema("avro", "alert"))
    assert len({value[1:5] for _, value in sent}) == 1  # registered once, one schema id


async def test_protobuf_and_json_schema_alerts_under_the_record_subject(schema_registry,
                                                                        tmp_path):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf import descriptor_pool, json_format, message_factory

    from guardrail.formats.registry_protobuf import schema_files

    alerts = fired_alerts(tmp_path)
    client = SchemaRegistryClient({"url": schema_registry.ccompat_url})
    settings = load_settings(environ={}, alerts_format="json_schema", alerts_topic="reg-js-al",
                             subject_name_strategy="record",
                             schema_registry_url=schema_registry.ccompat_url)
    sent = await send_through_the_alerts_sender(settings, alerts)
    read_json = JSONDeserializer(result_schema("json_schema", "alert"),
                                 schema_registry_client=client)
    assert [read_json(v, SerializationContext("reg-js-al", MessageField.VALUE))
            for _, v in sent] == alerts
    assert "dev.guardrail.Alert" in client.get_subjects()

    pool = descriptor_pool.DescriptorPool()
    for proto in schema_files(result_schema("protobuf", "alert"))[0]:
        pool.Add(proto)
    alert_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("dev.guardrail.Alert"))
    settings = load_settings(environ={}, alerts_format="protobuf", alerts_topic="reg-pb-al",
                             schema_registry_url=schema_registry.ccompat_url)
    sent = await send_through_the_alerts_sender(settings, alerts)
    read_pb = ProtobufDeserializer(alert_type, {"use.deprecated.format": False})
    for alert, (_, value) in zip(alerts, sent):
        message = read_pb(value, SerializationContext("reg-pb-al", MessageField.VALUE))
        assert message.WhichOneof("alert") == alert["kind"]
        held = json_format.MessageToDict(getattr(message, alert["kind"]),
                                         preserving_proto_field_name=True)
        assert held["alert_id"] == alert["alert_id"] and held["reasons"] == alert["reasons"]
        assert held.get("group", {}) == alert.get("group", {})


async def test_a_registry_away_when_an_alert_fires_costs_that_record_not_the_next(
        schema_registry, tmp_path, caplog, monkeypatch):
    from guardrail.kafka.schema_registry import SchemaRegistryClient as RegistryClient
    from guardrail.stream import registry_alerts
    from guardrail.stream.alerts import AlertDispatcher

    asked = []

    def registry_client(registry_settings):
        client = RegistryClient(registry_settings)
        asked.append(client)
        if len(asked) == 2:  # the registry is back for the second alert
            client.url = schema_registry.ccompat_url
        return client

    monkeypatch.setattr(registry_alerts, "SchemaRegistryClient", registry_client)

    first, second = fired_alerts(tmp_path)[:2]
    settings = load_settings(environ={}, alerts_format="avro", alerts_topic="reg-away",
                             schema_registry_url="http://127.0.0.1:18733")  # nothing listens
    sent: list[tuple[bytes, bytes]] = []
    dispatcher = AlertDispatcher(webhook_url=None, timeout=1,
                                 send_to_topic=alerts_sender(settings, sent))
    dispatcher.dispatch(first)
    assert await dispatcher.drain() == [] and sent == []
    assert "alert not written to the alerts topic: schema registry http://127.0.0.1:18733 " \
           "does not answer" in caplog.text
    dispatcher.dispatch(second)
    assert await dispatcher.drain() == [] and len(asked) == 2
    client = SchemaRegistryClient({"url": schema_registry.ccompat_url})
    ((key, value),) = sent
    assert key == b"budget"
    assert AvroDeserializer(client)(value, SerializationContext(
        "reg-away", MessageField.VALUE)) == as_avro_reads(second)
