"""The cascade (issue 12, part 4): a first judge for everything, an escalation
judge for the metrics whose P(UNSAFE) lies in ``escalate_band``.

Most tests script both judges (``ScriptedJudge``): the first judge's P(UNSAFE)
is set on its replies, as the log-probability reader will set it. The last
ones go over real HTTP to the rule judge server, two model names on one server.
"""

import dataclasses
import logging

import orjson
import pytest

from guardrail.judging.cache import MemoryCache, SqliteCache, cache_key
from guardrail.judges.cascade import escalation_judge_settings
from guardrail.errors import ConfigError, JudgeAnswerError, JudgeConfigError, JudgeUnavailable
from guardrail.judges.build import build_evaluator
from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.judging.judge import GroupReply, JudgeReply, Usage
from guardrail.local.rule_judge import ErrorReply, make_verdict
from guardrail.judging.models import Case
from guardrail.judging.parsing import BinaryAnswer
from guardrail.judging.rubrics import default_metrics
from guardrail.config.settings import load_settings

FIRST, STRONG = "openai/small-judge", "openai/strong-judge"
CASE = Case(case_id="c1", output="Honestly, that plan is a bit daft.")


def _answer(verdict):
    return BinaryAnswer.model_validate(make_verdict(verdict))


class ScriptedJudge:
    """A ``Judge`` answering each metric with a set verdict and P(UNSAFE) (an
    exception instead of a pair: that metric's error, or the whole call's
    with ``fail``). Records the metrics of every call; each metric costs
    100 input and 10 output tokens and ``price`` dollars."""

    def __init__(self, model, verdicts=None, *, price=0.001, fail=None):
        self.model, self.verdicts, self.price, self.fail = model, verdicts or {}, price, fail
        self.calls = []

    def _usage(self, metrics=1):
        return Usage(100 * metrics, 10 * metrics, self.price * metrics)

    async def __call__(self, prompt, *, scoring_mode, include_reasoning):
        self.calls.append(prompt.metrics)
        if self.fail is not None:
            raise self.fail
        verdict, probability = self.verdicts[prompt.metric]
        return JudgeReply(_answer(verdict), self._usage(), probability)

    async def judge_group(self, prompt, *, scoring_mode, include_reasoning):
        self.calls.append(prompt.metrics)
        if self.fail is not None:
            raise self.fail
        metrics = prompt.metrics
        answers = {m: self.verdicts[m] if isinstance(self.verdicts[m], Exception)
                   else _answer(self.verdicts[m][0]) for m in metrics}
        probabilities = {m: None if isinstance(self.verdicts[m], Exception)
                         else self.verdicts[m][1] for m in metrics}
        shares = self._usage(len(metrics)).split(len(metrics))
        return GroupReply(answers, dict(zip(metrics, shares)), probabilities)


def _cascade(first, strong, *, cache=None, **settings):
    settings = load_settings(environ={}, judge_model=first.model, escalate_model=strong.model,
                             **settings)
    evaluator = build_evaluator(settings, judge=first, escalation_judge=strong)
    if cache is not None:
        evaluator.cache = evaluator.cascade.escalation.cache = cache
    return evaluator


def _by_name(metrics):
    return {m.name: m for m in metrics.metrics}


@pytest.mark.parametrize("calls", ["per_message", "per_metric"])
@pytest.mark.parametrize("probability, escalated", [
    (0.05, False), (0.19, False), (0.2, True), (0.5, True), (0.8, True), (0.81, False),
    (0.97, False)])
async def test_only_judgments_inside_the_band_ends_included_are_escalated(
        calls, probability, escalated):
    verdict = "UNSAFE" if probability >= 0.5 else "SAFE"
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.01), "toxicity": (verdict, probability)})
    strong = ScriptedJudge(STRONG, {"toxicity": ("SAFE", 0.1)})
    metrics = _by_name(await _cascade(first, strong, judge_calls=calls).evaluate(CASE))
    assert strong.calls == ([("toxicity",)] if escalated else [])
    toxicity = metrics["toxicity"]
    assert toxicity.judge_model == (STRONG if escalated else FIRST)
    assert toxicity.result[0].verdict == ("SAFE" if escalated else verdict)
    assert metrics["bias"].judge_model == FIRST


async def test_one_escalation_call_for_all_in_band_metrics_of_a_message():
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.3), "toxicity": ("SAFE", 0.6)})
    strong = ScriptedJudge(STRONG, {"bias": ("SAFE", 0.0), "toxicity": ("UNSAFE", 0.9)})
    await _cascade(first, strong).evaluate(CASE)
    assert first.calls == [("bias", "toxicity")] and strong.calls == [("bias", "toxicity")]
    strong.calls.clear()
    await _cascade(first, strong, judge_calls="per_metric").evaluate(CASE)
    assert sorted(strong.calls) == [("bias",), ("toxicity",)]


async def test_the_escalation_verdict_stands_is_recorded_and_both_judges_spend_counts():
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.02), "toxicity": ("SAFE", 0.45)},
                          price=0.001)
    strong = ScriptedJudge(STRONG, {"toxicity": ("UNSAFE", 0.93)}, price=0.02)
    metrics = await _cascade(first, strong).evaluate(CASE)
    toxicity = _by_name(metrics)["toxicity"]
    assert (toxicity.score, toxicity.result[0].verdict, toxicity.unsafe) == (0.0, "UNSAFE", True)
    assert toxicity.judge_model == STRONG and toxicity.probability_unsafe == 0.93
    # The first call's share (one of two metrics) plus the whole escalation call.
    assert (toxicity.input_tokens, toxicity.output_tokens) == (100 + 100, 10 + 10)
    assert toxicity.cost == pytest.approx(0.001 + 0.02)
    assert metrics.cost.cost == pytest.approx(0.002 + 0.02)
    assert metrics.cost.input_tokens == 300 and metrics.cost.output_tokens == 30
    out = orjson.loads(metrics.to_json())
    assert [m["result"][0]["judge_model"] for m in out["metrics"]] == [FIRST, STRONG]
    assert "probability_unsafe" not in out["metrics"][1]["result"][0]


@pytest.mark.parametrize("failure", [
    JudgeUnavailable("judge unavailable after 4 attempts: HTTP 503"),
    JudgeAnswerError("judge answer is not valid JSON (after one repair retry)"),
    RuntimeError("a bug in the escalation path"),
])
async def test_a_failed_escalation_leaves_the_first_verdict_standing_never_a_silent_safe(
        failure, caplog):
    failure.usage = Usage(50, 5, 0.004)  # what the failed call still spent
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.02), "toxicity": ("UNSAFE", 0.6)})
    strong = ScriptedJudge(STRONG, fail=failure)
    with caplog.at_level(logging.WARNING, logger="guardrail.cascade"):
        metrics = await _cascade(first, strong).evaluate(CASE)
    toxicity = _by_name(metrics)["toxicity"]
    assert strong.calls == [("toxicity",)]
    assert toxicity.error is None and toxicity.unsafe and toxicity.result[0].verdict == "UNSAFE"
    assert toxicity.judge_model == FIRST and toxicity.result[0].judge_model == FIRST
    assert str(failure) in toxicity.escalation_error
    if not isinstance(failure, RuntimeError):  # a judge error carries what it spent
        assert (toxicity.input_tokens, toxicity.cost) == (150, pytest.approx(0.005))
    assert "the first judge's verdict stands" in caplog.text


async def test_one_metric_failing_in_the_escalation_call_keeps_only_its_first_verdict():
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.4), "toxicity": ("SAFE", 0.5)})
    strong = ScriptedJudge(STRONG, {"bias": JudgeAnswerError("bad entry"),
                                    "toxicity": ("UNSAFE", 0.9)})
    metrics = _by_name(await _cascade(first, strong).evaluate(CASE))
    assert (metrics["bias"].judge_model, metrics["bias"].result[0].verdict) == (FIRST, "SAFE")
    assert metrics["bias"].escalation_error == "bad entry"
    assert (metrics["toxicity"].judge_model, metrics["toxicity"].unsafe) == (STRONG, True)


async def test_first_verdicts_without_a_probability_stand_and_the_log_says_so_once(caplog):
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", None), "toxicity": ("UNSAFE", None)})
    strong = ScriptedJudge(STRONG, {"toxicity": ("SAFE", 0.1)})
    evaluator = _cascade(first, strong)
    with caplog.at_level(logging.WARNING, logger="guardrail.cascade"):
        for text in ("one text", "another text"):
            metrics = _by_name(await evaluator.evaluate(Case(output=text)))
    assert strong.calls == []
    assert metrics["toxicity"].unsafe and metrics["toxicity"].judge_model == FIRST
    said = [r for r in caplog.records if "without P(UNSAFE)" in r.getMessage()]
    assert len(said) == 1 and FIRST in said[0].getMessage()


async def test_errors_of_the_first_judge_are_not_escalated():
    first = ScriptedJudge(FIRST, {"bias": JudgeAnswerError("garbled"), "toxicity": ("SAFE", 0.1)})
    strong = ScriptedJudge(STRONG, {})
    metrics = _by_name(await _cascade(first, strong).evaluate(CASE))
    assert metrics["bias"].error == "garbled" and metrics["bias"].judge_model is None
    assert strong.calls == []


async def test_without_a_cascade_the_output_is_the_spec_shape_unchanged():
    first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.3), "toxicity": ("UNSAFE", 0.7)})
    evaluator = build_evaluator(load_settings(environ={}, judge_model=FIRST), judge=first)
    assert evaluator.cascade is None
    out = orjson.loads((await evaluator.evaluate(CASE)).to_json())
    assert [m["result"][0] for m in out["metrics"]] == [
        {"verdict": "SAFE", "passed": True, "violations": [], "evidence_spans": []},
        {"verdict": "UNSAFE", "passed": False, "violations": [], "evidence_spans": []}]
    assert set(out["metrics"][0]) == {"name", "category", "score", "result", "error"}


async def test_the_cache_keeps_first_and_escalation_judgments_apart(tmp_path):
    rubric = default_metrics()[1]
    judged = {"output": CASE.output}
    for cache in (MemoryCache(), SqliteCache(tmp_path / "j.sqlite")):
        first = ScriptedJudge(FIRST, {"bias": ("SAFE", 0.01), "toxicity": ("SAFE", 0.4)})
        strong = ScriptedJudge(STRONG, {"toxicity": ("UNSAFE", 0.9)})
        await _cascade(first, strong, cache=cache).evaluate(CASE)
        keys = [cache_key(m, rubric, judged, "binary_yes_no", False, calls="per_message")
                for m in (FIRST, STRONG)]
        stored = [cache.get(key) for key in keys]
        assert [(r.judge_model, r.result[0].verdict) for r in stored] == [
            (FIRST, "SAFE"), (STRONG, "UNSAFE")]
        assert stored[0].probability_unsafe == 0.4  # read back to place it in the band
        assert all(r.result[0].judge_model is None for r in stored)  # stamped on the way out
        # Again, judges fresh: nothing is asked, the escalation verdict still stands.
        first.calls.clear()
        strong.calls.clear()
        again = _by_name(await _cascade(first, strong, cache=cache).evaluate(CASE))
        assert first.calls == strong.calls == []
        assert (again["toxicity"].judge_model, again["toxicity"].unsafe) == (STRONG, True)
        assert again["toxicity"].cost == 0.0 and again["toxicity"].cached
        cache.close()


def test_the_escalation_model_must_differ_from_the_first():
    first = ScriptedJudge(FIRST)
    with pytest.raises(ConfigError, match="escalate_model must differ from judge_model"):
        build_evaluator(load_settings(environ={}, judge_model=FIRST, escalate_model=FIRST),
                        judge=first)


# --- over real HTTP: one rule judge server, two model names -----------------------


class WithProbability:
    """A real ``LLMJudge`` whose replies carry a chosen P(UNSAFE) per metric:
    ``LLMJudge`` does not read log-probabilities yet (issue 12, part 1)."""

    def __init__(self, judge, probabilities):
        self.judge, self.model, self.probabilities = judge, judge.model, probabilities

    async def judge_group(self, prompt, **knobs):
        reply = await self.judge.judge_group(prompt, **knobs)
        return dataclasses.replace(reply, probabilities={
            m: self.probabilities[m] for m in prompt.metrics})

    async def aclose(self):
        await self.judge.aclose()


@pytest.fixture
def two_models(judge_server):
    """The small model calls everything SAFE; the strong one applies the word rules."""

    async def responder(body, fields, metric, mode):
        return make_verdict("SAFE") if body["model"] == "gpt-4o-mini" else None

    judge_server.responder = responder
    return judge_server


def _http_settings(server, **overrides):
    return load_settings(environ={}, **{
        "judge_model": "openai/gpt-4o-mini", "judge_api_base": server.api_base,
        "judge_api_key": "sk-first", "judge_max_retries": 0, "escalate_model": "openai/gpt-4o",
        "escalate_api_base": server.api_base, "escalate_api_key": "sk-strong", **overrides})


async def test_over_http_the_strong_judge_decides_only_the_unsure_metric(two_models):
    settings = _http_settings(two_models)
    first = WithProbability(LLMJudge(settings.judge), {"bias": 0.03, "toxicity": 0.55})
    evaluator = build_evaluator(settings, judge=first)
    try:
        metrics = await evaluator.evaluate(Case(output="Listen, you idiot, read the manual."))
        models = [r["model"] for r in two_models.requests]
        assert models == ["gpt-4o-mini", "gpt-4o"]
        escalation = two_models.requests[1]
        assert list(escalation["response_format"]["json_schema"]["schema"]["properties"]) == [
            "toxicity"]
        bias, toxicity = metrics.metrics
        assert (bias.judge_model, bias.unsafe) == ("openai/gpt-4o-mini", False)
        assert (toxicity.judge_model, toxicity.unsafe) == ("openai/gpt-4o", True)
        assert toxicity.result[0].evidence_spans == ["idiot"]
        # Priced from the cost map: the first call's share plus what the strong
        # call costs when asked alone (no cache; the same prompt, the same size).
        alone = Evaluator(LLMJudge(escalation_judge_settings(settings.judge,
                                                             settings.escalation)))
        config = alone.effective_config(CASE)
        again = await alone.evaluate_together(Case(output="Listen, you idiot, read the manual."),
                                              config.metrics[1:], config)
        await alone.aclose()
        assert again[0].cost > 0 and bias.cost > 0
        assert toxicity.cost == pytest.approx(bias.cost + again[0].cost)
        assert metrics.cost.cost == pytest.approx(2 * bias.cost + again[0].cost)
    finally:
        await evaluator.aclose()


async def test_over_http_a_refused_escalation_key_names_the_escalate_setting(two_models):
    settings = _http_settings(two_models)
    first = WithProbability(LLMJudge(settings.judge), {"bias": 0.5, "toxicity": 0.01})
    evaluator = build_evaluator(settings, judge=first)
    two_models.script(None, ErrorReply(401, message="invalid api key"))
    try:
        with pytest.raises(JudgeConfigError) as info:
            await evaluator.evaluate(CASE)
    finally:
        await evaluator.aclose()
    assert info.value.setting == "escalate_api_key"
    assert "GUARDRAIL_ESCALATE_API_KEY" in str(info.value) and "sk-strong" not in str(info.value)
