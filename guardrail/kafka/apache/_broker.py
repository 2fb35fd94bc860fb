"""One KRaft broker process: configure, format, start, wait, stop. Alone (a
single-node cluster), or one node of :class:`~._cluster.ApacheKafkaCluster`."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ..._processes import free_port, port_open
from ...errors import ConfigError
from ._jars import KafkaUnavailable, jars_dir, unavailable_reason
from ._tls import TlsFiles

__all__ = ["ApacheKafkaBroker", "Membership", "SCRAM_MECHANISM", "wait_until_answers"]

#: SCRAM mechanism of the SASL listeners (no password crosses the wire).
SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Membership:
    """A node's place in a cluster: its id, every controller (``id@host:port``),
    the cluster's id (one for all nodes), and the replication of internal topics."""

    node_id: int
    voters: str
    cluster_id: str
    replication: int
    min_insync: int


@dataclass
class _Ports:
    plaintext: int = field(default_factory=free_port)
    controller: int = field(default_factory=free_port)
    sasl_plaintext: int | None = None
    sasl_ssl: int | None = None


class ApacheKafkaBroker:
    """One combined KRaft controller + broker process, its data in ``workdir``.

    ``scram_users`` (name → password) turns on a SASL_PLAINTEXT listener and,
    with ``tls``, a SASL_SSL one, both SCRAM-SHA-512; the users are written
    into the storage when it is formatted. ``config`` adds or overrides
    ``server.properties`` lines (e.g. ``log.cleaner.backoff.ms``).
    """

    def __init__(self, port: int | None = None, *, workdir: Path,
                 scram_users: dict[str, str] | None = None, tls: TlsFiles | None = None,
                 config: dict[str, str] | None = None, heap: str = "768m",
                 controller_port: int | None = None,
                 membership: Membership | None = None) -> None:
        self.workdir = Path(workdir)
        self.ports = _Ports(plaintext=port or free_port(),
                            controller=controller_port or free_port())
        self.membership = membership
        self.scram_users = dict(scram_users or {})
        self.tls = tls
        if self.scram_users:
            self.ports.sasl_plaintext = free_port()
            if tls is not None:
                self.ports.sasl_ssl = free_port()
        self.extra_config = dict(config or {})
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The plaintext listener."""
        return f"127.0.0.1:{self.ports.plaintext}"

    @property
    def sasl_plaintext_bootstrap(self) -> str:
        if self.ports.sasl_plaintext is None:
            raise ConfigError("this broker has no SASL_PLAINTEXT listener (no scram_users)")
        return f"127.0.0.1:{self.ports.sasl_plaintext}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        if self.ports.sasl_ssl is None:
            raise ConfigError("this broker has no SASL_SSL listener (needs scram_users and tls)")
        return f"localhost:{self.ports.sasl_ssl}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration: single node, loopback, fast group joins."""
        listeners = {"PLAINTEXT": self.ports.plaintext, "CONTROLLER": self.ports.controller}
        if self.ports.sasl_plaintext is not None:
            listeners["SASL_PLAINTEXT"] = self.ports.sasl_plaintext
        if self.ports.sasl_ssl is not None:
            listeners["SASL_SSL"] = self.ports.sasl_ssl
        hosts = {name: ("localhost" if name == "SASL_SSL" else "127.0.0.1") for name in listeners}
        member = self.membership or Membership(
            1, f"1@127.0.0.1:{self.ports.controller}", "", replication=1, min_insync=1)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(member.node_id),
            "controller.quorum.voters": member.voters,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(f"{n}://{hosts[n]}:{p}" for n, p in listeners.items()),
            "advertised.listeners": ",".join(f"{n}://{hosts[n]}:{p}" for n, p in listeners.items()
                                             if n != "CONTROLLER"),
            "listener.security.protocol.map": ",".join(f"{n}:{'PLAINTEXT' if n == 'CONTROLLER' else n}"
                                                       for n in listeners),
            "log.dirs": str(self.workdir / "data"),
            # Internal topics as replicated as the cluster allows (one node: one).
            "offsets.topic.replication.factor": str(member.replication),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(member.replication),
            "transaction.state.log.min.isr": str(member.min_insync),
            "share.coordinator.state.topic.replication.factor": str(member.replication),
            "share.coordinator.state.topic.min.isr": str(member.min_insync),
            "min.insync.replicas": str(member.min_insync),
            # A group's first join would otherwise wait 3 s for more members.
            "group.initial.rebalance.delay.ms": "0",
            # guardrail creates every topic it uses; a cluster that would
            # create a mistyped one silently hides bugs.
            "auto.create.topics.enable": "false",
            # The cleaner looks for work every second (default 15 s) so tests
            # can watch compaction happen; segments still roll per topic.
            "log.cleaner.backoff.ms": "1000",
            "log.initial.task.delay.ms": "1000",
            # Tests replay records stamped years ago: keep every record unless a
            # topic says otherwise (a real cluster keeps what its retention says).
            "log.retention.ms": "-1",
        }
        if self.scram_users:
            props["sasl.enabled.mechanisms"] = SCRAM_MECHANISM
            for name in ("sasl_plaintext", "sasl_ssl"):
                if getattr(self.ports, name) is not None:
                    props[f"listener.name.{name}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config"] = \
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        if self.tls is not None:
            props.update({"ssl.keystore.type": "PKCS12",
                          "ssl.keystore.location": str(self.tls.keystore),
                          "ssl.keystore.password": self.tls.keystore_password,
                          "ssl.key.password": self.tls.keystore_password})
        props.update(self.extra_config)
        return props

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", f"-Xmx{self.heap}", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", f"{jars_dir()}/*", main, *args]

    def _write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        (self.workdir / "log4j2.properties").write_text(_LOG4J2.format(log=self.log_path))
        return path

    def _format(self, config: Path) -> None:
        if (self.workdir / "data" / "meta.properties").exists():
            return
        cluster_id = self.membership.cluster_id if self.membership else new_cluster_id()
        scram = []
        for name, password in self.scram_users.items():
            scram += ["--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={password}]"]
        done = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                         "-c", str(config), *scram),
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise KafkaUnavailable(f"formatting the Kafka log directory failed: "
                                   f"{(done.stderr or done.stdout).strip()[-300:]}")

    def start(self, timeout: float = 60.0, *, detach: bool = False) -> ApacheKafkaBroker:
        """Format (first start only), start, and wait until a metadata request
        lists the broker; ``detach`` keeps it running after this process exits."""
        self.launch(detach=detach)
        return self.wait_ready(timeout)

    def launch(self, *, detach: bool = False) -> None:
        """Format (first start only) and start the process, without waiting: a
        cluster's nodes answer only once a majority of controllers runs."""
        reason = unavailable_reason()
        if reason:
            raise KafkaUnavailable(reason)
        config = self._write_config()
        self._format(config)
        self._out = open(self.workdir / "stdout.log", "ab")
        self.process = subprocess.Popen(self._java("kafka.Kafka", str(config)),
                                        stdout=self._out, stderr=subprocess.STDOUT,
                                        start_new_session=detach)
        (self.workdir / "broker.pid").write_text(f"{self.process.pid}\n")

    def wait_ready(self, timeout: float = 60.0) -> ApacheKafkaBroker:
        """Wait until a metadata request to this node is answered (stops it if not)."""
        process = self.process
        try:
            wait_until_answers(self.bootstrap, timeout,
                               alive=lambda: process is not None and process.poll() is None)
        except KafkaUnavailable as exc:
            self.stop()
            raise KafkaUnavailable(f"{exc}: {self.last_error() or 'see ' + str(self.log_path)}"
                                   ) from None
        return self

    def last_error(self) -> str | None:
        """The broker log's last ERROR line's message, if any."""
        if not self.log_path.exists():
            return None
        lines = self.log_path.read_text(errors="replace").splitlines()
        errors = [i for i, line in enumerate(lines) if " ERROR " in line]
        if not errors:
            return None
        following = lines[errors[-1] + 1:errors[-1] + 2]  # the exception's own line
        return (following[0] if following else lines[errors[-1]]).strip()[:300]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown writes no recovery work for the next
        start), SIGKILL after ``timeout``."""
        if self.process is not None:
            _terminate(self.process.pid, self.process.wait, timeout)
            self.process = None
        if self._out is not None:
            self._out.close()
            self._out = None

    def __enter__(self) -> ApacheKafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (base64 of a UUID, never starting with '-')."""
    cluster_id = "-"
    while cluster_id.startswith("-"):  # the formatter would read it as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
"""


def _terminate(pid: int, wait: Callable[[float], object], timeout: float) -> None:
    """SIGTERM ``pid``, ``wait`` up to ``timeout`` s for it, SIGKILL if it is still there."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        wait(10)


def wait_until_answers(bootstrap: str, timeout: float, *,
                       alive: Callable[[], bool] = lambda: True) -> None:
    """Block until a metadata request to ``bootstrap`` is answered."""
    host, _, port = bootstrap.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise KafkaUnavailable(f"Apache Kafka on {bootstrap} exited while starting")
        if port_open(int(port), host) and _answers(bootstrap):
            return
        time.sleep(0.25)
    raise KafkaUnavailable(f"Apache Kafka on {bootstrap} did not answer within {timeout:g}s")


def _answers(bootstrap: str) -> bool:
    """One try of the reachability check every guardrail command runs first."""
    from ..settings import KafkaSettings
    from ..clients import check_reachable

    kafka = KafkaSettings(bootstrap_servers=bootstrap, bootstrap_timeout=2.0)
    answer: list[bool] = []

    def probe() -> None:
        try:
            asyncio.run(check_reachable(kafka))
            answer.append(True)
        except ConfigError:  # not up yet: try again
            answer.append(False)

    # A thread of its own: the caller may already run an event loop.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(10)
    return bool(answer and answer[0])
