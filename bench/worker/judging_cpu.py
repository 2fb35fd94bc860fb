"""CPU per judged message of the judging path alone, in this process: no Kafka.

    python bench/worker/judging_cpu.py [--messages 3000]
    python bench/worker/judging_cpu.py --cached [--messages 30000]   # a replay's cached pass
    py-spy record -f raw -o judging.txt -- python bench/worker/judging_cpu.py   # where it goes

``MessageJudge.process`` (decode, prompt, judge call over HTTP, answer with
log-probabilities, scoring, result and judgment records, /metrics) is driven
with the benchmark's distinct cases in batches, four batches at a time, against
the stand-in judge answering at once in its own process
(``bench/judge_proc.py``), after 500 cases of warm-up and the heap frozen as a
worker freezes it. The figure is this process's CPU time (user + system) per
message: the part of a worker's cost that is guardrail's own and not Faust's,
comparable between two versions of the code run one after the other.
(cProfile cannot run here: ``bench/profiling.py`` shadows the module it imports.)

``--cached`` measures a replay's second pass instead: the replay's batch judge
(``guardrail.replay.backfill``) over an in-memory cache that a first pass filled,
in batches of the replay's size, so every judgment is a hit and no judge is
called. What it prints is the replay's own CPU per message, aiokafka's fetch
and send aside (10,000 msgs/s on one core leaves 100 µs for all of it).
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import gc
import os
import time
from collections.abc import Awaitable, Callable

from bench.common import JudgeProc, cases

from guardrail.judging.cache import BatchedCache, MemoryCache
from guardrail.judges.build import build_evaluator
from guardrail.replay import backfill as replay
from guardrail.config.settings import Settings, load_settings
from guardrail.stream.envelope import Source
from guardrail.stream.processing import MessageJudge, RawMessage

WARM_UP = 500
BATCH = 25
IN_FLIGHT = 4


def raw_messages(n: int) -> list[RawMessage]:
    return [RawMessage(value=value, source=Source("in", 0, i, timestamp_ms=1_700_000_000_000 + i,
                                                  key=key, headers=()))
            for i, (key, value, _) in enumerate(cases(n, prefix="cpu"))]


def judging_settings(api_base: str) -> Settings:
    """The worker's settings against the bench judge at ``api_base`` (direct HTTP path)."""
    return load_settings(environ={**os.environ, "GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
                                  "GUARDRAIL_JUDGE_API_BASE": api_base,
                                  "GUARDRAIL_JUDGE_API_KEY": "bench"})


async def _timed(n: int, run: Callable[[], Awaitable[None]]) -> dict[str, float]:
    """CPU per message and msgs/s of ``run`` (n messages), with the heap frozen
    as a worker freezes it."""
    gc.collect()
    gc.freeze()
    cpu, wall = time.process_time(), time.perf_counter()
    await run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_ms_per_msg": cpu * 1000 / n, "msgs_per_s": n / wall}


async def measure(api_base: str, n: int) -> dict[str, float]:
    settings = judging_settings(api_base)
    evaluator = build_evaluator(settings)
    judge = MessageJudge.from_settings(evaluator, settings)
    messages = raw_messages(WARM_UP + n)
    for i in range(0, WARM_UP, BATCH):
        await judge.process(messages[i:i + BATCH])
    messages = messages[WARM_UP:]

    async def measured() -> None:
        step = BATCH * IN_FLIGHT
        for i in range(0, n, step):
            await asyncio.gather(*(judge.process(messages[j:j + BATCH])
                                   for j in range(i, min(n, i + step), BATCH)))

    figures = await _timed(n, measured)
    await evaluator.aclose()
    return figures


async def measure_cached(api_base: str, n: int) -> dict[str, float]:
    settings = judging_settings(api_base)
    evaluator = build_evaluator(settings)
    evaluator.cache = BatchedCache(MemoryCache(max_entries=4 * n))
    judge = replay._BatchJudge.from_settings(evaluator, settings, emit_judgments=False,
                                             origin="replay-bench")
    messages = raw_messages(n)
    size = replay.READ_BATCH
    for i in range(0, n, size):  # the first pass: every judgment made and cached
        await judge.process(messages[i:i + size])
    made = judge.tally.judged
    assert made >= n and not judge.tally.errors, judge.tally

    async def measured() -> None:
        for i in range(0, n, size):
            await judge.process(messages[i:i + size])

    figures = await _timed(n, measured)
    # Every judgment of the second pass answered from the cache, none asked again.
    assert judge.tally.cached == made and judge.tally.judged == made, judge.tally
    await evaluator.aclose()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--cached", action="store_true",
                        help="a replay's cached pass (every judgment a cache hit)")
    args = parser.parse_args()
    with JudgeProc(0) as judge_proc:
        run = measure_cached if args.cached else measure
        figures = asyncio.run(run(judge_proc.api_base, args.messages))
    what = "replay's cached pass" if args.cached else "judging path alone"
    print(f"{what}: {figures['cpu_ms_per_msg']:.3f} ms CPU per message, "
          f"{figures['msgs_per_s']:.0f} msgs/s ({args.messages} messages)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
