"""The guardrail worker with an experimental change patched in (a private copy:
nothing under guardrail/ is edited). Used by ``--experiment NAME`` of the
benchmarks to measure a proposed fix before it is made for real::

    BENCH_EXPERIMENT=litellm python bench/worker_exp.py worker --web-port 6066

Experiments (comma-separate to combine):

- ``stub_judge``: the judge answers in-process, no HTTP, no litellm (SAFE,
  parsed like a real answer). Isolates the Kafka/Faust side of the pipeline.
- ``litellm``: the judge through litellm, not the direct HTTP path
  (``judge_transport``), which the profiles below led to: litellm's per-call
  path took ~60 % of a worker's CPU.
- ``faust_fetch_wait``: Faust's fixed 1500 ms consumer fetch wait instead of
  ``consumer_fetch_wait_ms`` (Tansu answers a fetch only when the wait ends).
- ``objects`` / ``tracemalloc``: diagnoses of RSS growth: live objects by type
  (cheap), or heap growth by traceback (slow: several times slower).
- ``uvloop``: the worker's event loop on uvloop instead of asyncio's.
- ``no_windows``: no window agent (a decomposition, not a fix: what counting
  the judgment events costs).
- ``litellm_at_start``: the start before prices were read from the bundled map:
  litellm imported in a thread once the worker is up (for ``bench/worker/first_result.py``).
- ``local_runs``: agent runs assembled in memory where their spans are read,
  with no run-spans topic, table, ticks or done records (the design the
  performance page names as the only way to the runs target). Nothing in it
  is durable: no held commit, no record of judged runs, no rebalance handling,
  so it is that design's best case, not a way to run (for ``bench/runs_sessions/agent_runs.py``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def stub_judge() -> None:
    from guardrail.judges.llm import LLMJudge
    from guardrail.judging.judge import GroupReply, JudgeReply, Usage
    from guardrail.local.rule_judge import make_verdict
    from guardrail.judging.parsing import parse_answer, parse_group_answer

    def verdict(scoring_mode: str, include_reasoning: bool) -> dict[str, Any]:
        return make_verdict("SAFE", mode=scoring_mode,
                            reasoning="stub" if include_reasoning else None)

    async def instant(self: Any, prompt: Any, *, scoring_mode: str,
                      include_reasoning: bool) -> Any:
        text = json.dumps(verdict(scoring_mode, include_reasoning))
        answer = parse_answer(text, scoring_mode=scoring_mode,  # type: ignore[arg-type]
                              include_reasoning=include_reasoning, judged=prompt.judged)
        return JudgeReply(answer=answer, usage=Usage(0, 0, 0.0))

    async def instant_group(self: Any, prompt: Any, *, scoring_mode: str,
                            include_reasoning: bool) -> Any:
        text = json.dumps({m: verdict(scoring_mode, include_reasoning) for m in prompt.metrics})
        answers = parse_group_answer(text, prompt.metrics, scoring_mode=scoring_mode,
                                     include_reasoning=include_reasoning, judged=prompt.judged)
        return GroupReply(answers=dict(answers), usage={m: Usage() for m in prompt.metrics})

    LLMJudge.__call__ = instant  # type: ignore[method-assign]
    LLMJudge.judge_group = instant_group  # type: ignore[method-assign]


def via_litellm() -> None:
    """The judge through litellm even for the OpenAI-compatible bench judge
    (the default before ``judge_transport``; for comparison)."""
    os.environ["GUARDRAIL_JUDGE_TRANSPORT"] = "litellm"


def faust_fetch_wait() -> None:
    """Faust's own 1500 ms fetch wait (before ``consumer_fetch_wait_ms``)."""
    os.environ["GUARDRAIL_CONSUMER_FETCH_WAIT_MS"] = "1500"


def no_windows() -> None:
    from guardrail.agents import windows

    windows.register = lambda runtime: runtime.state.setdefault("table", None)


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


def gc_time() -> None:
    """Time spent in the cyclic garbage collector, per generation: every 10 s
    appended to bench/results/gc-<pid>.txt (a diagnosis)."""
    import gc
    import threading
    import time
    from pathlib import Path

    out = Path(__file__).resolve().parent / "results" / f"gc-{os.getpid()}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    spent, runs, began = [0.0, 0.0, 0.0], [0, 0, 0], [0.0]

    def track(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[info["generation"]] += time.perf_counter() - began[0]
            runs[info["generation"]] += 1

    gc.callbacks.append(track)

    def report() -> None:
        while True:
            time.sleep(10)
            with open(out, "a") as handle:
                handle.write(f"gc runs {runs} seconds {[round(x, 3) for x in spent]} "
                             f"objects {len(gc.get_objects())}\n")

    threading.Thread(target=report, daemon=True, name="bench-gc").start()


def gc_relaxed() -> None:
    """What gc_time found: collect the young generation every 50,000
    allocations, not 700 (a judged answer with log-probabilities is ~600 objects)."""
    import gc

    gc.set_threshold(50_000, 20, 20)


def litellm_at_start() -> None:
    """Import litellm in a thread once the worker is up, as the worker did to
    read its prices before they came from the bundled map."""
    import asyncio

    import guardrail.agents
    from guardrail.providers.litellm import litellm

    plain_run_worker = guardrail.agents.run_worker

    def run_worker(runtime: Any, **kwargs: Any) -> None:
        @runtime.app.task
        async def settle_as_before() -> None:
            await asyncio.to_thread(litellm)

        plain_run_worker(runtime, **kwargs)

    guardrail.agents.run_worker = run_worker


def uvloop_loop() -> None:
    """The worker's event loop on uvloop (``pip install uvloop``)."""
    import uvloop

    uvloop.install()


def producer_buffer() -> None:
    """Faust's producer buffer (table changelog writes) lets 2,000 messages wait
    before it holds the streams, not 100: each hold flushes message by message."""
    from faust.transport.producer import ProducerBuffer

    ProducerBuffer.max_messages = 2_000


def local_runs() -> None:
    """Runs gathered in the judging agent's process: each span the decoder routes
    to a run goes into an in-memory :class:`RunGathering` instead of the
    run-spans topic; a timer judges due runs and publishes their results."""
    import guardrail.agents.app as worker_app
    from guardrail.stream.processing import MessageJudge

    gathered: dict[str, Any] = {}

    def keep_spans(self: Any, raw: Any, decoded: Any) -> list[Any]:
        if decoded.run_spans and "runs" in gathered:
            gathered["runs"].add_spans(decoded.run_spans)
        return []

    def register(runtime: Any) -> None:
        gathered["runs"] = _LocalRuns(runtime)

    MessageJudge._forward_run_spans = keep_spans  # type: ignore[method-assign]
    worker_app.run_assembly.register = register  # type: ignore[assignment]


class _LocalRuns:
    """The in-memory assembly of ``local_runs``, swept every second."""

    def __init__(self, runtime: Any) -> None:
        from guardrail.agents.judging import output_topics, publish_records
        from guardrail.agents.run_assembly import assembled_judge
        from guardrail.assembly.runs.gathering import RunGathering

        self.gathering = RunGathering(runtime.settings.runs, runtime.telemetry)
        self.judge = assembled_judge(runtime)
        self.spans: dict[str, list[Any]] = {}
        self.named = 0
        topics = output_topics(runtime, self.judge)

        @runtime.app.timer(1.0)
        async def sweep() -> None:
            due = self.due()
            if due:
                await publish_records(topics, await self.judge.process(due))

    def add_spans(self, spans: list[Any]) -> None:
        from guardrail._event_time import now_ms

        g, now = self.gathering, now_ms()
        for span in spans:
            header = g.book.headers.get(span.trace_id)
            if header is None:
                header = g.book.headers[span.trace_id] = g.new_header(span.trace_id, now_ms=now)
            # A rough size: the memory cap is far away at the benchmark's scale.
            if g.add(header, span, now_ms=now, size=len(span.output or "") + 200) == "added":
                self.spans.setdefault(span.trace_id, []).append(span)

    def due(self) -> list[Any]:
        import orjson

        from guardrail.stream.envelope import Source
        from guardrail._event_time import now_ms
        from guardrail.stream.processing import RawMessage

        # Closed runs stay in the book (late spans are counted, as in the table);
        # a benchmark's few thousand cost the sweep nothing worth measuring.
        g, now, cases = self.gathering, now_ms(), []
        for key, header in list(g.book.headers.items()):
            status = g.due(header, now_ms=now) if header.state == "open" else None
            if status is None:
                continue
            header.state, header.status = "closing", status
            case = g.case(key, header, self.spans.pop(key, []))
            g.finish(key, header, now_ms=now)
            self.named += 1
            cases.append(RawMessage(value=orjson.dumps(case), source=Source(
                "local-runs", 0, self.named, timestamp_ms=now, key=key.encode())))
        return cases


EXPERIMENTS = {"local_runs": local_runs, "producer_buffer": producer_buffer, "uvloop": uvloop_loop, "gc_time": gc_time, "gc_relaxed": gc_relaxed, "stub_judge": stub_judge, "litellm": via_litellm,
               "faust_fetch_wait": faust_fetch_wait, "no_windows": no_windows,
               "litellm_at_start": litellm_at_start,
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
