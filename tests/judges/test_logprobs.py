"""Verdicts from P(UNSAFE) over real HTTP: the rule judge answers with token
log-probabilities (P set per metric by the test), through both transports, in
both scoring modes, one call per metric and one per message; thresholds,
``include_probability``, the unchanged default output, the fallback without
log-probabilities, and the cache under a changed threshold."""

import logging

import orjson
import pytest

from guardrail.judging.cache import MemoryCache, SqliteCache
from guardrail.judges.llm import LLMJudge
from guardrail.local.rule_judge import ContentReply, ErrorReply, make_verdict
from guardrail.judging.models import Case
from guardrail.judging.prompts import render_group_prompt, render_prompt
from guardrail.judging.rubrics import default_metrics
from guardrail.config.settings import load_settings
from guardrail.judges.transports import LiteLLMTransport

TOXIC = "Listen, you idiot, read the manual."
SPEC_CASE = {"case_id": "shakespeare-hamlet-short",
             "output": "The central theme of Hamlet is mortality ..."}


@pytest.fixture(params=["http", "litellm"])
def make_settings(request, make_settings):
    """The conftest factory with each judge transport in turn."""
    return lambda **overrides: make_settings(**{"judge_transport": request.param, **overrides})


@pytest.fixture(params=["per_message", "per_metric"])
def calls(request):
    return request.param


def _result(metrics, name="toxicity"):
    return next(m for m in metrics.metrics if m.name == name)


async def test_log_probabilities_are_asked_for_and_read_from_the_answer(judge_server,
                                                                       make_settings):
    judge_server.p_unsafe["toxicity"] = 0.7
    judge = LLMJudge(make_settings().judge)
    try:
        prompt = render_prompt(default_metrics()[1], Case(output=TOXIC),
                               scoring_mode="binary_yes_no", include_reasoning=False)
        reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
    finally:
        await judge.aclose()
    sent = judge_server.requests[-1]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5
    assert reply.probability == pytest.approx(0.7) and reply.severity_probs is None
    assert reply.answer.verdict == "UNSAFE" and judge.probabilities_available is True


async def test_a_p_of_0_7_is_unsafe_at_0_5_and_safe_at_0_8(judge_server, make_settings, calls,
                                                          evaluators):
    judge_server.p_unsafe["toxicity"] = 0.7
    case = Case(output=TOXIC)
    default = _result(await evaluators(make_settings(judge_calls=calls)).evaluate(case))
    assert default.result[0].verdict == "UNSAFE" and default.score == 0.0
    assert default.probability_unsafe == 0.7 and default.result[0].violations
    strict = _result(await evaluators(make_settings(
        judge_calls=calls, verdict_thresholds={"toxicity": 0.8})).evaluate(case))
    assert strict.result[0].verdict == "SAFE" and strict.result[0].passed
    assert strict.score == 1.0 and strict.probability_unsafe == 0.7
    assert strict.result[0].violations == [] and strict.result[0].evidence_spans == []


async def test_a_low_threshold_catches_what_the_sampled_verdict_let_pass(
        judge_server, make_settings, calls, evaluators):
    judge_server.p_unsafe["bias"] = 0.3     # sampled SAFE, but not by much
    settings = make_settings(judge_calls=calls, verdict_thresholds={"bias": 0.25})
    metrics = await evaluators(settings).evaluate(Case(output="A calm sentence."))
    bias, toxicity = _result(metrics, "bias"), _result(metrics, "toxicity")
    assert bias.result[0].verdict == "UNSAFE" and bias.probability_unsafe == 0.3
    # Other metrics keep the default threshold and the rule judge's confident SAFE.
    assert toxicity.result[0].verdict == "SAFE" and toxicity.probability_unsafe == 0.02


async def test_scale_mode_takes_severity_from_the_expected_value(judge_server, make_settings,
                                                                calls, evaluators):
    # P(UNSAFE) 0.7 on severity 4, the rest on 1: expected severity 3.1.
    judge_server.p_unsafe["toxicity"] = 0.7
    case = Case.model_validate({"output": TOXIC, "redteam": {"scoring_mode": "scale_1_5"}})
    default = _result(await evaluators(make_settings(judge_calls=calls)).evaluate(case))
    assert (default.result[0].severity, default.score, default.result[0].verdict) == (
        3, 0.5, "UNSAFE")
    assert default.severity_probs[4] == 0.7 and default.probability_unsafe == 0.7
    strict = _result(await evaluators(make_settings(
        judge_calls=calls, verdict_thresholds={"toxicity": 0.8})).evaluate(case))
    assert (strict.result[0].severity, strict.score, strict.result[0].verdict) == (
        2, 0.75, "SAFE")


async def test_include_probability_adds_the_field_from_the_deployment_or_the_case(
        judge_server, make_settings, calls, evaluators):
    judge_server.p_unsafe["toxicity"] = 0.7
    plain = Case(output=TOXIC)
    shown = Case.model_validate({"output": TOXIC, "redteam": {"include_probability": True}})
    hidden = Case.model_validate({"output": TOXIC, "redteam": {"include_probability": False}})
    evaluator = evaluators(make_settings(judge_calls=calls))
    out = orjson.loads((await evaluator.evaluate(shown)).to_json())
    assert out["metrics"][1]["result"][0] == {
        "verdict": "UNSAFE", "passed": False, "violations": ["toxicity trigger: idiot"],
        "evidence_spans": ["idiot"], "probability_unsafe": 0.7}
    assert out["metrics"][0]["result"][0]["probability_unsafe"] == 0.02
    assert "probability_unsafe" not in orjson.loads(
        (await evaluator.evaluate(plain)).to_json())["metrics"][1]["result"][0]
    deployment = evaluators(make_settings(judge_calls=calls,
                                          redteam={"include_probability": True}))
    out = orjson.loads((await deployment.evaluate(plain)).to_json())
    assert out["metrics"][1]["result"][0]["probability_unsafe"] == 0.7
    out = orjson.loads((await deployment.evaluate(hidden)).to_json())
    assert "probability_unsafe" not in out["metrics"][1]["result"][0]


@pytest.mark.parametrize("mode", ["binary_yes_no", "scale_1_5"])
async def test_the_default_output_is_byte_identical_to_the_sampled_verdicts(
        judge_server, make_settings, calls, evaluators, mode):
    cases = [Case.model_validate({**SPEC_CASE, "redteam": {"scoring_mode": mode}}),
             Case.model_validate({"output": TOXIC, "redteam": {"scoring_mode": mode}})]
    with_p = evaluators(make_settings(judge_calls=calls))
    without = evaluators(make_settings(judge_calls=calls, judge_logprobs=False))
    for case in cases:
        a, b = await with_p.evaluate(case), await without.evaluate(case)
        assert all(m.probability_unsafe is not None for m in a.metrics)
        assert all(m.probability_unsafe is None for m in b.metrics)
        assert orjson.loads(a.to_json())["metrics"] == orjson.loads(b.to_json())["metrics"]
        assert b"probability" not in a.to_json()
    spec = orjson.loads((await with_p.evaluate(Case.model_validate(SPEC_CASE))).to_json())
    assert spec["metrics"][0] == {
        "name": "bias", "category": "output|generation|answer", "score": 1.0, "error": None,
        "result": [{"verdict": "SAFE", "passed": True, "violations": [], "evidence_spans": []}]}


async def test_without_log_probabilities_the_sampled_verdict_stands_and_is_said_once(
        judge_server, make_settings, calls, evaluators, caplog):
    judge_server.logprobs = False          # a provider that has none
    evaluator = evaluators(make_settings(judge_calls=calls, judge_model="openai/no-probs",
                                         verdict_thresholds={"toxicity": 0.99}))
    with caplog.at_level(logging.WARNING, logger="guardrail.judge"):
        for i in range(3):
            metrics = await evaluator.evaluate(Case(case_id=str(i), output=f"{TOXIC} {i}"))
            toxicity = _result(metrics)
            assert toxicity.result[0].verdict == "UNSAFE"    # the threshold cannot apply
            assert toxicity.probability_unsafe is None
    said = [r for r in caplog.records if "log-probabilities" in r.getMessage()]
    assert len(said) == 1 and "openai/no-probs" in said[0].getMessage()
    assert evaluator.judge.probabilities_available is False


async def test_logprobs_off_sends_no_parameters_and_is_said_once(judge_server, make_settings,
                                                                 evaluators, caplog):
    evaluator = evaluators(make_settings(judge_logprobs=False))
    with caplog.at_level(logging.WARNING, logger="guardrail.judge"):
        for i in range(2):
            await evaluator.evaluate(Case(output=f"text {i}"))
    assert all("logprobs" not in r and "top_logprobs" not in r for r in judge_server.requests)
    said = [r.getMessage() for r in caplog.records if r.name == "guardrail.judge"]
    assert len(said) == 1 and "judge_logprobs is off" in said[0]


async def test_a_server_refusing_logprobs_is_asked_again_without_and_never_again(
        judge_server, make_settings, evaluators):
    judge_server.script(ErrorReply(400, message="logprobs is not supported by this model"))
    evaluator = evaluators(make_settings(judge_calls="per_message"))
    first = await evaluator.evaluate(Case(output=TOXIC))
    assert _result(first).result[0].verdict == "UNSAFE" and _result(first).error is None
    await evaluator.evaluate(Case(output="another text"))
    assert [r.get("logprobs") for r in judge_server.requests] == [True, None, None]


async def test_a_repaired_answer_is_read_from_its_own_tokens(judge_server, make_settings):
    judge_server.p_unsafe["toxicity"] = 0.7
    judge = LLMJudge(make_settings().judge)
    try:
        judge_server.script(ContentReply("Let me think about it."), None)
        prompt = render_prompt(default_metrics()[1], Case(output=TOXIC),
                               scoring_mode="binary_yes_no", include_reasoning=False)
        reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
        assert reply.probability == pytest.approx(0.7) and judge_server.calls == 2
        judge_server.script({"bias": make_verdict("SAFE"), "toxicity": "not an object"}, None)
        group = await judge.judge_group(
            render_group_prompt(tuple(default_metrics()), Case(output=TOXIC),
                                scoring_mode="binary_yes_no", include_reasoning=False),
            scoring_mode="binary_yes_no", include_reasoning=False)
    finally:
        await judge.aclose()
    assert group.answers["toxicity"].verdict == "UNSAFE"
    assert group.probabilities == pytest.approx({"bias": 0.02, "toxicity": 0.7})


@pytest.mark.parametrize("cache_kind", ["memory", "sqlite"])
async def test_a_changed_threshold_applies_to_cached_judgments(judge_server, make_settings,
                                                               evaluators, tmp_path, cache_kind):
    judge_server.p_unsafe["toxicity"] = 0.7
    path = tmp_path / "judgments.sqlite"
    cache = MemoryCache() if cache_kind == "memory" else SqliteCache(path)
    first = _result(await evaluators(make_settings(), cache=cache).evaluate(Case(output=TOXIC)))
    assert first.result[0].verdict == "UNSAFE" and judge_server.calls == 1
    if cache_kind == "sqlite":  # a later run, reading what the first one stored
        cache = SqliteCache(path)
    later = evaluators(make_settings(verdict_thresholds={"toxicity": 0.8},
                                     redteam={"include_probability": True}), cache=cache)
    hit = _result(await later.evaluate(Case(output=TOXIC)))
    assert judge_server.calls == 1 and hit.cached
    assert hit.result[0].verdict == "SAFE" and hit.result[0].violations == []
    assert hit.result[0].probability_unsafe == 0.7
    back = evaluators(make_settings(), cache=cache)     # and back: the evidence returns
    again = _result(await back.evaluate(Case(output=TOXIC)))
    assert again.result[0].verdict == "UNSAFE" and again.result[0].evidence_spans == ["idiot"]


async def test_judgments_cached_without_probabilities_are_not_reused_once_asked(
        judge_server, make_settings, evaluators):
    cache = MemoryCache()
    await evaluators(make_settings(judge_logprobs=False), cache=cache).evaluate(Case(output="x"))
    asked = _result(await evaluators(make_settings(), cache=cache).evaluate(Case(output="x")))
    assert judge_server.calls == 2 and not asked.cached and asked.probability_unsafe == 0.02


def _litellm_settings(**overrides):
    return load_settings(environ={}, **{"judge_transport": "litellm", **overrides}).judge


def test_litellm_asks_only_providers_that_take_log_probabilities():
    def transport(**overrides):
        return LiteLLMTransport(_litellm_settings(**overrides))

    assert transport().asks_logprobs is True
    assert transport(judge_model="anthropic/claude-3-5-haiku-20241022").asks_logprobs is False
    assert transport(judge_model="ollama/llama3").asks_logprobs is False
    assert transport(judge_logprobs=False).asks_logprobs is False


async def test_an_anthropic_judge_is_sent_no_logprobs(monkeypatch):
    from guardrail.providers.litellm import litellm

    sent = {}

    async def capture(**kwargs):
        sent.update(kwargs)
        raise RuntimeError("not sent anywhere")

    monkeypatch.setattr(litellm(), "acompletion", capture)
    settings = _litellm_settings(judge_model="anthropic/claude-3-5-haiku-20241022",
                                 judge_api_key="sk-ant-test")
    with pytest.raises(RuntimeError):
        await LiteLLMTransport(settings).complete([{"role": "user", "content": "hi"}], None)
    assert sent["model"].startswith("anthropic/")
    assert "logprobs" not in sent and "top_logprobs" not in sent
