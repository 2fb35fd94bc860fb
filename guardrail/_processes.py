"""Child processes that are always stopped: start, watch, SIGTERM, then SIGKILL.

Children run in their own session, so a Ctrl-C in the terminal reaches only
the parent, which then stops them in a sensible order (worker before broker)::

    worker = Child.spawn("worker", [sys.executable, "-m", "guardrail.cli", "worker"],
                         log_path=out / "worker.log", env=env)
    try:
        ...
    finally:
        worker.stop()
"""

from __future__ import annotations

import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .errors import ConfigError

__all__ = ["Child", "guardrail_argv", "free_port", "port_open", "port_taken", "wait_for_port",
           "describe_exit"]


def guardrail_argv(*args: str) -> list[str]:
    """Run the guardrail CLI with this interpreter (no reliance on PATH)."""
    return [sys.executable, "-m", "guardrail.cli", *args]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing holds right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int) -> bool:
    """True when anything holds the port, listening or merely bound."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


class Child:
    """One child process with its output in a log file."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path

    @classmethod
    def spawn(cls, name: str, argv: list[str], *, log_path: Path,
              env: dict[str, str] | None = None, stdout_pipe: bool = False) -> Child:
        """Start ``argv``; stderr (and stdout unless piped) go to ``log_path``."""
        log = open(log_path, "ab")
        try:
            process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout_pipe else log, stderr=log,
                start_new_session=True)
        except OSError as exc:
            raise ConfigError(f"cannot start the {name}: {exc}") from None
        finally:
            log.close()  # the child holds its own descriptor
        return cls(name, process, log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        """Raise a clear error if the child died."""
        if not self.alive:
            raise ConfigError(f"the {self.name} exited with code {self.process.returncode}; "
                              f"see {self.log_path}")

    def read_line(self, timeout: float, waiting: Callable[[float], None] | None = None) -> str:
        """The first stdout line (e.g. a URL), waiting at most ``timeout`` seconds."""
        stream = self.process.stdout
        assert stream is not None, "spawned without stdout_pipe"
        started = time.monotonic()
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            while True:
                elapsed = time.monotonic() - started
                if elapsed > timeout:
                    raise ConfigError(f"the {self.name} did not start in {timeout:.0f}s; "
                                      f"see {self.log_path}")
                if selector.select(timeout=1.0):
                    line = stream.readline().decode("utf-8", "replace").strip()
                    if line:
                        return line
                    self.process.wait(5)  # EOF: the child is exiting
                self.check()
                if waiting is not None:
                    waiting(elapsed)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, wait, then SIGKILL; returns the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def wait_for_port(port: int, child: Child, timeout: float) -> None:
    """Wait until something listens on loopback ``port`` (the child must stay alive)."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        child.check()
        if time.monotonic() > deadline:
            raise ConfigError(f"the {child.name} did not listen on port {port} in "
                              f"{timeout:.0f}s; see {child.log_path}")
        time.sleep(0.05)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"stopped by {signal.Signals(-code).name}"
    return f"exit code {code}"

