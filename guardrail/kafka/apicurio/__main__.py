"""``python -m guardrail.kafka.apicurio fetch | run | version``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from ...errors import ConfigError
from ._app import ApicurioRegistry, apicurio_version, fetch


def main(argv: list[str] | None = None) -> int:
    """``fetch`` the pinned release, ``run`` it in the foreground until Ctrl-C, or
    print its ``version``; exit 2 with one line on errors."""
    parser = argparse.ArgumentParser(prog="python -m guardrail.kafka.apicurio",
                                     description="Apicurio Registry (in memory) on loopback.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="fetch and unpack the pinned release with Maven (once)")
    commands.add_parser("version", help="print the pinned Apicurio Registry version")
    run = commands.add_parser("run", help="run in the foreground until Ctrl-C")
    run.add_argument("--dir", type=Path, required=True, help="log folder")
    run.add_argument("--port", type=int, default=8080, help="HTTP port (8080)")
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            print(apicurio_version())
        elif args.command == "fetch":
            print(fetch())
        else:
            _run(args.dir, args.port)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _run(workdir: Path, port: int) -> None:
    registry = ApicurioRegistry(port, workdir=workdir).start()
    print(f"Apicurio Registry {apicurio_version()}: {registry.ccompat_url}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set() and registry.child is not None and registry.child.alive:
        stop.wait(0.5)
    registry.stop()


if __name__ == "__main__":
    raise SystemExit(main())
