"""A live worker tells stalled from busy on /metrics, /health and in its log:
judging a backlog steadily (lag for longer than stall_seconds, offsets moving)
it never counts a partition as stalled; once every judge call hangs (below
the judge timeout, so no outage: the worker just makes no progress) the input
partition shows as stalled (``guardrail status`` says so too), and it clears
when the calls answer again."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.harness import StreamEnv, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

STALL_SECONDS = 4
BUSY, HELD = 70, 6  # messages of each phase


def _get(port: int, path: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.read().decode()
    except OSError as exc:  # 503 /health is still an answer
        body = getattr(exc, "read", None)
        return body().decode() if body else None


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(_get(port, "/metrics") or ""):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def _value(samples, name: str, **labels: str) -> float | None:
    return next((v for got, v in samples.get(name, []) if labels.items() <= got.items()), None)


def _judged(samples) -> float:
    return _value(samples, "guardrail_messages_total", outcome="judged") or 0


def _messages(prefix: str, n: int) -> list[tuple]:
    """Safe answers, each text new (a cached judgment would need no judge call)."""
    return [(f"{prefix}-{i}".encode(),
             json.dumps({"case_id": f"{prefix}-{i}", "output": f"fine {prefix} answer {i}"})
             .encode(), None) for i in range(n)]


def _until(port: int, predicate, timeout: float, what: str, env: StreamEnv) -> list[dict]:
    """Scrape every 0.3 s until ``predicate(samples)``; every scrape taken."""
    scrapes, deadline = [], time.monotonic() + timeout
    while True:
        samples = _scrape(port)
        samples["_at"] = time.monotonic()  # type: ignore[assignment]
        scrapes.append(samples)
        if predicate(samples):
            return scrapes
        shown = {k: v for k, v in samples.items() if "progress" in k or "lag" in k
                 or "stalled" in k or "paused" in k or k == "guardrail_messages_total"}
        assert time.monotonic() < deadline, f"{what}: {shown}\n{env.logs()[-3000:]}"
        time.sleep(0.3)


def test_a_busy_worker_is_not_stalled_and_a_stuck_one_is_until_it_moves(
        kafka_bootstrap, thread_judge, tmp_path):
    gate = threading.Event()  # set: the judge answers; clear: every call hangs

    async def held(body, fields, metric, mode):
        deadline = time.monotonic() + 25  # below the judge timeout: no outage
        while not gate.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return None  # the rule judge's verdict

    thread_judge.reset()
    thread_judge.responder, thread_judge.latency = held, 0.12
    gate.set()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path,
                    stall_seconds=STALL_SECONDS, topic_partitions=1, batch_size=4, judge_concurrency=1, judge_timeout=30)
    topic = env.topic("input")
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0  # creates the topics
        port = env.start_worker().web_port
        _until(port, lambda s: _value(s, "guardrail_seconds_since_progress", topic=topic)
               is not None, 60, "the worker never held the input partition", env)

        # Busy: a backlog judged steadily, its lag above 0 for longer than stall_seconds.
        asyncio.run(produce(env.bootstrap, topic, _messages("busy", BUSY)))
        busy = _until(port, lambda s: _judged(s) == BUSY, 60, "the backlog was not judged", env)
        lagging = [s["_at"] for s in busy
                   if (_value(s, "guardrail_consumer_lag", topic=topic) or 0) > 0]
        assert lagging and lagging[-1] - lagging[0] > STALL_SECONDS + 1, "too short a backlog"
        assert all(_value(s, "guardrail_stalled_partitions") == 0 for s in busy)

        # Stuck: every judge call hangs; the offset stands while lag waits.
        gate.clear()
        asyncio.run(produce(env.bootstrap, topic, _messages("held", HELD)))
        stuck = _until(port, lambda s: _value(s, "guardrail_stalled_partitions") == 1, 15,
                       "the held partition never showed as stalled", env)[-1]
        assert _value(stuck, "guardrail_seconds_since_progress",
                      topic=topic, partition="0") >= STALL_SECONDS
        assert _value(stuck, "guardrail_consumer_lag", topic=topic, partition="0") > 0
        assert _value(stuck, "guardrail_judge_paused") == 0  # slow, not an outage
        health = json.loads(_get(port, "/health") or "{}")
        assert health["status"] == "stalled", health
        assert [(p["topic"], p["partition"]) for p in health["stalled_partitions"]] == \
            [(topic, 0)]
        status = env.cli("status", "--worker", f"127.0.0.1:{port}")
        assert status.returncode == 1, status.stderr
        assert status.stdout.startswith(f"127.0.0.1:{port}  stalled  1 partition with lag")
        assert f"\n  {topic}[0]  lag " in status.stdout

        gate.set()  # the calls answer: it moves again
        _until(port, lambda s: _value(s, "guardrail_stalled_partitions") == 0
               and _judged(s) == BUSY + HELD, 30, "the stall did not clear", env)
        assert json.loads(_get(port, "/health") or "{}")["status"] == "ok"
    finally:
        gate.set()
        thread_judge.responder, thread_judge.latency = None, 0.0
        env.stop_workers()
    log = env.logs()
    assert log.count(f"partition {topic}[0] stalled: lag") == 1, log[-3000:]
    assert log.count(f"partition {topic}[0] progresses again") == 1, log[-3000:]
