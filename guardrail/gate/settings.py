"""The ``gate`` settings group (flat names as written: ``gate``, ``approved_topic``,
``held_topic``, ``gate_on_error`` …): whether the worker forwards what it judged
safe and holds the rest, and how; part of :class:`guardrail.config.Settings`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .._group_config import GROUP_CONFIG
from ..errors import ConfigError

__all__ = ["GateSettings", "GATE_ORDERS", "gate_topics", "check_gate", "check_gate_transactions"]

#: The values of ``gate_order``.
GATE_ORDERS = ("key", "partition", "none")


class GateSettings(BaseModel):
    """The gate: every input record forwarded to ``approved_topic`` when judged safe,
    to ``held_topic`` otherwise, in order, fail-closed."""

    model_config = GROUP_CONFIG

    gate: bool = False
    """Gate mode: besides its result, every input record is forwarded as it came to
    ``approved_topic`` when every case judged from it is SAFE, else to ``held_topic``
    with the reason (a record that cannot be read at all goes to the dead-letter topic,
    as always). Nothing may skip judging: a ``sample_rate`` below 1 or ``sample_rules``
    stop the worker at start."""
    approved_topic: str = "model-outputs-approved"
    """Where gate mode forwards the records judged safe (key, value and headers as they
    came, plus ``guardrail.*`` headers)."""
    held_topic: str = "model-outputs-held"
    """Where gate mode forwards the records it holds, with ``guardrail.hold_reason`` and
    the metrics and evidence that held them."""
    gate_on_error: Literal["hold", "pass"] = "hold"
    """A record the judge could not judge (error, timeout, unreadable answer, outage,
    budget cut): ``hold`` (fail-closed) or ``pass``, which approves it with
    ``guardrail.verdict: unjudged``, counted on ``/metrics`` and logged once a minute."""
    gate_unsure: Literal["hold", "pass"] = "hold"
    """A record with a metric whose P(UNSAFE) lies within ``review_band`` of its verdict
    threshold: ``hold`` (reason ``unsure``) or ``pass`` (its SAFE verdicts stand)."""
    gate_order: Literal["key", "partition", "none"] = "key"
    """The order of the forwarded records: ``key`` (a record waits for the earlier
    records of its key in its partition), ``partition`` (for every earlier record of its
    partition) or ``none`` (each as soon as it is decided)."""
    gate_hold_blocks_key: bool = False
    """A held record also holds back the later records of its key (judged, kept
    durably, not forwarded) until a reviewer releases or confirms it on ``/review``."""
    gate_session_hold: bool = False
    """A session judged UNSAFE holds its later turns (reason ``session_unsafe``) until a
    reviewer releases or confirms the session's judgment."""
    gate_max_waiting: int = Field(default=1000, ge=1)
    """Most records one worker holds between reading and forwarding (being judged,
    waiting behind an earlier record, held back behind a held one); at the limit it
    reads nothing more until some are forwarded."""
    gate_batch_within: float = Field(default=0.005, gt=0)
    """Seconds a gate-mode worker waits to fill a batch before it judges a smaller one
    (``batch_within`` in gate mode): a record's judge call starts when its batch
    leaves, and every record is judged and forwarded on its own, so the wait is only
    added latency."""
    gate_fetch_wait_ms: int = Field(default=10, ge=1, le=30_000)
    """Milliseconds a gate-mode worker's consumer waits per fetch of its input
    (``consumer_fetch_wait_ms`` in gate mode). A broker that holds every fetch for the
    whole wait, as the embedded one does, adds it to a record's way to the approved
    topic; Apache Kafka answers a fetch as soon as a record is there, so there the
    wait only paces the polls of an idle input."""
    gate_transactional: bool = False
    """Write the forwarded records, the gate's decisions and the input offsets in one
    Kafka transaction per input partition, so consumers reading ``read_committed`` see
    each record forwarded once, also across crashes (Apache Kafka; the embedded broker
    cannot show aborted transactions to such readers, and the worker refuses it there)."""
    gate_transaction_ms: int = Field(default=10, ge=1, le=5_000)
    """With ``gate_transactional``: milliseconds a partition's transaction stays open
    for more writes before it commits. A forward is visible to ``read_committed``
    readers at its transaction's commit, so this adds up to itself to their latency;
    shorter means more commits (a few requests to the brokers each; a partition with
    nothing to write commits nothing). At most 5 s: the gate asks the brokers to
    abort a transaction left open 10 s (its worker died)."""


def gate_topics(gate: GateSettings, partitions: int) -> dict[str, int]:
    """The topics gate mode writes, with their partition count: the input's, since a
    record is forwarded to the partition of the number it was read from."""
    if not gate.gate:
        return {}
    return {gate.approved_topic: partitions, gate.held_topic: partitions}


def check_gate(gate: GateSettings, sampling: Any, review: Any = None) -> None:
    """Refuse settings under which gate mode would let records through unjudged:
    :class:`~guardrail.errors.ConfigError`, naming the setting."""
    if not gate.gate:
        return
    if sampling.sample_rate < 1 or sampling.sample_rules:
        raise ConfigError(
            "gate mode judges every record, but sample_rate is "
            f"{sampling.sample_rate:g} and sample_rules has {len(sampling.sample_rules)} "
            "rule(s): unsampled records would pass unjudged. Set sample_rate 1 and no "
            "sample_rules (a judge budget still applies: what it cuts is held, reason budget)")
    needs_review = [name for name in ("gate_hold_blocks_key", "gate_session_hold")
                    if getattr(gate, name)]
    if needs_review and (review is None or review.review_users_file is None):
        raise ConfigError(
            f"{' and '.join(needs_review)} hold records back until a reviewer answers on "
            "/review, but review is off: set GUARDRAIL_REVIEW_USERS_FILE (the reviewers), "
            "or they would wait for ever")
    if gate.approved_topic == gate.held_topic:
        raise ConfigError(f"approved_topic and held_topic are both {gate.approved_topic!r}: "
                          "a consumer could not tell what was approved")


def check_gate_transactions(gate: GateSettings, facts: Any) -> None:
    """Refuse ``gate_transactional`` on brokers without transactional producers (the
    embedded one takes no idempotent producer, and shows ``read_committed`` readers
    the records of aborted transactions): :class:`~guardrail.errors.ConfigError`.
    ``facts``: :class:`guardrail.kafka.cluster_facts.ClusterFacts`."""
    if gate.gate and gate.gate_transactional and not facts.idempotence:
        raise ConfigError(
            "gate_transactional needs brokers with transactional producers (Apache Kafka); "
            "these brokers take no idempotent producer (the embedded broker, or "
            "producer_idempotence: false). Turn gate_transactional off: the gate then "
            "forwards at least once, each copy marked by guardrail.source")
