"""The streaming worker end to end: embedded broker, real worker process, HTTP judge."""

import asyncio
import json
import math
import time
import urllib.request

import pytest
from support.harness import StreamEnv, WebhookSink, consume, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def _case(i, output, **metadata):
    return json.dumps({"case_id": f"case-{i}", "output": output,
                       "metadata": {"model": "m", "model_version": "v1", **metadata}}).encode()


@pytest.fixture
def stream_env(kafka_bootstrap, thread_judge, tmp_path):
    thread_judge.reset()
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path)
    yield env
    env.stop_workers()


def _get_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read())


def test_every_input_gets_exactly_one_result_and_bad_input_goes_to_the_dlq(stream_env):
    n = 300
    good = [(f"case-{i}".encode(), _case(i, "you idiot" if i % 10 == 0 else f"fine answer {i}"),
             None) for i in range(n)]
    bad = [(b"bad-json", b"{not json", None),
           (b"bad-utf8", b'{"case_id": "x", "output": "\xff\xfe"}', None),
           (b"not-object", b"[1, 2, 3]", None),
           (b"no-output", b'{"case_id": "y"}', None),
           (b"wrong-type", b'{"case_id": "z", "output": 12}', None),
           (b"bad-mode", b'{"case_id": "w", "output": "hi", "redteam": {"scoring_mode": "x"}}',
            None),
           (b"huge", b'{"case_id": "h", "output": "' + b"a" * 2_000_000 + b'"}', None)]
    assert stream_env.cli("produce", "--input", "/dev/null").returncode == 0  # creates topics
    asyncio.run(produce(stream_env.bootstrap, stream_env.topic("input"), good[:150] + bad
                        + good[150:]))
    worker = stream_env.start_worker()
    results = asyncio.run(consume(stream_env.bootstrap, stream_env.topic("results"),
                                  expect=n, timeout=120, settle=2))
    dlq = asyncio.run(consume(stream_env.bootstrap, stream_env.topic("dlq"), expect=len(bad),
                              timeout=30, settle=1))
    assert sorted(r["case_id"] for r in results) == sorted(f"case-{i}" for i in range(n)), \
        stream_env.logs()[-3000:]
    toxic = [r for r in results if r["metrics"][1]["result"][0]["verdict"] == "UNSAFE"]
    assert len(toxic) == n // 10
    sample = results[0]
    assert set(sample) >= {"metrics", "cost", "case_id", "metadata", "judged_at", "source"}
    assert sample["source"]["topic"] == stream_env.topic("input")
    assert {(r["source"]["partition"], r["source"]["offset"]) for r in results}.__len__() == n
    assert len(dlq) == len(bad)
    joined = " | ".join(d["reason"] for d in dlq)
    for fragment in ("not valid JSON", "not valid UTF-8", "must be a JSON object",
                     "output is required", "invalid case: output", "scoring_mode",
                     "over the limit"):
        assert fragment in joined, joined
    assert all("value_base64" in d or "value_excerpt" in d for d in dlq)
    assert all(d["source"]["topic"] == stream_env.topic("input") for d in dlq)
    assert worker.poll() is None  # bad input never stops the worker
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{worker.web_port}/metrics", timeout=5).read().decode()
    assert 'guardrail_messages_total{outcome="dlq"} 7.0' in metrics
    assert f'guardrail_messages_total{{outcome="judged"}} {float(n)}' in metrics


def test_windows_count_across_partitions_and_a_regression_alerts_once(stream_env):
    window = 60
    base = (math.floor(time.time() / window) - 5) * window  # five windows ago, aligned
    sink = WebhookSink().__enter__()
    try:
        env = stream_env
        env.env.update({"GUARDRAIL_WINDOW_SECONDS": str(window),
                        "GUARDRAIL_ALERT_WEBHOOK_URL": sink.url,
                        "GUARDRAIL_ALERT_RULES": json.dumps([{
                            "metric": "toxicity", "max_unsafe_rate": None, "min_judgments": 20,
                            "baseline_windows": 3, "significance": 0.01}])})
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        messages, expected = [], {}
        i = 0
        for w, (count, unsafe) in enumerate([(40, 2), (40, 2), (40, 1), (40, 24)]):
            for model in ("a", "b"):
                for k in range(count):
                    toxic = model == "a" and k < unsafe
                    ts = (base + w * window + 1 + k * 0.5) * 1000
                    messages.append((f"k{i}".encode(), _case(
                        i, "you idiot" if toxic else f"calm reply {i}", model=model),
                        int(ts)))
                    i += 1
                expected[(model, w)] = (count, unsafe if model == "a" else 0)
        baseline = [m for m in messages if m[2] < (base + 3 * window) * 1000]
        asyncio.run(produce(env.bootstrap, env.topic("input"), baseline))
        # Malformed judgment events on the group's own partition are skipped, not counted.
        asyncio.run(produce(env.bootstrap, env.topic("judgments"), [
            (b"toxicity|model=a", b"{not json", None),
            (b"toxicity|model=a", b'{"metric": "toxicity", "group": {"model": "a"}, '
                                  b'"status": "maybe", "event_time_ms": 1}', None)]))
        worker = env.start_worker()
        asyncio.run(consume(env.bootstrap, env.topic("results"), expect=len(baseline),
                            timeout=120))
        asyncio.run(produce(env.bootstrap, env.topic("input"), messages[len(baseline):]))
        asyncio.run(consume(env.bootstrap, env.topic("results"), expect=len(messages),
                            timeout=120))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not sink.received:
            time.sleep(0.5)
        time.sleep(3)  # anything more would be a duplicate alert
        rates = _get_json(worker.web_port, "/rates")["rates"]
    finally:
        sink.__exit__()
    tox = {(r["group"].split(",")[0].split("=")[1], r["window_start"]): r
           for r in rates if r["metric"] == "toxicity"}
    assert len(tox) == 8, rates
    for (model, w), (count, unsafe) in expected.items():
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base + w * window))
        row = tox[(model, f"{start}.000+00:00")]
        assert (row["total"], row["unsafe"]) == (count, unsafe), row
    assert len(sink.received) == 1, sink.received
    alert = sink.received[0]
    assert alert["metric"] == "toxicity" and alert["group"]["model"] == "a"
    assert alert["counts"]["unsafe"] >= 20 and alert["baseline"]["kind"] == "previous_windows"
    assert alert["baseline"]["total"] == 120 and alert["baseline"]["unsafe"] == 5
    assert "regression" in alert["reasons"][0]
    logs = env.logs()
    assert logs.count("could not count judgment event") == 2, logs[-3000:]
    assert "not valid JSON" in logs and "status must be one of" in logs
    assert alert["examples"] and alert["examples"][0]["evidence_spans"] == ["idiot"]
    assert "output" not in json.dumps(alert["examples"])
    alerts_topic = asyncio.run(consume(env.bootstrap, env.topic("alerts"), expect=1, timeout=10))
    assert [a["alert_id"] for a in alerts_topic] == [alert["alert_id"]]


def test_replay_covers_the_range_stops_and_never_pays_twice(stream_env, thread_judge,
                                                            tmp_path):
    env = stream_env
    env.env["GUARDRAIL_CACHE_PATH"] = str(tmp_path / "cache.sqlite")
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    t0 = 1_700_000_000_000
    messages = [(f"r{i}".encode(), _case(i, f"reply {i}"), t0 + i * 1000) for i in range(60)]
    asyncio.run(produce(env.bootstrap, env.topic("input"), messages))
    replay_topic = env.topic("results") + "-replay"
    args = ("replay", "--from", str(t0 + 10_000), "--to", str(t0 + 40_000),
            "--results-topic", replay_topic)
    first = env.cli(*args)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["processed"] == 30
    calls = thread_judge.calls
    assert calls == 30  # 30 cases, one judge call each (bias and toxicity together)
    results = asyncio.run(consume(env.bootstrap, replay_topic, expect=30, timeout=30, settle=1))
    assert sorted(r["case_id"] for r in results) == sorted(f"case-{i}" for i in range(10, 40))
    second = env.cli(*args)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout.strip().splitlines()[-1])["processed"] == 30
    assert thread_judge.calls == calls  # the cache paid nothing the second time
    judgments = asyncio.run(consume(env.bootstrap, env.topic("judgments"), expect=1,
                                    timeout=3))
    assert judgments == []  # replay does not feed live alerts by default


def test_worker_refuses_topics_with_other_partition_counts(stream_env):
    from guardrail.kafka.topics import ensure_topics
    from guardrail.settings import load_settings

    settings = load_settings(environ={}, bootstrap_servers=stream_env.bootstrap,
                             **stream_env.topics)
    asyncio.run(ensure_topics(settings.kafka, {stream_env.topic("input"): 3}))
    proc = stream_env.cli("worker", timeout=60)
    assert proc.returncode == 2
    assert f"'{stream_env.topic('input')}' has 3 partitions, needs 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_worker_stops_within_its_deadline_even_when_the_broker_is_gone(tmp_path, thread_judge):
    import signal
    import subprocess

    from guardrail.kafka.broker import EmbeddedBroker

    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    env = StreamEnv(broker.bootstrap, thread_judge.api_base, tmp_path, stop_deadline_seconds=3)
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        asyncio.run(produce(broker.bootstrap, env.topic("input"), [(b"k", _case(0, "hi"), None)]))
        worker = env.start_worker()
        asyncio.run(consume(broker.bootstrap, env.topic("results"), expect=1, timeout=60))
    finally:
        broker.stop()
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise AssertionError("worker still running 30 s after SIGTERM with the broker gone")
