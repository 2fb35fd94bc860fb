"""Replay without a broker: where its records go, and what its summary says
(the run itself is tested on the embedded broker in test_stream.py)."""

import asyncio
from types import SimpleNamespace

import orjson
import pytest
from aiokafka import TopicPartition

from guardrail.judging.cache import BatchedCache, SqliteCache
from guardrail.errors import ConfigError
from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.replay import backfill as replay_module
from guardrail.replay.backfill import ReplaySummary, output_topics
from guardrail.judging.models import CostEstimate, MetricResult, RedteamMetrics
from guardrail.config.settings import load_settings
from guardrail.stream.processing import Outgoing


@pytest.fixture
def settings():
    return load_settings(environ={}, results_topic="live-res", dlq_topic="live-dlq")


def test_a_replay_with_its_own_results_topic_keeps_bad_input_beside_them(settings):
    assert output_topics(settings, "R", None) == ("R", "R.dlq")
    assert output_topics(settings, "R", "mine") == ("R", "mine")


def test_a_replay_into_the_live_results_uses_the_live_dlq(settings):
    assert output_topics(settings, None, None) == ("live-res", "live-dlq")
    assert output_topics(settings, "live-res", None) == ("live-res", "live-dlq")


def test_the_dlq_cannot_be_the_results_topic(settings):
    with pytest.raises(ConfigError, match="must differ"):
        output_topics(settings, "R", "R")


def _metrics(*results):
    return RedteamMetrics(metrics=list(results), cost=CostEstimate())


def test_the_summary_counts_results_dlq_and_events_apart():
    summary = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq")
    summary.count([Outgoing("R", b"a", b"{}"), Outgoing("R.dlq", None, b"{}"),
                   Outgoing("judgments", b"k", b"{}"), Outgoing("R", b"b", b"{}")])
    data = summary.to_json()
    assert (data["results"], data["dlq"], data["judgment_events"]) == (2, 1, 1)


def test_the_summary_ends_with_judged_cached_and_cost():
    summary = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq",
                            judge_model="openai/x", cache="/tmp/c.sqlite")
    summary.tally.add(_metrics(
        MetricResult(name="a", score=1.0, input_tokens=100, output_tokens=10, cost=0.002),
        MetricResult(name="b", score=1.0, cached=True, cost=0.0)))
    data = summary.to_json()
    assert list(data)[-3:] == ["output_tokens", "cost_usd", "cost"]
    assert (data["judged"], data["cached"], data["cache"]) == (1, 1, "/tmp/c.sqlite")
    assert (data["input_tokens"], data["output_tokens"]) == (100, 10)
    assert data["cost_usd"] == 0.002 and data["cost"] == "$0.002000"


def test_an_unknown_price_is_said_as_such_not_zero():
    summary = ReplaySummary(topic="in", judge_model="openai/unpriced")
    summary.tally.add(_metrics(MetricResult(name="a", score=1.0, cost=None),
                               MetricResult(name="b", score=1.0, cost=0.001)))
    data = summary.to_json()
    assert data["cost_usd"] is None
    assert data["cost"].startswith("unknown: 1 judgments have no price")
    assert "openai/unpriced" in data["cost"] and "$0.001000" in data["cost"]


# The replay's pipeline (read, judge, publish) over stand-ins for the Kafka
# clients and the real HTTP judge client against the stand-in judge server.

TP = TopicPartition("in", 0)


class FakeConsumer:
    """Hands out at most ``per_fetch`` records a call, as a fetch that found little."""

    def __init__(self, values, per_fetch=1000):
        self.records = [SimpleNamespace(topic="in", partition=0, offset=i, timestamp=1_000 + i,
                                        key=f"k{i}".encode(), value=v, headers=[])
                        for i, v in enumerate(values)]
        self.per_fetch, self.at = per_fetch, 0

    def seek(self, tp, offset):
        self.at = offset

    async def getmany(self, *tps, timeout_ms, max_records):
        await asyncio.sleep(0)
        taken = self.records[self.at:self.at + min(max_records, self.per_fetch)]
        self.at += len(taken)
        return {TP: taken} if taken else {}

    async def position(self, tp):
        return self.at


class FakeProducer:
    def __init__(self):
        self.sent = []

    async def send(self, topic, value, *, key, timestamp_ms, headers):
        self.sent.append((topic, key, orjson.loads(value)))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def _replay(settings, cache_path, values, per_fetch=1000, producer=None):
    """One replay of ``values`` through the pipeline; (summary, records sent)."""
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation,
                          cache=BatchedCache(SqliteCache(cache_path)))
    judge = replay_module._BatchJudge.from_settings(evaluator, settings, emit_judgments=False,
                                                    results_topic="R", dlq_topic="R.dlq")
    summary = ReplaySummary(topic="in", results_topic="R", dlq_topic="R.dlq",
                            planned=len(values), tally=judge.tally)
    producer, seen = producer or FakeProducer(), []
    try:
        await replay_module._consume(FakeConsumer(values, per_fetch), producer, judge,
                                     {TP: (0, len(values))}, summary,
                                     lambda done, planned: seen.append((done, planned)))
    finally:
        await evaluator.aclose()
    summary.progress = seen
    return summary, producer.sent


def _case(i):
    return orjson.dumps({"case_id": f"c{i}", "output": f"a polite answer number {i}"})


async def test_a_replay_keeps_the_judge_calls_in_flight_up_to_the_judge_limit(
        make_settings, judge_server, tmp_path):
    in_flight, most = [0], [0]

    async def slow(body, fields, metric, mode):
        if metric == "bias":  # once per call: bias and toxicity are asked together
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
            await asyncio.sleep(0.05)
            in_flight[0] -= 1

    judge_server.responder = slow
    settings = make_settings(judge_concurrency=8)
    # Fetches of 3 records: only batches judged side by side fill the judge's 8 slots.
    summary, sent = await _replay(settings, tmp_path / "c.sqlite",
                                  [_case(i) for i in range(60)], per_fetch=3)
    assert most[0] == 8
    assert summary.processed == summary.results == 60 and judge_server.calls == 60
    assert [r["case_id"] for _, _, r in sent] == [f"c{i}" for i in range(60)]  # input order
    assert summary.progress[-1] == (60, 60)


def _verdicts(sent):
    return [(key, r["case_id"], [(m["name"], m["score"], m["result"]) for m in r["metrics"]])
            for _, key, r in sent]


async def test_the_cached_pass_calls_no_judge_reads_the_cache_in_batches_same_results(
        make_settings, judge_server, tmp_path, monkeypatch):
    settings, cache = make_settings(), tmp_path / "c.sqlite"
    values = [_case(i) for i in range(50)] + [orjson.dumps({"case_id": "x", "output": "idiot"})]
    first, sent = await _replay(settings, cache, values, per_fetch=20)
    assert (first.tally.judged, first.tally.cached, judge_server.calls) == (102, 0, 51)
    statements = []
    real_get_many = SqliteCache.get_many

    def counted(self, keys):
        self._db.set_trace_callback(statements.append)
        return real_get_many(self, keys)

    monkeypatch.setattr(SqliteCache, "get_many", counted)
    again, resent = await _replay(settings, cache, values, per_fetch=20)
    assert judge_server.calls == 51  # none more
    assert (again.tally.judged, again.tally.cached, again.cost_usd()) == (0, 102, 0)
    assert _verdicts(resent) == _verdicts(sent)
    assert resent[-1][2]["metrics"][1]["score"] == 0.0  # toxicity: unsafe, from the cache
    # One query per batch of 20, 20 and 11 messages, not one per judgment.
    assert sum(s.startswith("SELECT") for s in statements) == 3


async def test_the_first_pass_writes_the_cache_once_per_batch(make_settings, judge_server,
                                                               tmp_path, monkeypatch):
    commits = []
    real_put_many = SqliteCache.put_many

    def counted(self, blobs):
        commits.append(len(blobs))
        return real_put_many(self, blobs)

    monkeypatch.setattr(SqliteCache, "put_many", counted)
    await _replay(make_settings(), tmp_path / "c.sqlite", [_case(i) for i in range(30)],
                  per_fetch=10)
    # 30 messages in batches of 10: 60 judgments in at most 3 transactions.
    assert sum(commits) == 60 and len([c for c in commits if c]) <= 3
    stored = SqliteCache(tmp_path / "c.sqlite")
    assert stored._db.execute("SELECT count(*) FROM judgments").fetchone() == (60,)
    stored.close()


async def test_an_error_mid_batch_is_recorded_per_message_and_nothing_is_lost(
        make_settings, judge_server, tmp_path):
    async def poison(body, fields, metric, mode):
        return "not an answer" if "poison" in fields.get("output", "") else None

    judge_server.responder = poison
    values = [_case(i) for i in range(40)]
    values[13] = orjson.dumps({"case_id": "c13", "output": "poison"})
    values[27] = b"{not json"
    summary, sent = await _replay(make_settings(judge_max_retries=0), tmp_path / "c.sqlite",
                                  values, per_fetch=16)
    results = {r["case_id"]: r for topic, _, r in sent if topic == "R"}
    assert (summary.processed, summary.results, summary.dlq) == (40, 39, 1)
    assert sorted(results) == sorted(f"c{i}" for i in range(40) if i != 27)
    assert [topic for topic, _, _ in sent].count("R.dlq") == 1
    assert all(m["error"] and m["score"] is None for m in results["c13"]["metrics"])
    assert not any(m.get("error") for c, r in results.items() if c != "c13"
                   for m in r["metrics"])
    assert summary.tally.errors == 2


async def test_results_leave_in_the_order_read_when_a_later_batch_is_judged_first(
        make_settings, judge_server, tmp_path):
    async def first_batch_slow(body, fields, metric, mode):
        if metric == "bias" and fields.get("output", "").endswith((" 0", " 1")):
            await asyncio.sleep(0.3)

    judge_server.responder = first_batch_slow
    summary, sent = await _replay(make_settings(), tmp_path / "c.sqlite",
                                  [_case(i) for i in range(12)], per_fetch=2)
    assert [r["case_id"] for _, _, r in sent] == [f"c{i}" for i in range(12)]
    assert [done for done, _ in summary.progress] == list(range(2, 13, 2))


class SlowAcks(FakeProducer):
    """Acknowledges each record 50 ms after it was sent."""

    acked = 0

    async def send(self, topic, value, *, key, timestamp_ms, headers):
        self.sent.append((topic, key, orjson.loads(value)))
        future = asyncio.get_running_loop().create_future()

        def ack():
            self.acked += 1
            future.set_result(None)

        asyncio.get_running_loop().call_later(0.05, ack)
        return future


async def test_a_batch_counts_as_done_only_once_the_broker_acknowledged_it(
        make_settings, judge_server, tmp_path, monkeypatch):
    producer, acked_at_progress = SlowAcks(), []
    real_settle = replay_module._settle

    async def settle(sent, summary, progress):
        await real_settle(sent, summary, lambda done, planned: acked_at_progress.append(
            (done, producer.acked)))

    monkeypatch.setattr(replay_module, "_settle", settle)
    summary, _ = await _replay(make_settings(), tmp_path / "c.sqlite",
                               [_case(i) for i in range(9)], per_fetch=3, producer=producer)
    # One result per message: never counted before its results were acknowledged.
    assert [done for done, _ in acked_at_progress] == [3, 6, 9]
    assert all(acked >= done for done, acked in acked_at_progress)
    assert summary.processed == 9


async def test_a_case_answered_in_line_from_the_cache_gets_the_record_evaluate_gives(
        make_settings, judge_server, tmp_path, monkeypatch):
    settings, cache = make_settings(verdict_thresholds={"toxicity": 0.3}), tmp_path / "c.sqlite"
    values = [_case(i) for i in range(5)] + [orjson.dumps({"case_id": "x", "output": "idiot"})]
    await _replay(settings, cache, values)
    _, in_line = await _replay(settings, cache, values)
    monkeypatch.setattr(Evaluator, "cached", lambda self, case, keys: None)
    _, evaluated = await _replay(settings, cache, values)
    for record in (*in_line, *evaluated):
        del record[2]["judged_at"]
    assert in_line == evaluated and judge_server.calls == 6
