"""Sampling and the judge budget in real worker processes on the embedded broker,
with the stand-in judge counting every request."""

import asyncio
import json
import math
import re
import signal
import time
import urllib.request

import pytest
from support.harness import (StreamEnv, TopicWatcher, WebhookSink, consume, consume_messages,
                             produce)

from guardrail.stream.sampling import is_sampled

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

METRICS = ("bias", "toxicity")


@pytest.fixture
def stream_env(kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    thread_judge.latency = 0.0
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path)
    yield env
    env.stop_workers()
    thread_judge.latency = 0.0


def _inputs(n, prefix="s", version="v1", start=0):
    """n cases a few ms apart, now; each output names its case, so the judge's
    requests show which cases were judged."""
    now = int(time.time() * 1000)
    return [(f"{prefix}-{i}".encode(), json.dumps({
        "case_id": f"{prefix}-{i}", "output": f"a calm reply <{prefix}-{i}>",
        "metadata": {"model": "m", "model_version": version}}).encode(), now + i)
        for i in range(start, start + n)]


def _judged_cases(judge):
    """Case ids whose output reached the judge (from the recorded request bodies)."""
    return {m for body in judge.requests for m in re.findall(r"<([a-z0-9]+-\d+)>",
                                                             json.dumps(body))}


def _get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body = response.read()
    return json.loads(body) if path.startswith("/rates") else body.decode()


def _wait_for_rates(port, seen, judged, timeout=60):
    """/rates once every metric's windows add up to ``seen`` (and ``judged``)."""
    deadline, sums = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            rows = _get(port, "/rates")["rates"]
        except OSError:  # the worker's web server is not up yet
            time.sleep(0.5)
            continue
        sums = {m: (sum(r["seen"] for r in rows if r["metric"] == m),
                    sum(r["total"] for r in rows if r["metric"] == m)) for m in METRICS}
        if all(s[0] == seen and judged in (None, s[1]) for s in sums.values()):
            return sums
        time.sleep(0.5)
    return sums


def test_a_quarter_sample_judges_a_quarter_the_windows_see_all_and_replay_agrees(
        stream_env, thread_judge, tmp_path):
    env, n = stream_env, 400
    env.env.update({"GUARDRAIL_SAMPLE_RATE": "0.25",
                    "GUARDRAIL_CACHE_PATH": str(tmp_path / "replay-cache.sqlite")})
    expected = {f"s-{i}" for i in range(n) if is_sampled(f"s-{i}", 0.25)}
    sigma = math.sqrt(n * 0.25 * 0.75)
    assert abs(len(expected) - n * 0.25) < 3 * sigma  # the ids' draw is a fair one
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), _inputs(n)))
    worker = env.start_worker()
    results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=len(expected),
                                  timeout=120, settle=3))
    assert {r["case_id"] for r in results} == expected, env.logs()[-3000:]
    assert len(results) == len(expected)  # exactly one result per sampled message
    assert _judged_cases(thread_judge) == expected  # no judge call for any other
    assert thread_judge.calls == len(results)  # one call per judged message (all metrics)
    sums = _wait_for_rates(worker.web_port, seen=n, judged=len(expected))
    assert sums == {m: (n, len(expected)) for m in METRICS}, sums
    metrics = _get(worker.web_port, "/metrics")
    assert f'guardrail_messages_total{{outcome="not_sampled"}} {float(n - len(expected))}' \
        in metrics
    assert "guardrail_effective_sample_rate 0.25" in metrics
    # A replay judges everything unless told; with --sample-rate it picks the same set.
    summary = _replay(env, "--results-topic", env.topic("results") + "-r1", "--sample-rate",
                      "0.25")
    assert (summary["results"], summary["not_sampled"]) == (len(expected), n - len(expected))
    again = asyncio.run(consume(env.bootstrap, env.topic("results") + "-r1",
                                expect=len(expected), timeout=30, settle=1))
    assert {r["case_id"] for r in again} == expected
    full = _replay(env, "--results-topic", env.topic("results") + "-r2")
    assert (full["results"], full["not_sampled"]) == (n, None)


def _replay(env, *args):
    proc = env.cli("replay", "--from", "0", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_crash_and_restart_judge_the_same_sample_and_the_windows_stay_exact(
        stream_env, thread_judge):
    env, n = stream_env, 400
    env.env.update({"GUARDRAIL_SAMPLE_RATE": "0.25", "GUARDRAIL_BATCH_SIZE": "8"})
    thread_judge.latency = 0.1  # slow enough to kill the worker halfway
    expected = {f"s-{i}" for i in range(n) if is_sampled(f"s-{i}", 0.25)}
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), _inputs(n)))
    with TopicWatcher(env.bootstrap, env.topic("results")) as results:
        first = env.start_worker()
        assert results.wait_for(lambda recs: len(recs) >= 25, timeout=120), env.logs()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        killed_at = len(results.snapshot())
        assert killed_at < len(expected)
        thread_judge.latency = 0.0
        second = env.start_worker()
        assert results.wait_for(lambda recs: {r["case_id"] for r in recs} >= expected,
                                timeout=180), env.logs()[-3000:]
        time.sleep(3)
        ids = [r["case_id"] for r in results.snapshot()]
    assert set(ids) == expected  # redelivered messages decided as before: nothing else judged
    sums = _wait_for_rates(second.web_port, seen=n, judged=len(expected), timeout=90)
    assert sums == {m: (n, len(expected)) for m in METRICS}, sums


def test_rules_force_a_version_to_full_and_count_a_new_versions_first_messages(
        stream_env, thread_judge):
    env = stream_env
    env.env.update({"GUARDRAIL_SAMPLE_RATE": "0", "GUARDRAIL_SAMPLE_RULES": json.dumps([
        {"match": {"model_version": "v2"}, "rate": 1.0}, {"first_per_version": 20}])})
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    inputs = _inputs(60, "a", "v1") + _inputs(60, "b", "v2") + _inputs(60, "c", "v3")
    asyncio.run(produce(env.bootstrap, env.topic("input"), inputs))
    worker = env.start_worker()
    results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=100,
                                  timeout=120, settle=3))
    by_version = {}
    for r in results:
        by_version.setdefault(r["metadata"]["model_version"], []).append(r)
    assert {r["case_id"] for r in by_version["v2"]} == {f"b-{i}" for i in range(60)}
    # first_per_version 20 over 2 partitions: the first 10 of each version per partition.
    offsets = _input_offsets(env, len(inputs))
    for version, prefix in (("v1", "a"), ("v3", "c")):
        judged = {(r["source"]["partition"], r["source"]["offset"]) for r in by_version[version]}
        first = {(p, o) for p in (0, 1)
                 for o in sorted(o for (q, o), cid in offsets.items()
                                 if q == p and cid.startswith(prefix + "-"))[:10]}
        assert judged == first, (version, sorted(judged), sorted(first))
    # The counts survive a restart: later v3 messages are past its first 20.
    env.stop_workers()
    assert worker.returncode == 0
    second = env.start_worker()
    asyncio.run(produce(env.bootstrap, env.topic("input"),
                        _inputs(30, "c", "v3", start=60) + _inputs(10, "b", "v2", start=60)))
    later = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=110, timeout=120,
                                settle=3))
    assert second.poll() is None
    new = {r["case_id"] for r in later} - {r["case_id"] for r in results}
    assert new == {f"b-{i}" for i in range(60, 70)}, sorted(new)


def _input_offsets(env, count):
    records = asyncio.run(consume_messages(env.bootstrap, env.topic("input"), expect=count,
                                           timeout=30))
    return {(m.partition, m.offset): m.key.decode() for m in records}


def test_a_tiny_budget_lowers_the_rate_and_raises_exactly_one_budget_alert(
        stream_env, thread_judge):
    env, n = stream_env, 300
    with WebhookSink() as sink:
        env.env.update({"GUARDRAIL_BUDGET_USD_PER_HOUR": "0.01",
                        "GUARDRAIL_BUDGET_STEP_SECONDS": "1",
                        "GUARDRAIL_BUDGET_MIN_SAMPLE_RATE": "0.05",
                        "GUARDRAIL_BATCH_SIZE": "16",
                        "GUARDRAIL_JUDGE_INPUT_COST_PER_TOKEN": "0.000001",
                        "GUARDRAIL_JUDGE_OUTPUT_COST_PER_TOKEN": "0.000002",
                        "GUARDRAIL_ALERT_WEBHOOK_URL": sink.url})
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        asyncio.run(produce(env.bootstrap, env.topic("input"), _inputs(n)))
        worker = env.start_worker()
        rates = _wait_for_rates(worker.web_port, seen=n, judged=None, timeout=120)
        time.sleep(3)  # a second alert would come now
        received = list(sink.received)
        metrics = _get(worker.web_port, "/metrics")
    judged = rates["toxicity"][1]
    assert rates["toxicity"][0] == n and 0 < judged < n * 0.8, rates
    budget = [a for a in received if a.get("kind") == "budget"]
    assert len(budget) == 1 and len(received) == 1, received
    alert = budget[0]
    assert alert["state"] == "throttled" and alert["budget"]["usd_per_hour"] == 0.01
    assert alert["spend"]["usd_last_hour"] > 0.005
    assert (alert["sample_rate"], alert["effective_sample_rate"]) == (1.0, 0.5)
    on_topic = asyncio.run(consume(env.bootstrap, env.topic("alerts"), expect=1, timeout=15,
                                   settle=2))
    assert [a["alert_id"] for a in on_topic] == [alert["alert_id"]]
    effective = float(re.search(r"^guardrail_effective_sample_rate (\S+)$", metrics,
                                re.M).group(1))
    spend = float(re.search(r"^guardrail_judge_spend_usd_per_hour (\S+)$", metrics,
                            re.M).group(1))
    assert effective < 0.5 and spend > 0.01
    results = asyncio.run(consume(env.bootstrap, env.topic("results"), expect=judged,
                                  timeout=30, settle=1))
    assert len(results) == judged
