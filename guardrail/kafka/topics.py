"""Create the topics guardrail uses, with matching partition counts.

Auto-created topics get the broker's default partition count, which breaks
Faust's co-partitioning (``PartitionsMismatch``); so topics are created
explicitly, and existing ones that disagree are a clear error::

    await ensure_topics(kafka)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from ..errors import ConfigError
from .clients import check_reachable, client_options
from .settings import KafkaSettings

__all__ = ["TopicMismatch", "topic_plan", "ensure_topics", "partition_counts",
           "partition_count"]

log = logging.getLogger("guardrail.kafka")

_TOPIC_ALREADY_EXISTS = 36


class TopicMismatch(ConfigError):
    """An existing topic has a different partition count than guardrail needs."""


def topic_plan(kafka: KafkaSettings) -> dict[str, int]:
    """Every topic the worker reads or writes, with its partition count."""
    n = kafka.topic_partitions
    return {kafka.input_topic: n, kafka.results_topic: n, kafka.dlq_topic: n,
            kafka.alerts_topic: n, kafka.judgments_topic: n}


async def partition_counts(admin: AIOKafkaAdminClient, topics: list[str], *,
                           node_id: int | None = None) -> dict[str, int | None]:
    """Partition count per topic (None: missing) as one broker (``node_id``, else
    any) knows it. Never auto-creates."""
    request = MetadataRequest(topics, allow_auto_topic_creation=False)
    response = await admin._send_request(request, node_id)  # no public call skips auto-create
    return {t["topic"]: (len(t["partitions"]) if t["error_code"] == 0 else None)
            for t in response.to_object()["topics"]}


async def _visible_counts(admin: AIOKafkaAdminClient, topics: list[str], *,
                          timeout: float = 15.0) -> dict[str, int | None]:
    """:func:`partition_counts` once every broker lists every topic. Apache Kafka
    answers CreateTopics before its brokers learn the new topics, one after the
    other; a consumer whose metadata comes from one still ignorant of its input
    topic leaves the topic out of its group's assignment until its next metadata
    refresh, minutes later. The embedded broker lists them at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        seen = await _answers_per_broker(admin, topics)
        have = {t: _agreed(answer.get(t) for answer in seen) for t in topics}
        if all(have[t] is not None for t in topics):
            return have
        if loop.time() > deadline:  # as the first broker that lists it says
            return {t: next((a[t] for a in seen if a.get(t) is not None), None) for t in topics}
        await asyncio.sleep(0.1)


async def _answers_per_broker(admin: AIOKafkaAdminClient, topics: list[str]
                              ) -> list[dict[str, int | None]]:
    """:func:`partition_counts` of each broker that answers (a broker that does not
    serves no consumer either); of any broker if none does."""
    answers = []
    for broker in admin._client.cluster.brokers():
        try:
            answers.append(await partition_counts(admin, topics, node_id=broker.nodeId))
        except (KafkaError, OSError, TimeoutError) as exc:
            log.debug("broker %s did not answer for topic metadata: %s", broker.nodeId, exc)
    return answers or [await partition_counts(admin, topics)]


def _agreed(counts: Iterable[int | None]) -> int | None:
    """The count every broker gives (None while one differs or lacks the topic)."""
    distinct = set(counts)
    return distinct.pop() if len(distinct) == 1 else None


async def partition_count(kafka: KafkaSettings, topic: str) -> int | None:
    """Partition count of one topic (None: missing), through a short-lived admin
    client. A consumer's own metadata is no substitute: on Apache Kafka it
    lists only the topics the consumer was asked about."""
    admin = AIOKafkaAdminClient(request_timeout_ms=15000, **client_options(kafka))
    try:
        await admin.start()
        return (await partition_counts(admin, [topic])).get(topic)
    finally:
        await admin.close()


async def _default_replication(admin: AIOKafkaAdminClient) -> int:
    """``min(3, brokers)``: what an unset ``topic_replication`` means."""
    from .cluster_facts import DEFAULT_REPLICATION

    metadata = (await admin._send_request(MetadataRequest([], False))).to_object()
    return max(1, min(DEFAULT_REPLICATION, len(metadata["brokers"])))


async def ensure_topics(kafka: KafkaSettings, plan: dict[str, int] | None = None,
                        *, strict: frozenset[str] | None = None,
                        compacted: frozenset[str] = frozenset(),
                        configs: Mapping[str, Mapping[str, str]] | None = None,
                        ) -> dict[str, int]:
    """Create missing topics; raise :class:`TopicMismatch` where counts disagree,
    :class:`ConfigError` when the brokers cannot be reached (``check_reachable``).

    ``strict`` names the topics whose count must match (default: all in the plan);
    ``compacted`` ones are created with ``cleanup.policy=compact`` (latest per key),
    and ``configs`` gives a topic its own topic configs. Returns once every
    topic of the plan shows in the cluster's metadata (or after 15 s).
    """
    plan = plan or topic_plan(kafka)
    strict = frozenset(plan) if strict is None else strict
    await check_reachable(kafka)  # one clear line, not the admin client's traceback
    admin = AIOKafkaAdminClient(request_timeout_ms=15000, **client_options(kafka))
    await admin.start()
    try:
        replication = kafka.topic_replication or await _default_replication(admin)
        response = await admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=replication,
                      topic_configs={**({"cleanup.policy": "compact"} if name in compacted
                                        else {}), **(configs or {}).get(name, {})})
             for name, n in plan.items()])
        for name, code, message in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise ConfigError(f"cannot create topic {name!r}: error {code} {message or ''}")
        have = await _visible_counts(admin, list(plan))
    finally:
        await admin.close()
    wrong = {t: (have.get(t), n) for t, n in plan.items() if t in strict and have.get(t) != n}
    if wrong:
        detail = ", ".join(f"{t!r} has {h} partitions, needs {n}" for t, (h, n) in wrong.items())
        raise TopicMismatch(f"topic partition counts disagree: {detail}. Set "
                            "GUARDRAIL_TOPIC_PARTITIONS to match, or recreate the topics.")
    return {t: c for t, c in have.items() if c is not None}
