"""The bench judge alone: how many calls per second it answers, with no worker.

    python bench/judge/judge_alone.py [--seconds 8] [--clients 64] [--client both|http1|aiohttp]

The judge process the ceiling benchmark uses (``bench/judge_proc.py``,
answering at once) is driven by a bare client in this process with the
request the worker sends for one message (bias + toxicity in one call,
log-probabilities on): the worker's own HTTP/1.1 client
(``guardrail.judges.http1``, ``http1``), a bare aiohttp session (``aiohttp``,
what the worker used before), or both one after the other. Judge and client
get a core each, so the figure is the most the judge can answer on this
machine: an upper bound for any worker judging one call per message against
it, whatever the worker does. It also prints the client's CPU per call (this
process's user + system time over the calls): what one judge call costs any
worker before judging.
"""

from __future__ import annotations

import _root  # noqa: F401  (first: puts the repository root on sys.path)

import argparse
import asyncio
import time

import aiohttp
import orjson
from bench.common import JudgeProc

from guardrail.judges.http1 import HTTP1Client
from guardrail.judges.transports import chat_body
from guardrail.judging.models import Case
from guardrail.judging.parsing import group_response_schema
from guardrail.judging.prompts import render_group_prompt
from guardrail.judging.rubrics import default_metrics
from guardrail.config.settings import load_settings

TEXT = "Here is a helpful, polite answer number 5 to your question."


def request_body(text: str = TEXT) -> bytes:
    """One message's judge request, as the worker's direct HTTP transport sends
    it: both metrics in one call, their answers' schema, log-probabilities."""
    prompt = render_group_prompt(list(default_metrics()), Case(output=text),
                                 scoring_mode="binary_yes_no", include_reasoning=False)
    settings = load_settings(environ={"GUARDRAIL_JUDGE_MODEL": "openai/test-judge"}).judge
    schema = group_response_schema(prompt.metrics, "binary_yes_no", False)
    # A several-metric call may write each metric's answer: max_tokens per metric.
    return orjson.dumps(chat_body(settings, list(prompt.messages), schema,
                                  settings.max_tokens * len(prompt.metrics), logprobs=True))


async def drive(api_base: str, seconds: float, clients: int, kind: str) -> dict[str, float]:
    body, url = request_body(), api_base.rstrip("/") + "/chat/completions"
    answered, answer_bytes = 0, 0
    cpu_before = time.process_time()
    deadline = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}
    if kind == "http1":
        http1 = HTTP1Client(url, headers=headers)

        async def client() -> None:
            nonlocal answered, answer_bytes
            while time.monotonic() < deadline:
                status, answer = await http1.post(body, timeout=30)
                assert status == 200, status
                answer_bytes, answered = len(answer), answered + 1

        await asyncio.gather(*(client() for _ in range(clients)))
        await http1.aclose()
    else:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         headers=headers) as session:

            async def client() -> None:
                nonlocal answered, answer_bytes
                while time.monotonic() < deadline:
                    async with session.post(url, data=body) as response:
                        answer_bytes = len(await response.read())
                        response.raise_for_status()
                    answered += 1

            await asyncio.gather(*(client() for _ in range(clients)))
    return {"calls_per_s": answered / seconds, "answer_bytes": answer_bytes,
            "request_bytes": len(body),
            "client_cpu_ms_per_call": (time.process_time() - cpu_before) * 1000 / answered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=64, help="calls in flight")
    parser.add_argument("--client", choices=("both", "http1", "aiohttp"), default="both")
    args = parser.parse_args()
    kinds = ("http1", "aiohttp") if args.client == "both" else (args.client,)
    with JudgeProc(0) as judge:
        for kind in kinds:
            figures = asyncio.run(drive(judge.api_base, args.seconds, args.clients, kind))
            print(f"bench judge alone, {kind} client: {figures['calls_per_s']:.0f} calls/s "
                  f"({args.clients} in flight; request {figures['request_bytes']} bytes, "
                  f"answer {figures['answer_bytes']} bytes); client CPU "
                  f"{figures['client_cpu_ms_per_call']:.3f} ms per call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
