"""Rolling upgrades: a worker of today's code and a test double of a newer
release (it also writes judgment-topic events of a kind today's code does not
know) share one group with traffic flowing; nothing is lost or counted twice,
the unknown events are skipped and counted, and both keep answering."""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request

import pytest
from support.faults import _judged, _window_figures, delivery_figures, sample_cases
from support.harness import StreamEnv, TopicWatcher, poll, produce
from support.paths import SUPPORT

pytestmark = [pytest.mark.kafka, pytest.mark.both_brokers,
              pytest.mark.slow, pytest.mark.timeout(300)]

NEWER = [sys.executable, str(SUPPORT / "newer_worker.py")]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _holds(worker, topic: str) -> bool:
    """Whether ``worker`` is assigned a partition of ``topic`` (its lag series)."""
    try:
        status, text = _get(worker.web_port, "/metrics")
    except OSError:  # not serving yet
        return False
    return status == 200 and any(line.startswith("guardrail_consumer_lag{")
                                 and f'topic="{topic}"' in line for line in text.splitlines())


def test_a_newer_workers_unknown_events_are_skipped_and_nothing_is_lost(
        kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path)
    first, second = sample_cases(300, prefix="a"), sample_cases(300, prefix="b")
    produced = [k.decode() for k, _, _ in first + second]
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        asyncio.run(produce(kafka_bootstrap, env.topic("input"), first))
        with TopicWatcher(kafka_bootstrap, env.topic("results")) as results:
            today = env.start_worker()
            newer = env.start_worker(command=NEWER)
            results.wait_for(lambda r: len(r) >= 150, timeout=120)
            # The newer worker starts slower than today's judges the first half:
            # the second goes out once it holds input partitions, or it might
            # judge nothing and write no probe (seen once in CI).
            assert poll(lambda: _holds(newer, env.topic("input")), 120), env.logs()[-3000:]
            asyncio.run(produce(kafka_bootstrap, env.topic("input"), second))  # flowing
            done = results.wait_for(
                lambda r: set(produced) <= {x["case_id"] for x in r}, timeout=180)
            time.sleep(2)
            records = results.snapshot()
        figures = delivery_figures(produced, records)
        windows = _window_figures(env, today.web_port, _judged(records))
        health = [_get(w.web_port, "/health")[0] for w in (today, newer)]
        metrics = [_get(w.web_port, "/metrics")[1] for w in (today, newer)]
    finally:
        env.stop_workers()
    logs = env.logs()
    assert done and figures["lost"] == 0 and figures["unexpected"] == 0, (figures, logs[-3000:])
    assert windows["window_total"] == windows["unique_judgments"] == 2 * len(produced), windows
    assert health == [200, 200]
    skipped = sum(float(line.rsplit(" ", 1)[1]) for text in metrics
                  for line in text.splitlines()
                  if line.startswith('guardrail_unknown_records_total{kind="probe"'))
    assert skipped > 0, metrics
    # Said once per worker, not once per event.
    assert 1 <= logs.count("skipping judgments records this release does not know") <= 2
    assert "could not count judgment event" not in logs
