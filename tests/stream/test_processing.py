"""MessageJudge: a batch becomes results, judgment events and DLQ records; a
judge outage holds the batch instead of publishing errors (real HTTP judge)."""

import orjson
import pytest

from guardrail.judging.cache import MemoryCache
from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.local.rule_judge import ErrorReply
from guardrail.stream.envelope import Source
from guardrail.stream.events import JudgmentEvent, decode_events
from guardrail.stream.outage import PARTIAL_OUTAGE_RETRIES
from guardrail.stream.processing import MessageJudge, RawMessage


PER_METRIC = {"judge_calls": "per_metric"}


@pytest.fixture
async def message_judge(make_settings, monkeypatch, request):
    pauses = []

    async def pause(self, seconds):
        pauses.append(seconds)

    monkeypatch.setattr(MessageJudge, "_pause", pause)
    # Per metric: the call counts below are per metric; one call per message is
    # checked in test_a_batch_straddling_an_outage_with_one_call_per_message.
    settings = make_settings(judge_max_retries=0, **getattr(request, "param", PER_METRIC))
    # With a cache, as in the worker: a retried batch re-asks only what failed.
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation,
                          cache=MemoryCache(100))
    judge = MessageJudge.from_settings(evaluator, settings)
    judge.pauses = pauses
    yield judge
    await judge.evaluator.aclose()


def _batch(*outputs):
    return [RawMessage(orjson.dumps({"case_id": f"c{i}", "output": text}),
                       Source("in", 0, i, timestamp_ms=1_700_000_000_000))
            for i, text in enumerate(outputs)]


def _errors(outgoing, kafka):
    results = [orjson.loads(o.value) for o in outgoing if o.topic == kafka.results_topic]
    return results, [m["error"] for r in results for m in r["metrics"] if m.get("error")]


async def test_a_batch_straddling_an_outage_is_retried_not_published_as_errors(
        message_judge, judge_server):
    judge_server.script(ErrorReply(503), ErrorReply(503))  # 2 of 8 calls fail once
    outgoing = await message_judge.process(_batch("fine", "also fine", "ok", "good"))
    results, errors = _errors(outgoing, message_judge.kafka)
    assert len(results) == 4 and errors == []
    assert message_judge.pauses == [1.0]
    assert judge_server.calls == 10  # the 6 successes came from the cache


@pytest.mark.parametrize("message_judge", [{"judge_calls": "per_message"}], indirect=True)
async def test_a_batch_straddling_an_outage_with_one_call_per_message(message_judge,
                                                                      judge_server):
    judge_server.script(ErrorReply(503))  # 1 of 4 calls (2 of 8 judgments) fails once
    outgoing = await message_judge.process(_batch("fine", "also fine", "ok", "good"))
    results, errors = _errors(outgoing, message_judge.kafka)
    assert len(results) == 4 and errors == []
    assert message_judge.pauses == [1.0]
    assert judge_server.calls == 5  # the 3 successful messages came from the cache


async def test_one_message_the_judge_always_fails_is_published_as_an_error_in_the_end(
        message_judge, judge_server):
    async def fail_poison(body, fields, metric, mode):
        return ErrorReply(503) if "poison" in fields.get("output", "") else None

    judge_server.responder = fail_poison
    other_traffic = []

    async def pause(seconds):  # meanwhile other messages are judged fine
        other_traffic.append(await message_judge.process(_batch(f"healthy {len(other_traffic)}")))

    message_judge._pause = pause
    outgoing = await message_judge.process(_batch("fine", "poison pill", "ok", "good"))
    results, errors = _errors(outgoing, message_judge.kafka)
    assert len(results) == 4 and len(errors) == 2  # both metrics of the poison message
    assert all("judge unavailable" in e for e in errors)
    assert len(other_traffic) == PARTIAL_OUTAGE_RETRIES


async def test_a_message_failing_while_nothing_else_succeeds_waits_like_an_outage(
        message_judge, judge_server):
    failing = {"on": True}

    async def fail_poison(body, fields, metric, mode):
        if failing["on"] and "poison" in fields.get("output", ""):
            return ErrorReply(503)
        return None

    judge_server.responder = fail_poison
    rounds = []

    async def pause(seconds):
        rounds.append(seconds)
        if len(rounds) == 8:
            failing["on"] = False  # the judge recovers

    message_judge._pause = pause
    outgoing = await message_judge.process(_batch("fine", "poison pill", "ok", "good"))
    _, errors = _errors(outgoing, message_judge.kafka)
    assert errors == [] and len(rounds) == 8  # held past the partial retries, then judged


async def test_a_full_outage_holds_the_batch_until_the_judge_is_back(
        message_judge, judge_server):
    judge_server.set_outage(True, 503)
    rounds = []

    async def pause(seconds):
        rounds.append(seconds)
        if len(rounds) == 6:
            judge_server.set_outage(False)

    message_judge._pause = pause
    outgoing = await message_judge.process(_batch("fine", "ok"))
    results, errors = _errors(outgoing, message_judge.kafka)
    assert len(results) == 2 and errors == []
    assert rounds == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]  # backoff, well past the partial retries


async def test_judgment_events_are_typed_on_the_wire_keyed_by_group_family(message_judge):
    raw = RawMessage(orjson.dumps({"case_id": "c9", "output": "you idiot",
                                   "metadata": {"model": "m", "model_version": "v2"}}),
                     Source("in", 3, 17, timestamp_ms=1_700_000_000_000))
    outgoing = await message_judge.process([raw])
    sent = [o for o in outgoing if o.topic == message_judge.kafka.judgments_topic]
    events = {e.metric: e for o in sent for e in decode_events(o.value)[0]}
    assert len(sent) == len(events) == 2  # a bundle per metric: keys differ
    toxicity = events["toxicity"]
    assert (toxicity.status, toxicity.case_id, toxicity.evidence_spans) == \
        ("unsafe", "c9", ("idiot",))
    assert toxicity.group == {"model": "m", "model_version": "v2", "prompt_version": "-"}
    assert toxicity.dedup_mark == ("live|in|3", (17, 0))
    assert toxicity.event_time_ms == 1_700_000_000_000
    assert {o.key for o in sent} == {f"{metric}|model=m,prompt_version=-".encode()
                                     for metric in events}
    assert all(o.timestamp_ms == 1_700_000_000_000 for o in sent)


async def test_judgment_events_carry_their_partitions_floor_asked_once_judged(message_judge):
    asked = []

    def floor_of(topic, partition):
        asked.append((topic, partition))
        return {3: 15, 4: 2}[partition]

    batch = [RawMessage(orjson.dumps({"output": "fine"}), Source("in", p, o))
             for p, o in ((3, 17), (4, 2), (3, 18))]
    outgoing = await message_judge.process(batch, floor_of=floor_of)
    events = [e for o in outgoing if o.topic == message_judge.kafka.judgments_topic
              for e in decode_events(o.value)[0]]
    assert {(e.source.partition, e.source.offset, e.floor) for e in events} == \
        {(3, 17, 15), (4, 2, 2), (3, 18, 15)}
    assert sorted(asked) == [("in", 3), ("in", 4)]
    unfloored = [e for o in await message_judge.process(batch[:1])
                 if o.topic == message_judge.kafka.judgments_topic
                 for e in decode_events(o.value)[0]]
    assert unfloored and all(e.floor is None for e in unfloored)


TRACE = (("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
         ("bin", b"\x00\xff"))


async def test_results_and_dlq_records_are_sent_with_the_inputs_headers(message_judge):
    kafka = message_judge.kafka
    batch = [RawMessage(b'{"output": "you idiot"}', Source("in", 0, 7, key=b"k7", headers=TRACE)),
             RawMessage(b"{broken", Source("in", 1, 3, key=b"\xff", headers=TRACE))]
    outgoing = await message_judge.process(batch)
    result = next(o for o in outgoing if o.topic == kafka.results_topic)
    dlq = next(o for o in outgoing if o.topic == kafka.dlq_topic)
    assert result.headers == TRACE and dlq.headers == TRACE
    # No case_id: the result is named, and keyed, by the input's key.
    assert orjson.loads(result.value)["case_id"] == "k7" and result.key == b"k7"
    assert dlq.key == b"\xff"  # the DLQ keeps the input's key as it was
    assert orjson.loads(dlq.value)["headers"]["traceparent"] == TRACE[0][1].decode()
    events = [o for o in outgoing if o.topic == kafka.judgments_topic]
    assert len(events) == 2 and all(o.headers == () for o in events)


async def test_a_replay_routes_bad_input_to_its_own_dlq_and_tallies_what_judging_cost(
        message_judge, judge_server):
    live = message_judge
    replaying = MessageJudge(live.evaluator, worker=live.worker, kafka=live.kafka,
                             windows=live.windows, emit_judgments=False,
                             results_topic="r", dlq_topic="r.dlq")
    batch = [RawMessage(orjson.dumps({"case_id": "a", "output": "fine"}), Source("in", 0, 1)),
             RawMessage(b"[1]", Source("in", 0, 2))]
    first = await replaying.process(batch)
    assert sorted(o.topic for o in first) == ["r", "r.dlq"]
    tally = replaying.tally
    assert (tally.judged, tally.cached, tally.errors) == (2, 0, 0)
    assert tally.input_tokens > 0 and tally.output_tokens > 0
    await replaying.process(batch)  # same content again: the cache answers
    assert (tally.judged, tally.cached) == (2, 2) and judge_server.calls == 2


async def test_a_config_error_is_raised_out_of_the_batch_not_paused_or_published(
        message_judge, judge_server):
    from guardrail.errors import JudgeConfigError

    judge_server.set_outage(True, 401)  # every call: the key is refused
    with pytest.raises(JudgeConfigError, match="judge_api_key"):
        await message_judge.process(_batch("fine", "ok", "good") + [
            RawMessage(b"{not json", Source("in", 0, 9))])  # not even its DLQ record
    assert message_judge.pauses == []  # not waited out like an outage


async def test_an_unsampled_message_costs_no_judge_call_and_gets_no_result(
        make_settings, judge_server):
    from guardrail.stream.budget import BudgetGovernor
    from guardrail.stream.sampling import Sampler, is_sampled

    settings = make_settings(sample_rate=0.25, budget_tokens_per_hour=10**9)
    s = settings
    sampler = Sampler(s.sampling, group_labels=s.windows.group_labels,
                      version_label=s.windows.version_label, partitions=2)
    budget = BudgetGovernor(s.sampling)
    evaluator = Evaluator(LLMJudge(s.judge), evaluation=s.evaluation)
    judge = MessageJudge.from_settings(evaluator, s, sampler=sampler, budget=budget)
    try:
        batch = _batch(*[f"answer {i}" for i in range(40)])
        batch.append(RawMessage(b"{not json", Source("in", 0, 99)))
        outgoing = await judge.process(batch)
    finally:
        await evaluator.aclose()
    expected = {f"c{i}" for i in range(40) if is_sampled(f"c{i}", 0.25)}
    results = [orjson.loads(o.value) for o in outgoing if o.topic == s.kafka.results_topic]
    assert {r["case_id"] for r in results} == expected and 3 < len(expected) < 20
    assert judge_server.calls == len(expected)  # one call per judged message (both metrics)
    bundles = [o for o in outgoing if o.topic == s.kafka.judgments_topic]
    assert len(bundles) == 2  # one record per metric (key) for the whole batch
    events = [e for o in bundles for e in decode_events(o.value)[0]]
    skipped = [e for e in events if e.status == "not_sampled"]
    assert {e.case_id for e in skipped} == {f"c{i}" for i in range(40)} - expected
    assert len(skipped) == 2 * (40 - len(expected))  # one per metric, for the windows' seen
    offsets = [e.source.offset for e in events if e.metric == "toxicity"]
    assert offsets == list(range(40))  # input order, or the window counter skips some
    assert [o.topic for o in outgoing].count(s.kafka.dlq_topic) == 1  # bad input: still DLQ
    assert judge.not_sampled == 40 - len(expected)
    text = judge.telemetry.render().decode()
    assert f'guardrail_messages_total{{outcome="not_sampled"}} {40.0 - len(expected)}' in text
    assert budget.window.totals(budget.clock())[1] > 0  # the batch's spend was recorded


async def test_with_bundles_off_each_event_is_a_record_of_its_own(make_settings, judge_server):
    s = make_settings(judgment_bundles=False)
    evaluator = Evaluator(LLMJudge(s.judge), evaluation=s.evaluation)
    judge = MessageJudge.from_settings(evaluator, s)
    try:
        outgoing = await judge.process(_batch("fine", "also fine", "fine too"))
    finally:
        await evaluator.aclose()
    sent = [o for o in outgoing if o.topic == s.kafka.judgments_topic]
    assert [JudgmentEvent.decode(o.value).source.offset for o in sent
            if o.key.startswith(b"toxicity")] == [0, 1, 2]
    assert len(sent) == 6
