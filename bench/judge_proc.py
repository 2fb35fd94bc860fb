"""The stand-in judge as its own process, for benchmarks.

    python bench/judge_proc.py --latency-ms 200

Like ``python -m guardrail.local.rule_judge`` (first stdout line: the base
URL; serves until SIGTERM), plus a last stdout line ``{"calls": N, ...}`` on
exit (with calls answered per epoch second), so a benchmark can count judge
calls without sharing a process (and a core) with the judge. Runs on uvloop when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import time
from typing import Any

from guardrail.local.rule_judge import JudgeServer


class CountingJudge(JudgeServer):
    """Counts calls per wall-clock second (answered, after the latency)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.per_second: collections.Counter[int] = collections.Counter()

    async def _handle(self, request: Any) -> Any:
        response = await super()._handle(request)
        self.per_second[int(time.time())] += 1
        return response


async def serve(latency_ms: float, port: int) -> dict[str, Any]:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    # max_recorded=1: the server keeps request bodies for tests; a benchmark
    # sends hundreds of thousands and needs none of them.
    async with CountingJudge(port=port, latency=latency_ms / 1000.0, max_recorded=1) as server:
        print(server.api_base, flush=True)
        await done.wait()
        return {"calls": server.calls, "errors": server.errors,
                "per_second": dict(server.per_second)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    stats = asyncio.run(serve(args.latency_ms, args.port))
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
