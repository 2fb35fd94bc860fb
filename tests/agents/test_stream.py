"""The streaming worker end to end: embedded broker, real worker process, HTTP judge."""

import asyncio
import json
import math
import time
import urllib.request

import pytest
from support.faults import judgment_events
from support.harness import StreamEnv, WebhookSink, consume, consume_messages, produce

from guardrail.stream.envelope import bytes_from_text

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


@pytest.mark.both_brokers
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
           # Over max_message_bytes (1,000,000) yet under Apache Kafka's own
           # record limit (message.max.bytes, 1,048,588), so every broker takes it.
           (b"huge", b'{"case_id": "h", "output": "' + b"a" * 1_020_000 + b'"}', None)]
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


TRACEPARENT = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _traced(i):
    """Kafka headers of input i: W3C trace context plus a binary (non-UTF-8) value."""
    return (("traceparent", TRACEPARENT), ("trace-id", f"t{i}".encode()),
            ("span-bin", bytes([0xFF, 0x00, i])))


def test_key_and_headers_travel_to_results_and_dlq(stream_env):
    env = stream_env
    inputs = [(b"k1", _case(1, "a fine answer"), None, _traced(1)),
              (b"order-2", b'{"output": "you idiot"}', None, _traced(2)),  # no case_id
              (b"\xfe\xff", b"{not json", None, _traced(3))]
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), inputs))
    env.start_worker()
    results = asyncio.run(consume_messages(env.bootstrap, env.topic("results"), expect=2,
                                           timeout=90, settle=1))
    dlq = asyncio.run(consume_messages(env.bootstrap, env.topic("dlq"), expect=1, timeout=30))
    assert len(results) == 2 and len(dlq) == 1, env.logs()[-3000:]
    by_id = {json.loads(m.value)["case_id"]: m for m in results}
    assert set(by_id) == {"case-1", "order-2"}  # no case_id: named by the Kafka key
    for i, (case_id, key) in enumerate((("case-1", b"k1"), ("order-2", b"order-2")), 1):
        message = by_id[case_id]
        record = json.loads(message.value)
        assert bytes_from_text(record["key"]) == key
        assert {n: bytes_from_text(v) for n, v in record["headers"].items()} == dict(_traced(i))
        assert record["headers"]["span-bin"].startswith("b64:")
        assert tuple(message.headers) == _traced(i)  # sent with the input's headers
        assert message.key == case_id.encode()
    bad = dlq[0]
    record = json.loads(bad.value)
    assert "not valid JSON" in record["reason"]
    assert bytes_from_text(record["key"]) == b"\xfe\xff" and bad.key == b"\xfe\xff"
    assert {n: bytes_from_text(v) for n, v in record["headers"].items()} == dict(_traced(3))
    assert tuple(bad.headers) == _traced(3)


@pytest.mark.both_brokers
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
    # Checked as judgments are counted: at least min_judgments of them, more
    # unsafe than the baseline's rate. How many of the 24 unsafe are in by then
    # depends on how the two input partitions' batches interleave (on Apache
    # Kafka one can run ahead of the other), so not a fixed number.
    counts = alert["counts"]
    assert counts["total"] >= 20 and counts["unsafe"] / counts["total"] > 5 / 120, counts
    assert alert["baseline"]["kind"] == "previous_windows"
    assert alert["baseline"]["total"] == 120 and alert["baseline"]["unsafe"] == 5
    assert "regression" in alert["reasons"][0]
    logs = env.logs()
    assert logs.count("could not count judgment event") == 2, logs[-3000:]
    assert "not valid JSON" in logs and "status must be one of" in logs
    assert alert["examples"] and alert["examples"][0]["evidence_spans"] == ["idiot"]
    assert "output" not in json.dumps(alert["examples"])
    alerts_topic = asyncio.run(consume(env.bootstrap, env.topic("alerts"), expect=1, timeout=10))
    assert [a["alert_id"] for a in alerts_topic] == [alert["alert_id"]]


def _replay_inputs(t0):
    """60 traced cases a second apart, bad input in the range (2) and after it (1)."""
    messages = [(f"r{i}".encode(), _case(i, f"reply {i}"), t0 + i * 1000, _traced(i))
                for i in range(60)]
    messages[16:16] = [(b"bad-1", b"{oops", t0 + 15_500, _traced(100))]  # timestamp order
    messages[27:27] = [(b"bad-2", b"[1, 2]", t0 + 25_500, _traced(101))]
    return messages + [(b"bad-late", b"{oops", t0 + 59_500, None)]


def _replay(env, *args):
    proc = env.cli("replay", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.both_brokers
def test_replay_covers_the_range_stops_and_never_pays_twice(stream_env, thread_judge,
                                                            tmp_path):
    env, cache, t0 = stream_env, tmp_path / "cache.sqlite", 1_700_000_000_000
    env.env.update({"GUARDRAIL_CACHE_PATH": str(cache),
                    "GUARDRAIL_JUDGE_INPUT_COST_PER_TOKEN": "0.000001",
                    "GUARDRAIL_JUDGE_OUTPUT_COST_PER_TOKEN": "0.000002"})
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), _replay_inputs(t0)))
    replay_topic = env.topic("results") + "-replay"
    args = ("--from", str(t0 + 10_000), "--to", str(t0 + 40_000), "--results-topic", replay_topic)
    summary, stderr = _replay(env, *args)
    assert summary["processed"] == 32
    assert (summary["results"], summary["dlq"], summary["judgment_events"]) == (30, 2, 0)
    assert summary["dlq_topic"] == replay_topic + ".dlq"
    assert (summary["judged"], summary["cached"], summary["cache"]) == (60, 0, str(cache))
    assert summary["cost_usd"] > 0 and summary["cost_usd"] == pytest.approx(
        summary["input_tokens"] * 1e-6 + summary["output_tokens"] * 2e-6)
    assert list(summary)[-1] == "cost" and summary["cost"].startswith("$")
    assert f"30 results to {replay_topic}, 2 DLQ records to {replay_topic}.dlq" in stderr
    calls = thread_judge.calls
    assert calls == 30  # 30 cases, one judge call each (bias and toxicity together)
    results = asyncio.run(consume_messages(env.bootstrap, replay_topic, expect=30, timeout=30,
                                           settle=1))
    values = [json.loads(m.value) for m in results]
    assert sorted(r["case_id"] for r in values) == sorted(f"case-{i}" for i in range(10, 40))
    assert all(tuple(m.headers) == _traced(int(v["case_id"][5:]))
               for m, v in zip(results, values))
    own_dlq = asyncio.run(consume_messages(env.bootstrap, replay_topic + ".dlq", expect=2,
                                           timeout=30, settle=1))
    assert sorted((m.key, tuple(m.headers)) for m in own_dlq) == [
        (b"bad-1", _traced(100)), (b"bad-2", _traced(101))]
    again, _ = _replay(env, *args)
    assert (again["processed"], again["results"], again["dlq"]) == (32, 30, 2)
    assert (again["judged"], again["cached"]) == (0, 60)  # all from the cache
    assert again["cost_usd"] == 0 and again["cost"] == "$0.000000"
    assert thread_judge.calls == calls  # the cache paid nothing the second time
    live_dlq = asyncio.run(consume(env.bootstrap, env.topic("dlq"), expect=1, timeout=3))
    assert live_dlq == []  # the live DLQ never sees a replay's bad input
    judgments = asyncio.run(consume(env.bootstrap, env.topic("judgments"), expect=1,
                                    timeout=3))
    assert judgments == []  # replay does not feed live alerts by default


@pytest.mark.both_brokers
def test_a_replay_in_two_processes_is_one_replay(stream_env, thread_judge, tmp_path):
    env, cache, t0 = stream_env, tmp_path / "cache.sqlite", 1_700_000_000_000
    env.env["GUARDRAIL_CACHE_PATH"] = str(cache)
    assert env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(env.bootstrap, env.topic("input"), _replay_inputs(t0)))
    topic = env.topic("results") + "-two"
    args = ("--from", str(t0 + 10_000), "--to", str(t0 + 40_000), "--results-topic", topic,
            "--processes", "2")
    summary, stderr = _replay(env, *args)
    assert (summary["processed"], summary["results"], summary["dlq"]) == (32, 30, 2)
    assert (summary["judged"], summary["cached"]) == (60, 0)
    assert sorted(int(p) for p in summary["ranges"]) == [0, 1]  # a partition each
    assert "32/32" in stderr.replace(" ", "")  # one progress for the whole run
    results = asyncio.run(consume_messages(env.bootstrap, topic, expect=30, timeout=30,
                                           settle=1))
    assert sorted(json.loads(m.value)["case_id"] for m in results) == \
        sorted(f"case-{i}" for i in range(10, 40))
    calls = thread_judge.calls
    # Both processes read the one cache file; with --fire-alerts, one run id.
    again, _ = _replay(env, *args, "--fire-alerts")
    assert (again["judged"], again["cached"]) == (0, 60) and again["judgment_events"] > 0
    assert thread_judge.calls == calls
    events = judgment_events(asyncio.run(consume(
        env.bootstrap, env.topic("judgments"), expect=60, timeout=30, settle=1,
        weight=lambda value: len(judgment_events([value])))))
    assert len(events) == 60  # the 30 results' two metrics
    origins = {e["origin"] for e in events}
    assert len(origins) == 1 and origins.pop().startswith("replay-")
    refused = env.cli("replay", *args, "--sample-rate", "0.5")
    assert refused.returncode == 2 and "--processes runs in one process" in refused.stderr
    missing = env.cli("replay", "--from", "0", "--topic", "no-such-topic", "--processes", "2")
    assert missing.returncode == 2 and "topic 'no-such-topic' does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_worker_refuses_topics_with_other_partition_counts(stream_env):
    from guardrail.kafka.topics import ensure_topics
    from guardrail.config.settings import load_settings

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


def test_a_refused_judge_key_stops_the_worker_at_once_and_acks_nothing(stream_env, thread_judge):
    import subprocess

    from guardrail.local.rule_judge import ErrorReply

    secret = "sk-stream-test-secret"  # StreamEnv's key; the judge echoes it back
    refused: list[float] = []

    async def refuse(body, fields, metric, mode):
        refused.append(time.monotonic())
        return ErrorReply(401, message=f"Incorrect API key provided: {secret}")

    n = 20
    assert stream_env.cli("produce", "--input", "/dev/null").returncode == 0
    asyncio.run(produce(stream_env.bootstrap, stream_env.topic("input"),
                        [(f"case-{i}".encode(), _case(i, f"answer {i}"), None) for i in range(n)]))
    thread_judge.responder = refuse
    try:
        worker = stream_env.start_worker()
        try:
            code = worker.wait(90)
        except subprocess.TimeoutExpired:
            code = None
        stopped = time.monotonic()
    finally:
        thread_judge.responder = None
    logs = stream_env.logs()
    assert code == 78, logs[-3000:]
    assert refused and stopped - refused[0] < 10, (stopped - refused[0], logs[-3000:])
    lines = [line for line in logs.splitlines() if "judge configuration error" in line]
    assert len(lines) == 1 and "judge_api_key" in lines[0], logs[-3000:]
    assert secret not in logs and "Traceback" not in logs, logs[-3000:]
    for name in ("results", "dlq"):  # the batch was neither published nor sent to the DLQ
        assert asyncio.run(consume(stream_env.bootstrap, stream_env.topic(name), expect=1,
                                   timeout=3)) == []
    stream_env.start_worker()  # the key fixed: nothing was acked, so everything is judged
    results = asyncio.run(consume(stream_env.bootstrap, stream_env.topic("results"), expect=n,
                                  timeout=120, settle=1))
    assert sorted(r["case_id"] for r in results) == sorted(f"case-{i}" for i in range(n))
    assert all(m["error"] is None for r in results for m in r["metrics"])
