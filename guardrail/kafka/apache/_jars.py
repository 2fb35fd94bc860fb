"""The pinned Apache Kafka release and its jars: read the version from
``pom.xml`` beside this file, fetch the jars with Maven once into a cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...errors import ConfigError
from .._maven import copy_dependencies, pom_property

__all__ = ["KafkaUnavailable", "POM", "fetch", "jars_dir", "kafka_version", "unavailable_reason"]

#: The build file that pins the release; Maven resolves its runtime jars.
POM = Path(__file__).with_name("pom.xml")


class KafkaUnavailable(ConfigError):
    """Java, Maven or the broker's jars are missing: one line says which."""


def kafka_version() -> str:
    """The Apache Kafka version pinned in :data:`POM`."""
    version = pom_property(POM, "kafka.version")
    if version is None:
        raise KafkaUnavailable(f"{POM} names no kafka.version")
    return version


def jars_dir() -> Path:
    """Where the jars are cached: ``$GUARDRAIL_KAFKA_HOME/lib``, else
    ``~/.cache/guardrail/apache-kafka-<version>/lib``."""
    home = os.environ.get("GUARDRAIL_KAFKA_HOME")
    base = Path(home) if home else (Path.home() / ".cache" / "guardrail"
                                    / f"apache-kafka-{kafka_version()}")
    return base / "lib"


def _complete_marker() -> Path:
    return jars_dir() / ".complete"


def unavailable_reason() -> str | None:
    """Why the broker cannot start here (one line), or None when it can."""
    if not shutil.which("java"):
        return "no java on PATH (Apache Kafka needs Java 17+: apt-get install openjdk-17-jre-headless)"
    if not _complete_marker().exists():
        return (f"Apache Kafka {kafka_version()} jars are not fetched into {jars_dir()}: "
                "run python -m guardrail.kafka.apache fetch (needs Maven)")
    return None


def fetch(*, quiet: bool = True) -> Path:
    """Copy the pinned release's runtime jars into :func:`jars_dir` with Maven
    (a no-op when already there); Maven's own cache makes a second fetch local."""
    target = jars_dir()
    if _complete_marker().exists():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaUnavailable("no mvn on PATH to fetch Apache Kafka's jars "
                               "(apt-get install maven)")
    target.mkdir(parents=True, exist_ok=True)
    error = copy_dependencies(mvn, POM, target, quiet=quiet, options=("-DincludeScope=runtime",))
    if error is not None:
        raise KafkaUnavailable(f"mvn could not fetch Apache Kafka {kafka_version()}: {error}")
    _complete_marker().write_text(kafka_version() + "\n")
    return target
