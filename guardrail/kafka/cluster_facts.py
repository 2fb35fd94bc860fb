"""What the worker needs to know of the cluster before it creates anything: how
many brokers, their ``min.insync.replicas``, whether they take idempotent
producers; and the replication its topics get from that::

    facts = await cluster_facts(kafka)          # ClusterFacts(brokers=3, min_insync=2, ...)
    replication_for(kafka, facts)               # 3: min(3, brokers) when unset
    for line in replication_warnings(kafka, facts, existing={"redteam-results": 1}):
        log.warning("%s", line)

A topic with one replica on a cluster of several brokers is lost (or stalls)
while its broker is down; a replication below ``min.insync.replicas`` makes
every ``acks=all`` write fail. Both are said at start, never silently taken.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.metadata import MetadataRequest

from .settings import KafkaSettings
from .clients import check_reachable, client_options

__all__ = ["ClusterFacts", "cluster_facts", "replication_for", "replication_warnings",
           "replica_counts", "settled", "worker_topic_replicas", "describe",
           "DEFAULT_REPLICATION"]

#: Replicas a topic gets when ``topic_replication`` is unset, at most the brokers.
DEFAULT_REPLICATION = 3


@dataclass(frozen=True)
class ClusterFacts:
    brokers: int
    #: The brokers' ``min.insync.replicas`` (None: the cluster would not say).
    min_insync: int | None
    #: The brokers take idempotent producers (InitProducerId).
    idempotence: bool


async def cluster_facts(kafka: KafkaSettings) -> ClusterFacts:
    """Ask the cluster (one short-lived admin client, one probe producer);
    :class:`~guardrail.errors.ConfigError` when it cannot be reached."""
    await check_reachable(kafka)  # one clear line, not the admin client's traceback
    admin = AIOKafkaAdminClient(request_timeout_ms=15000, **client_options(kafka))
    await admin.start()
    try:
        metadata = (await admin._send_request(MetadataRequest([], False))).to_object()
        brokers = [b["node_id"] for b in metadata["brokers"]]
        min_insync = await _min_insync(admin, brokers[0]) if brokers else None
    finally:
        await admin.close()
    idempotence = (kafka.producer_idempotence if kafka.producer_idempotence is not None
                   else await _takes_idempotence(kafka))
    return ClusterFacts(brokers=len(brokers), min_insync=min_insync, idempotence=idempotence)


async def _min_insync(admin: AIOKafkaAdminClient, broker: int) -> int | None:
    with contextlib.suppress(Exception):  # a broker without DescribeConfigs: unknown
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, str(broker),
                            {"min.insync.replicas": None})])
        for resource in response.to_object()["resources"]:
            for entry in resource["config_entries"]:
                if entry["config_names"] == "min.insync.replicas":
                    return int(entry["config_value"])
    return None


async def _takes_idempotence(kafka: KafkaSettings) -> bool:
    """Start an idempotent producer: it asks the cluster for a producer id at
    once, which brokers without the feature refuse."""
    producer = AIOKafkaProducer(enable_idempotence=True, acks="all",
                                request_timeout_ms=15000, **client_options(kafka))
    # A refusal is an answer here, not an error for the log (aiokafka logs one).
    aiokafka_logger = logging.getLogger("aiokafka")
    level = aiokafka_logger.level
    aiokafka_logger.setLevel(logging.CRITICAL)
    try:
        await producer.start()
        return True
    except Exception:  # refused or not understood: plain acks=all producers
        return False
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
        aiokafka_logger.setLevel(level)


def replication_for(kafka: KafkaSettings, facts: ClusterFacts) -> int:
    """``topic_replication`` as set, else ``min(3, brokers)``."""
    if kafka.topic_replication is not None:
        return kafka.topic_replication
    return max(1, min(DEFAULT_REPLICATION, facts.brokers))


def replication_warnings(kafka: KafkaSettings, facts: ClusterFacts,
                         existing: dict[str, int]) -> list[str]:
    """What is risky about the replication: one replica on a cluster of several
    brokers, fewer replicas than ``min.insync.replicas``, and existing topics
    (``existing``: topic → replicas) below the replication configured."""
    wanted, lines = replication_for(kafka, facts), []
    if wanted == 1 and facts.brokers > 1:
        lines.append(f"topic_replication is 1 on a cluster of {facts.brokers} brokers: each "
                     "of the worker's topics lives on one broker, and while it is down its "
                     "records are unavailable, or lost with its disk; unset it for "
                     f"{min(DEFAULT_REPLICATION, facts.brokers)} replicas")
    if facts.min_insync is not None and wanted < facts.min_insync:
        lines.append(f"topic replication {wanted} is below the cluster's min.insync.replicas "
                     f"{facts.min_insync}: every acks=all write to the worker's topics fails")
    fewer = {t: n for t, n in sorted(existing.items()) if n < wanted}
    if fewer:
        names = ", ".join(f"{t!r} ({n})" for t, n in fewer.items())
        lines.append(f"existing topics with fewer replicas than the {wanted} configured: "
                     f"{names}; Kafka does not add replicas to an existing topic (use "
                     "kafka-reassign-partitions)")
    return lines


async def replica_counts(kafka: KafkaSettings, topics: list[str]) -> dict[str, int]:
    """Replicas of each existing topic (its least replicated partition's)."""
    admin = AIOKafkaAdminClient(request_timeout_ms=15000, **client_options(kafka))
    await admin.start()
    try:
        metadata = (await admin._send_request(MetadataRequest(topics, False))).to_object()
    finally:
        await admin.close()
    return {t["topic"]: min(len(p["replicas"]) for p in t["partitions"])
            for t in metadata["topics"] if t["error_code"] == 0 and t["partitions"]}


def settled(kafka: KafkaSettings, facts: ClusterFacts) -> KafkaSettings:
    """The Kafka settings a worker runs with on this cluster: ``topic_replication``
    and ``producer_idempotence`` resolved where unset."""
    return kafka.model_copy(update={"topic_replication": replication_for(kafka, facts),
                                    "producer_idempotence": facts.idempotence})


async def worker_topic_replicas(kafka: KafkaSettings, planned: list[str]) -> dict[str, int]:
    """Replicas of the worker's existing topics: the planned ones and its own
    internal ones (changelogs, run spans, session turns: ``<app_id>-…``)."""
    admin = AIOKafkaAdminClient(request_timeout_ms=15000, **client_options(kafka))
    await admin.start()
    try:
        names = await admin.list_topics()
    finally:
        await admin.close()
    ours = [t for t in names if t in planned or t.startswith(f"{kafka.app_id}-")]
    return await replica_counts(kafka, ours) if ours else {}


def describe(kafka: KafkaSettings, facts: ClusterFacts) -> str:
    """The start line: replication, the cluster it was chosen for, the producers."""
    insync = "unknown" if facts.min_insync is None else str(facts.min_insync)
    idempotence = ("on" if kafka.producer_idempotence else
                   "off (the brokers do not take idempotent producers)"
                   if not facts.idempotence else "off (producer_idempotence: false)")
    return (f"topics: {replication_for(kafka, facts)} replicas on a cluster of "
            f"{facts.brokers} broker(s), min.insync.replicas {insync}; every producer "
            f"writes with acks=all, idempotence {idempotence}")
