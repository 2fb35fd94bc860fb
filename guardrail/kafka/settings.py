"""The ``kafka`` settings group (flat names as written: ``bootstrap_servers``,
``input_topic``, ``results_topic``, ``security_protocol`` …): where the streams are and
how to reach them; part of :class:`guardrail.config.Settings`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr

from .._group_config import GROUP_CONFIG

__all__ = ["KafkaSettings"]


class KafkaSettings(BaseModel):
    """Where the streams are, and how to reach them."""

    model_config = GROUP_CONFIG

    bootstrap_servers: str | None = None
    """Kafka bootstrap servers, ``host:port`` pairs separated by commas. Unset: the
    embedded development broker at ``127.0.0.1:9092`` (``guardrail broker``)."""
    bootstrap_timeout: float = Field(default=10.0, gt=0)
    """Seconds a command waits for a bootstrap server to answer before it gives up
    with one line (exit 2) instead of retrying on."""
    input_topic: str = "model-outputs"
    """Topic of the model outputs the worker judges; ``produce`` and ``replay``
    default to it."""
    results_topic: str = "redteam-results"
    """Topic of the results: one record per judged message, keyed by its case_id."""
    dlq_topic: str = "model-outputs.dlq"
    """Dead-letter topic: one record per input that cannot be read (not JSON, wrong
    shape, too large …), with the reason and the original bytes."""
    alerts_topic: str = "redteam-alerts"
    """Topic every alert (regression, agreement, budget) is written to, besides the
    log and the webhook."""
    judgments_topic: str = "guardrail-judgments"
    """The workers' internal topic of judgment events, one per metric of a message,
    keyed by metric and group without its version; the window counts read it."""
    topic_partitions: int = Field(default=2, ge=1)
    """Partitions of every topic guardrail creates. An existing topic of the worker's
    with another count stops it at start, naming the topic."""
    topic_replication: int | None = Field(default=None, ge=1)
    """Replication factor of the topics guardrail and its worker create (changelogs
    and internal topics included); at most the number of brokers. Unset: ``min(3,
    brokers in the cluster)``. 1 on a cluster of several brokers is warned about at
    start: a topic with one replica is lost, or stalls, while its broker is down."""
    producer_idempotence: bool | None = None
    """Idempotent producers (no duplicate from a producer's own retries) for every
    record the worker writes, beside ``acks=all``. Unset: on where the brokers
    support it (Apache Kafka; the embedded broker does not)."""
    app_id: str = "guardrail"
    """The worker application's name: its consumer group, the prefix of its table
    changelog topics and the name of its local data folder. Workers with one app_id
    share the work; ``guardrail rates`` reads that app's windows."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """How clients talk to the brokers: plain, TLS (``SSL``), SASL authentication
    without TLS (``SASL_PLAINTEXT``) or with it (``SASL_SSL``)."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    """The SASL mechanism, with the ``SASL_*`` protocols."""
    sasl_username: str | None = None
    """SASL user name; the ``SASL_*`` protocols need it and ``sasl_password``."""
    sasl_password: SecretStr | None = None
    """SASL password. Secret: never printed."""
    ssl_cafile: Path | None = None
    """CA certificates (PEM) that verify the brokers with ``SSL`` or ``SASL_SSL``.
    Unset: the system's trusted CAs."""
    ssl_certfile: Path | None = None
    """Client certificate (PEM) for mutual TLS. Unset: none is presented."""
    ssl_keyfile: Path | None = None
    """Private key of ``ssl_certfile``, when the certificate file does not hold it."""
