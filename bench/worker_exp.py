"""The guardrail worker with an experimental change patched in (a private copy:
nothing under guardrail/ is edited). Used by ``--experiment NAME`` of the
benchmarks to measure a proposed fix before it is made for real::

    BENCH_EXPERIMENT=direct_http python bench/worker_exp.py worker --web-port 6066

Experiments (comma-separate to combine):

- ``stub_judge``: the judge answers in-process, no HTTP, no litellm (SAFE,
  parsed like a real answer). Isolates the Kafka/Faust side of the pipeline.
- ``direct_http``: ``LiteLLMJudge._call_once`` posts to an OpenAI-compatible
  ``judge_api_base`` with one shared aiohttp session instead of
  ``litellm.acompletion`` (which hops through a thread pool and runs logging
  and cost hooks per call); token prices are looked up once per model.
- ``schema_cache``: ``guardrail.parsing.response_schema`` computed once per
  (mode, reasoning) instead of regenerating the pydantic JSON schema on every
  judge call. The same dict is handed to every call: the real fix should
  freeze it or make sure no client mutates it.
- ``linger``: the Faust producer waits 5 ms to fill batches (``producer_linger``;
  Faust's default 0 sends a produce request per ready batch at once).
- ``fetch_wait``: the worker's consumer waits at most 50 ms for data per fetch
  (faust-streaming 0.15.3 hard-codes ``fetch_max_wait_ms=1500``; Tansu answers
  a fetch only when that wait ends, even when data arrived meanwhile).
- ``objects`` / ``tracemalloc``: diagnoses of RSS growth: live objects by type
  (cheap), or heap growth by traceback (slow: several times slower).
- ``no_windows``: no window agent (a decomposition, not a fix: what counting
  the judgment events costs).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def stub_judge() -> None:
    from guardrail.judge import JudgeReply, LiteLLMJudge, Usage
    from guardrail.parsing import parse_answer
    from guardrail.testing.judge_server import make_verdict

    async def instant(self: Any, prompt: Any, *, scoring_mode: str,
                      include_reasoning: bool) -> Any:
        text = json.dumps(make_verdict("SAFE", mode=scoring_mode,
                                       reasoning="stub" if include_reasoning else None))
        answer = parse_answer(text, scoring_mode=scoring_mode,  # type: ignore[arg-type]
                              include_reasoning=include_reasoning, judged=prompt.judged)
        return JudgeReply(answer=answer, usage=Usage(0, 0, 0.0))

    LiteLLMJudge.__call__ = instant  # type: ignore[method-assign]


class HTTPStatusError(Exception):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:200]}")
        self.status_code = status


@functools.cache
def _unit_prices(model: str) -> tuple[float, float] | None:
    from guardrail._litellm import price_tokens

    a, b = price_tokens(model, 1_000_000, 0), price_tokens(model, 0, 1_000_000)
    return None if a is None or b is None else (a / 1e6, b / 1e6)


def _body(settings: Any, messages: list[dict[str, str]], fmt: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"model": settings.judge_model.split("/", 1)[-1],
                            "messages": messages, "temperature": settings.judge_temperature,
                            "max_tokens": settings.judge_max_tokens}
    if settings.judge_structured_output:
        body["response_format"] = fmt
    return body


async def _post(self: Any, messages: list[dict[str, str]], fmt: dict[str, Any]) -> dict:
    import aiohttp

    s = self._settings
    if getattr(self, "_session", None) is None:  # one pool, no per-host cap below C
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), json_serialize=json.dumps,
            headers={"Authorization": f"Bearer {self._secret}"} if self._secret else None)
    url = s.judge_api_base.rstrip("/") + "/chat/completions"
    async with self._session.post(url, json=_body(s, messages, fmt),
                                  timeout=aiohttp.ClientTimeout(total=s.judge_timeout)) as resp:
        if resp.status >= 400:
            raise HTTPStatusError(resp.status, await resp.text())
        return await resp.json(content_type=None)


def direct_http() -> None:
    from guardrail.errors import JudgeAnswerError
    from guardrail.judge import LiteLLMJudge, _with_usage

    async def call_once(self: Any, messages: list[dict[str, str]], fmt: dict[str, Any],
                        usage: Any) -> str:
        async with self._limit:
            data = await asyncio.wait_for(_post(self, messages, fmt),
                                          timeout=self._settings.judge_timeout + 1.0)
        tokens = data.get("usage") or {}
        pt, ct = int(tokens.get("prompt_tokens") or 0), int(tokens.get("completion_tokens") or 0)
        prices = _unit_prices(self._settings.judge_model)
        usage.add(pt, ct, None if prices is None else pt * prices[0] + ct * prices[1])
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str) or not content.strip():
            raise _with_usage(JudgeAnswerError("judge returned an empty answer"), usage)
        return content

    LiteLLMJudge._call_once = call_once  # type: ignore[method-assign]


def linger() -> None:
    import guardrail.agents.app as app_module

    original = app_module.faust_options

    def with_linger(settings: Any) -> dict[str, object]:
        return {**original(settings), "producer_linger": 0.005}

    app_module.faust_options = with_linger  # type: ignore[assignment]


def no_windows() -> None:
    from guardrail.agents import windows

    windows.register = lambda runtime: runtime.state.setdefault("table", None)


def fetch_wait() -> None:
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    original = AIOKafkaConsumerThread._create_worker_consumer

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = 50  # read by the Fetcher the consumer starts
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]


def _trace_report(first: Any, out: Any, started: float) -> None:
    import time
    import tracemalloc

    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    stats = snap.compare_to(first, "traceback")[:12]
    with open(out, "a") as handle:
        handle.write(f"=== {time.monotonic() - started:.0f}s: growth since the first snapshot, "
                     f"total traced {sum(s.size for s in snap.statistics('filename')) / 1e6:.1f} MB\n")
        for stat in stats:
            handle.write(f"{stat.size_diff / 1e6:+.2f} MB {stat.count_diff:+d} blocks\n")
            for line in stat.traceback.format()[-8:]:
                handle.write(f"    {line}\n")


def trace_memory() -> None:
    """tracemalloc (10 frames): a snapshot 40 s after start, then every 30 s the
    biggest growth since then, by traceback, appended to
    bench/results/tracemalloc-<pid>.txt (a diagnosis, not a fix: ~2x slower)."""
    import threading
    import time
    import tracemalloc
    from pathlib import Path

    out = Path(__file__).resolve().parent / "results" / f"tracemalloc-{os.getpid()}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(10)
    started = time.monotonic()

    def run() -> None:
        time.sleep(40)
        first = tracemalloc.take_snapshot()
        while True:
            time.sleep(30)
            _trace_report(first, out, started)

    threading.Thread(target=run, daemon=True, name="bench-tracemalloc").start()


def _type_counts() -> Any:
    import collections
    import gc

    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def count_objects() -> None:
    """Live objects by type (gc, cheap): counts 30 s after start, then every 20 s
    the types that grew most since then, appended to
    bench/results/objects-<pid>.txt (a diagnosis of RSS growth, not a fix)."""
    import threading
    import time
    from pathlib import Path

    out = Path(__file__).resolve().parent / "results" / f"objects-{os.getpid()}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def run() -> None:
        time.sleep(30)
        first = _type_counts()
        while True:
            time.sleep(20)
            now = _type_counts()
            grown = sorted(((now[t] - first.get(t, 0), t) for t in now), reverse=True)[:12]
            with open(out, "a") as handle:
                handle.write(f"=== {time.monotonic() - started:.0f}s: "
                             + ", ".join(f"{t} {d:+d} (={now[t]})" for d, t in grown) + "\n")

    threading.Thread(target=run, daemon=True, name="bench-objects").start()


def schema_cache() -> None:
    import guardrail.judge as judge_module
    from guardrail.parsing import response_schema

    judge_module.response_schema = functools.cache(response_schema)


EXPERIMENTS = {"stub_judge": stub_judge, "schema_cache": schema_cache, "direct_http": direct_http, "linger": linger,
               "no_windows": no_windows, "fetch_wait": fetch_wait,
               "tracemalloc": trace_memory, "objects": count_objects}


def apply(names: str) -> None:
    for name in filter(None, names.split(",")):
        EXPERIMENTS[name]()


def main() -> None:
    apply(os.environ.get("BENCH_EXPERIMENT", ""))
    from guardrail.cli import main as cli_main

    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
