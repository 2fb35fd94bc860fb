"""The stand-in judge as its own process, for benchmarks.

    python bench/judge_proc.py --latency-ms 200

Like ``python -m guardrail.local.rule_judge`` (first stdout line: the base
URL; serves until SIGTERM), plus a last stdout line ``{"calls": N, ...}`` on
exit (with calls answered per epoch second), so a benchmark can count judge
calls without sharing a process (and a core) with the judge. Runs on uvloop when it is installed.

``--prefix-cache`` makes it report ``prompt_tokens_details.cached_tokens`` as a
judge with automatic prefix caching would (vLLM, llama.cpp, a provider's prompt
cache): see :class:`BlockCache`. Its last line then also sums the usage it reported.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import signal
import time
from typing import Any

from guardrail.local.rule_judge import JudgeServer, message_text

#: Characters per token, as the rule judge counts ``prompt_tokens``.
CHARS_PER_TOKEN = 4


class BlockCache:
    """A prefix cache as vLLM's automatic prefix caching keeps one: the prompt in
    blocks of ``block_tokens`` tokens, each named by a hash of everything up to its
    end, so a block is a hit only when the whole prefix before it matches; the
    least recently used blocks go past ``capacity_blocks``. ``read`` answers the
    tokens served from the cache (whole leading blocks) and caches the prompt.

    The stand-in's own ``prefix_cache`` compares each prompt with the last 64 only,
    which misses a session's previous judgment whenever more than 64 other prompts
    (turns, other sessions) came in between."""

    def __init__(self, block_tokens: int = 16, capacity_blocks: int = 1_000_000) -> None:
        self.block_chars = block_tokens * CHARS_PER_TOKEN
        self.capacity = capacity_blocks
        self.blocks: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def read(self, text: str) -> int:
        chain, hit, hits = hashlib.blake2b(digest_size=16), True, 0
        full = len(text) - len(text) % self.block_chars  # a partial last block is not kept
        for start in range(0, full, self.block_chars):
            chain.update(text[start:start + self.block_chars].encode())
            name = chain.digest()
            if hit and name in self.blocks:
                hits += 1
                self.blocks.move_to_end(name)
            else:
                hit = False
                self.blocks[name] = None
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return hits * self.block_chars // CHARS_PER_TOKEN


class CountingJudge(JudgeServer):
    """Counts calls per wall-clock second (answered, after the latency); with a
    ``block_cache``, reports and sums cached tokens from it."""

    def __init__(self, block_cache: BlockCache | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.per_second: collections.Counter[int] = collections.Counter()
        self.block_cache = block_cache
        self.usage = {"prompt_tokens": 0, "cached_tokens": 0}

    def _cached_tokens(self, body: dict) -> int | None:
        if self.block_cache is None:
            return None
        text = "".join(message_text(m) for m in body.get("messages") or ())
        cached = self.block_cache.read(text)
        # As the rule judge reports them (its usage caps cached at the prompt's tokens).
        prompt = max(1, len(text) // CHARS_PER_TOKEN)
        self.usage["prompt_tokens"] += prompt
        self.usage["cached_tokens"] += min(cached, prompt)
        return cached

    async def _handle(self, request: Any) -> Any:
        response = await super()._handle(request)
        self.per_second[int(time.time())] += 1
        return response


async def serve(latency_ms: float, port: int, prefix_cache: bool = False,
                latency_max_ms: float = 0.0) -> dict[str, Any]:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    # max_recorded=1: the server keeps request bodies for tests; a benchmark
    # sends hundreds of thousands and needs none of them.
    cache = BlockCache() if prefix_cache else None
    async with CountingJudge(port=port, latency=latency_ms / 1000.0, max_recorded=1,
                             latency_max=latency_max_ms / 1000.0, block_cache=cache) as server:
        print(server.api_base, flush=True)
        await done.wait()
        return {"calls": server.calls, "errors": server.errors,
                "per_second": dict(server.per_second), "usage": server.usage}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--latency-max-ms", type=float, default=0.0,
                        help="answer after a uniform random latency up to this")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--prefix-cache", action="store_true",
                        help="report cached_tokens as a prefix-caching judge would")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    stats = asyncio.run(serve(args.latency_ms, args.port, args.prefix_cache, args.latency_max_ms))
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
