"""Apicurio Registry on loopback: a Schema Registry with a Confluent-compatible
API (``/apis/ccompat/v7``) for tests, benchmarks and trying the registry formats::

    python -m guardrail.kafka.apicurio fetch          # once: Maven copies the app
    registry = ApicurioRegistry(port=18610).start()   # in memory, ~10 s on 2 cores
    registry.ccompat_url                               # http://127.0.0.1:18610/apis/ccompat/v7
    registry.stop()

The release is pinned in ``pom.xml`` beside this file, as Apache Kafka's is
(:mod:`guardrail.kafka.apache`).
"""

from __future__ import annotations

from ._app import (ApicurioRegistry, RegistryAppUnavailable, apicurio_version, app_dir,
                   fetch, find_java, unavailable_reason)

__all__ = ["ApicurioRegistry", "RegistryAppUnavailable", "apicurio_version", "app_dir", "fetch",
           "find_java", "unavailable_reason"]
