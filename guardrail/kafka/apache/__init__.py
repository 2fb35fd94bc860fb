"""Apache Kafka itself, as a single-node KRaft broker on loopback, without Docker.

The release pinned in ``pom.xml`` (beside this file) is fetched with Maven
into a cache folder once, then formatted and started as a combined controller
and broker with a fresh log directory. The tests, ``bench/`` and anyone who
wants to try guardrail on the real thing use it the same way::

    python -m guardrail.kafka.apache fetch                  # once: the jars into the cache
    python -m guardrail.kafka.apache start --port 9092 --dir kafka-data
    python -m guardrail.kafka.apache stop --dir kafka-data

or from Python::

    with ApacheKafkaBroker(workdir=tmp) as broker:
        print(broker.bootstrap)      # "127.0.0.1:40123"

A replicated cluster of N such nodes (:class:`ApacheKafkaCluster`: replication
``min(3, N)``, ``min.insync.replicas`` 2) is for what only a cluster shows: a
broker killed, restarted or paused under a running worker.

Secured listeners (SASL_PLAINTEXT, and SASL_SSL with TLS certificates from
:func:`make_tls_files`, both SCRAM-SHA-512) are opt-in, beside the plaintext
listener the broker always keeps for itself and for admin work.
"""

from ._broker import SCRAM_MECHANISM, ApacheKafkaBroker, Membership, wait_until_answers
from ._cluster import ApacheKafkaCluster
from ._jars import POM, KafkaUnavailable, fetch, jars_dir, kafka_version, unavailable_reason
from ._tls import TlsFiles, make_tls_files

__all__ = ["ApacheKafkaBroker", "ApacheKafkaCluster", "Membership", "KafkaUnavailable", "POM", "SCRAM_MECHANISM", "TlsFiles",
           "fetch", "jars_dir", "kafka_version", "make_tls_files", "unavailable_reason",
           "wait_until_answers"]
