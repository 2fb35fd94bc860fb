"""Moderation in batches: requests to a moderation endpoint per 1,000 messages.

    flock /tmp/guardrail-bench.lock python bench/judge/moderation_batches.py \\
        [--messages 1000] [--latency-ms 50] [--sizes 1,8,32] [--seed 7]

The traffic of ``bench/judge/guard_cascade.py`` (``case`` JSON messages, a question and
a distinct answer each, 10 % with a flagged word) goes through the worker's
judging path (``build_evaluator`` + ``MessageJudge.process`` in batches of 64,
no Kafka) with ``judge_protocol: moderation``, once per ``judge_batch_size``.
The endpoint is the stand-in of ``tests/support/guard_server.py`` on loopback,
answering each input of a request with OpenAI-style ``category_scores``
(harassment 0.90-0.99 on a flagged word, 0.01-0.06 otherwise, spread by a hash
of the text) after ``--latency-ms`` per request, whatever its number of inputs.
Requests and their inputs are counted at the stand-in; msgs/s is messages over
the wall time of the judging. "differ" counts metric verdicts that differ from
the first size's. Figures only: the script prints and writes
``bench/results/moderation_batches-*.json``; it checks nothing.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import time
import zlib
from typing import Any

from bench.common import meta, write_json
from bench.judge.guard_cascade import BATCH, FLAGGED, judge_batches, traffic

from guardrail.judges.build import build_evaluator
from guardrail.config.settings import load_settings
from guardrail.stream.processing import MessageJudge
from tests.support.guard_server import GuardServer, moderation_result  # common: repo on path


def moderate(text: str) -> dict[str, Any]:
    """The stand-in's result for one input: harassment high on a flagged word."""
    spread = (zlib.crc32(text.encode()) % 1000) / 1000
    flagged = any(word in text.lower() for word in FLAGGED)
    harassment = 0.90 + 0.09 * spread if flagged else 0.01 + 0.05 * spread
    return moderation_result({"harassment": round(harassment, 4), "hate": 0.01})


async def run_size(size: int, messages: list[bytes], server: GuardServer) -> dict[str, Any]:
    """Judge every message at ``judge_batch_size: size``; requests, inputs, verdicts."""
    settings = load_settings(environ={}, judge_model="openai/omni-moderation-latest",
                             judge_protocol="moderation", judge_api_base=server.api_base,
                             judge_max_retries=0, judge_timeout=30, judge_batch_size=size)
    evaluator = build_evaluator(settings)
    judge = MessageJudge.from_settings(evaluator, settings, emit_judgments=False)
    before = len(server.requests)
    started = time.perf_counter()
    try:
        verdicts = await judge_batches(judge, messages, settings.kafka.results_topic)
    finally:
        await evaluator.aclose()
    seconds = time.perf_counter() - started
    inputs = server.inputs()[before:]
    return {"size": size, "seconds": seconds, "requests": len(inputs),
            "inputs": sum(len(i) for i in inputs), "verdicts": verdicts}


def rows(runs: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    base = runs[0]["verdicts"]
    return [{"judge_batch_size": run["size"],
             "requests_per_1000": round(run["requests"] * 1000 / n, 1),
             "inputs_per_request": round(run["inputs"] / run["requests"], 1),
             "msgs_per_s": round(n / run["seconds"]),
             "seconds": round(run["seconds"], 2),
             "errors": sum(v == "ERROR" for v in run["verdicts"].values()),
             "differ": sum(v != base.get(k) for k, v in run["verdicts"].items())}
            for run in runs]


def print_table(table: list[dict[str, Any]], info: dict[str, Any]) -> None:
    print(f"\n{info['date']}  {info['machine']}  commit {info['commit']}  "
          f"load {info.get('load_at_start')}  latency {info['latency_ms']} ms per request")
    print("| judge_batch_size | moderation requests per 1,000 messages | inputs per request "
          "| msgs/s | metric errors | verdicts differing |\n|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['judge_batch_size']} | {r['requests_per_1000']:,} | "
              f"{r['inputs_per_request']} | {r['msgs_per_s']:,} | {r['errors']} | "
              f"{r['differ']} |")


async def main_async(args: argparse.Namespace) -> None:
    messages = traffic(args.messages, 0.10, 0.0, args.seed)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = []
    async with GuardServer() as server:
        server.moderate = moderate
        server.latency = args.latency_ms / 1000
        await run_size(sizes[0], messages[:BATCH], server)  # warm-up, not counted: first imports
        for size in sizes:
            runs.append(await run_size(size, messages, server))
            print(f"judge_batch_size {size}: {runs[-1]['seconds']:.2f} s", flush=True)
    info = {**meta(), "messages": args.messages, "latency_ms": args.latency_ms,
            "seed": args.seed, "worker_batch": BATCH, "judge_concurrency": 16}
    table = rows(runs, args.messages)
    print_table(table, info)
    print(f"wrote {write_json('moderation_batches', {'meta': info, 'rows': table})}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=50.0,
                        help="the stand-in's delay per request, whatever its inputs")
    parser.add_argument("--sizes", default="1,8,32", help="judge_batch_size values, in turn")
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
