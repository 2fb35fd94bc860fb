"""Moderation in batches (issue 39, item 5), over real HTTP against the stand-in
moderation endpoint: messages judged at the same time share requests of up to
``judge_batch_size`` inputs, each message gets its own scores back in order, a
bad entry, a short ``results`` list or a failed request fails only the messages
it concerns, and ``judge_batch_size: 1`` sends one request per message, as before.
The worker's judging path (``MessageJudge``) sends ceil(N / 32) requests for N
messages, and so does the batch CLI."""

from __future__ import annotations

import asyncio
import math

import pytest
from support.guard_server import Answer, GuardServer, moderation_result
from support.in_process import judge_in_process

from guardrail.batch.run import run_batch
from guardrail.errors import ConfigError, JudgeAnswerError, JudgeError
from guardrail.judges import GuardJudge
from guardrail.judging.models import Case
from guardrail.config.settings import load_settings

MODEL = "openai/omni-moderation-latest"


def score_of(text: str) -> float:
    """The harassment score the stand-in gives ``text``: unique per message number,
    UNSAFE (>= 0.5) for half of them, so a swapped result changes a verdict."""
    number = int(text.rsplit("#", 1)[1])
    return round((number % 10) / 10 + number / 10_000, 4)


def moderate(text: str) -> object:
    if "garbage" in text:
        return "not a result"
    return moderation_result({"harassment": score_of(text), "hate": 0.0})


def text(i: int, word: str = "reply") -> str:
    return f"A {word} to the ticket #{i:04d}"


@pytest.fixture
async def server():
    running = await GuardServer().start()
    running.moderate = moderate
    yield running
    await running.aclose()


@pytest.fixture
async def judge_with(server):
    made: list[GuardJudge] = []

    def make(**overrides) -> GuardJudge:
        values = {"judge_model": MODEL, "judge_api_base": server.api_base,
                  "judge_max_retries": 0, "judge_timeout": 5, **overrides}
        made.append(GuardJudge(load_settings(environ={}, **values).judge, "moderation"))
        return made[-1]

    yield make
    for judge in made:
        await judge.aclose()


async def judge_all(judge: GuardJudge, texts: list[str]) -> list:
    """Every text judged for toxicity at the same time; each one's answer."""
    groups = await asyncio.gather(*(judge.judge_case(Case(output=t), ["toxicity"])
                                    for t in texts))
    return [(g.answers["toxicity"], g.probabilities.get("toxicity")) for g in groups]


def assert_own_verdict(answer, probability, sent: str) -> None:
    assert not isinstance(answer, Exception), f"{sent}: {answer}"
    assert probability == pytest.approx(score_of(sent)), sent
    assert answer.verdict == ("UNSAFE" if score_of(sent) >= 0.5 else "SAFE"), sent


async def test_concurrent_messages_share_requests_and_get_their_own_scores(server, judge_with):
    texts = [text(i) for i in range(70)]
    replies = await judge_all(judge_with(), texts)
    assert [len(inputs) for inputs in server.inputs()] == [32, 32, 6]
    assert [t for inputs in server.inputs() for t in inputs] == texts  # in order
    for sent, (answer, probability) in zip(texts, replies):
        assert_own_verdict(answer, probability, sent)
    assert {answer.verdict for answer, _ in replies} == {"SAFE", "UNSAFE"}


async def test_judge_batch_size_bounds_a_request_and_one_sends_each_alone(server, judge_with):
    await judge_all(judge_with(judge_batch_size=4), [text(i) for i in range(10)])
    assert [len(inputs) for inputs in server.inputs()] == [4, 4, 2]
    before = len(server.requests)
    texts = [text(i) for i in range(10, 15)]
    replies = await judge_all(judge_with(judge_batch_size=1), texts)
    alone = server.requests[before:]
    assert alone == [{"model": "omni-moderation-latest", "input": t} for t in texts]
    for sent, (answer, probability) in zip(texts, replies):
        assert_own_verdict(answer, probability, sent)


async def test_a_lone_message_is_sent_as_before(server, judge_with):
    (reply,) = await judge_all(judge_with(), [text(7)])
    assert server.requests == [{"model": "omni-moderation-latest", "input": text(7)}]
    assert_own_verdict(*reply, text(7))


async def test_a_bad_entry_fails_only_its_own_message(server, judge_with):
    texts = [text(i) for i in range(6)]
    texts[3] = text(3, "garbage")
    replies = await judge_all(judge_with(), texts)
    assert len(server.requests) == 1
    bad, _ = replies.pop(3)
    assert isinstance(bad, JudgeAnswerError) and "moderation answer has no results" in str(bad)
    for sent, (answer, probability) in zip(texts[:3] + texts[4:], replies):
        assert_own_verdict(answer, probability, sent)


async def test_a_short_results_list_fails_that_requests_messages_only(server, judge_with):
    server.script.append(Answer(body={"results": [moderation_result({"harassment": 0.2})]}))
    texts = [text(i) for i in range(8)]
    replies = dict(zip(texts, await judge_all(judge_with(judge_batch_size=4), texts)))
    short, whole = server.inputs()  # the first request to arrive got the short answer
    assert len(short) == len(whole) == 4
    for sent in short:
        error = replies[sent][0]
        assert isinstance(error, JudgeAnswerError), sent
        assert "1 results for 4 inputs" in str(error) and MODEL in str(error)
    for sent in whole:
        assert_own_verdict(*replies[sent], sent)


@pytest.mark.parametrize("retries", [0, 1])
async def test_a_failed_request_fails_or_retries_only_its_messages(server, judge_with,
                                                                    retries):
    server.script.append(Answer(status=500))
    texts = [text(i) for i in range(8)]
    judge = judge_with(judge_batch_size=4, judge_max_retries=retries)
    replies = dict(zip(texts, await judge_all(judge, texts)))
    failed, whole, *again = server.inputs()
    assert sorted(t for inputs in again for t in inputs) == (sorted(failed) if retries else [])
    for sent in whole + (failed if retries else []):
        assert_own_verdict(*replies[sent], sent)
    for sent in [] if retries else failed:
        error = replies[sent][0]
        assert isinstance(error, JudgeError) and "HTTP 500" in str(error), error


@pytest.mark.parametrize("batch_size", [1, 32])
async def test_the_workers_judging_path_sends_ceil_n_over_batch_size_requests(server,
                                                                              batch_size):
    cases = [{"case_id": f"c{i}", "output": text(i)} for i in range(64)]
    settings = load_settings(environ={}, judge_model=MODEL, judge_protocol="moderation",
                             judge_api_base=server.api_base, judge_max_retries=0,
                             judge_batch_size=batch_size)
    results, _ = await judge_in_process(settings, cases)
    assert len(server.requests) == math.ceil(len(cases) / batch_size)
    for case in cases:
        metrics = {m["name"]: m for m in results[case["case_id"]]["metrics"]}
        assert [m["error"] for m in metrics.values()] == [None, None], metrics
        assert metrics["bias"]["result"][0]["verdict"] == "SAFE"  # hate: 0.0 for every one
        metric = metrics["toxicity"]
        unsafe = score_of(case["output"]) >= 0.5
        assert metric["result"][0]["verdict"] == ("UNSAFE" if unsafe else "SAFE")


async def test_the_batch_cli_lets_in_enough_cases_to_fill_a_request(server, tmp_path):
    cases = [(f"line {i}", Case(case_id=f"c{i}", output=text(i))) for i in range(40)]
    settings = load_settings(environ={}, judge_model=MODEL, judge_protocol="moderation",
                             judge_api_base=server.api_base, judge_max_retries=0)
    summary = await run_batch(cases, settings=settings, output_dir=tmp_path)
    assert (summary.cases, summary.judged) == (40, 40)
    assert [len(inputs) for inputs in server.inputs()] == [32, 8]  # not 16 at a time


def test_judge_batch_size_is_a_setting_with_its_variable():
    assert load_settings(environ={}).judge.batch_size == 32
    env = {"GUARDRAIL_JUDGE_BATCH_SIZE": "8", "GUARDRAIL_JUDGE_PROTOCOL": "moderation"}
    judge = load_settings(environ=env).judge
    assert judge.batch_size == 8 and judge.calls_in_flight() == 16 * 8
    assert judge.calls_in_flight("llama_guard") == 16
    with pytest.raises(ConfigError, match="judge_batch_size"):
        load_settings(environ={}, judge_batch_size=0)
