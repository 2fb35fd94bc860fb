"""``python -m guardrail.kafka.apache fetch | start | stop | run | version``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from ...errors import ConfigError
from ._broker import ApacheKafkaBroker, _terminate
from ._jars import fetch, kafka_version


def _stop_detached(workdir: Path, timeout: float = 30.0) -> bool:
    """Stop the broker whose pid ``start --dir`` wrote; False if none ran."""
    pid_file = workdir / "broker.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())

    def wait(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        raise subprocess.TimeoutExpired("kafka", seconds)

    _terminate(pid, wait, timeout)
    pid_file.unlink()
    return True


def main(argv: list[str] | None = None) -> int:
    """``fetch`` | ``start`` | ``stop`` | ``run`` | ``version``; exit 2 with one line on errors."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m guardrail.kafka.apache",
                                     description="A single-node Apache Kafka (KRaft) on loopback.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="fetch the pinned release's jars with Maven (once)")
    commands.add_parser("version", help="print the pinned Apache Kafka version")
    for name, text in (("start", "start in the background and wait until it answers"),
                       ("run", "run in the foreground until Ctrl-C"),
                       ("stop", "stop the broker started with start --dir")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--dir", type=Path, required=True, help="data and log folder")
        if name != "stop":
            sub.add_argument("--port", type=int, default=9092, help="plaintext port (9092)")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(kafka_version())
        elif args.command == "fetch":
            print(fetch())
        elif args.command == "stop":
            print("stopped" if _stop_detached(args.dir) else f"no broker.pid in {args.dir}")
        else:
            return _start_command(args.dir, args.port, foreground=args.command == "run")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _start_command(workdir: Path, port: int, *, foreground: bool) -> int:
    broker = ApacheKafkaBroker(port, workdir=workdir).start(detach=not foreground)
    print(f"Apache Kafka {kafka_version()} on {broker.bootstrap} (log: {broker.log_path})",
          flush=True)
    if not foreground:
        return 0
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set() and broker.process is not None and broker.process.poll() is None:
        stop.wait(0.5)
    broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
