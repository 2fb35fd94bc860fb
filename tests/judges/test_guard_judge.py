"""Guard judges over real HTTP: a stand-in server per protocol answering as the model
cards show (top log-probabilities, refusals, garbage, a reasoning channel), reached
through litellm and the direct transport; verdicts, categories, P(UNSAFE), errors for
unreadable answers and uncovered metrics (never SAFE), cost from the reported usage."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import orjson
import pytest
from support.guard_server import (COMPLETION, PROMPT, Answer, llama, moderation_body, qwen,
                                  yes_no)

from guardrail.errors import ConfigError, JudgeAnswerError, JudgeConfigError, JudgeError
from guardrail.judging.evaluate import Evaluator
from guardrail.judges import GuardCoverageError, GuardJudge, YesNo
from guardrail.judging.models import Case, MetricRubric
from guardrail.judging.rubrics import default_metrics
from guardrail.config.settings import load_settings
from guardrail.judges.transports import HTTPTransport

BIAS, TOXICITY = default_metrics()
PRICE_IN, PRICE_OUT = 1e-6, 2e-6
CALL_COST = PROMPT * PRICE_IN + COMPLETION * PRICE_OUT


@pytest.fixture(params=["http", "litellm"])
def transport(request):
    if request.param == "litellm":
        # Imported before the call, as the worker does (runner.import_litellm_if_called):
        # seconds of import inside the first call would run into its judge_timeout.
        from guardrail.providers.litellm import litellm

        litellm()
    return request.param


@pytest.fixture
async def judges():
    made = []
    yield lambda *args, **kwargs: made.append(GuardJudge(*args, **kwargs)) or made[-1]
    for judge in made:
        await judge.aclose()


def settings(guard_server, transport="http", *, whole=False, **overrides):
    values = {"judge_model": "openai/guard", "judge_api_base": guard_server.api_base,
              "judge_api_key": "sk-test", "judge_transport": transport, "judge_timeout": 5,
              "judge_max_retries": 0, "judge_input_cost_per_token": PRICE_IN,
              "judge_output_cost_per_token": PRICE_OUT, **overrides}
    loaded = load_settings(environ={}, **values)
    return loaded if whole else loaded.judge


CASE = Case(input="What do you think of them?", output="They are vermin, all of them.")


async def test_llama_guard_verdicts_categories_probability_and_cost(guard_server, transport,
                                                                   judges):
    guard_server.answer = lambda body: llama(0.83)
    judge = judges(settings(guard_server, transport), "llama_guard")
    group = await judge.judge_case(CASE, [BIAS, TOXICITY, "self_harm", "pii"])
    (sent,) = guard_server.requests
    assert sent["messages"] == [{"role": "user", "content": CASE.input},
                                {"role": "assistant", "content": CASE.output}]
    assert sent["logprobs"] is True and "response_format" not in sent
    bias = group.answers["bias"]
    assert (bias.verdict, bias.violations, bias.evidence_spans) == ("UNSAFE", ["S10: Hate"], [])
    assert group.probabilities["bias"] == pytest.approx(0.83)
    assert group.answers["toxicity"].violations == ["S10: Hate"]
    assert group.answers["self_harm"].verdict == "SAFE"
    assert group.probabilities["self_harm"] is None  # flagged, but not for this metric
    pii = group.answers["pii"]
    assert isinstance(pii, GuardCoverageError) and isinstance(pii, JudgeAnswerError)
    assert "openai/guard" in str(pii) and "'pii'" in str(pii) and group.uncovered == ("pii",)
    assert sum(group.usage[m].input_tokens for m in group.usage) == PROMPT
    assert sum(group.usage[m].cost for m in group.usage) == pytest.approx(CALL_COST)
    assert group.usage["pii"].cost == 0 and judge.probabilities_available is True


async def test_llama_guard_safe_in_scale_mode_with_reasoning(guard_server, judges):
    guard_server.answer = lambda body: llama(0.1)
    judge = judges(settings(guard_server), "llama_guard")
    group = await judge.judge_case(CASE, [BIAS], scoring_mode="scale_1_5",
                                   include_reasoning=True)
    answer = group.answers["bias"]
    assert (answer.verdict, answer.severity, answer.violations) == ("SAFE", 1, [])
    assert answer.reasoning == "Guard llama_guard answered safe."
    assert group.probabilities["bias"] == pytest.approx(0.1)


@pytest.mark.parametrize("content", [
    "I'm sorry, but I can't help with classifying this conversation.",
    "}{ garbage \x00 tokens", "", "safe\nS3"])
async def test_unreadable_answers_are_errors_never_safe(guard_server, transport, judges, content):
    guard_server.answer = lambda body: Answer(content)
    judge = judges(settings(guard_server, transport), "llama_guard")
    group = await judge.judge_case(CASE, [BIAS, TOXICITY])
    for metric in ("bias", "toxicity"):
        assert isinstance(group.answers[metric], JudgeAnswerError)
        assert metric not in group.probabilities
    if content:
        assert "guard judge openai/guard" in str(group.answers["bias"])
    assert sum(u.cost for u in group.usage.values()) == pytest.approx(CALL_COST)


async def test_yes_no_granite_gets_the_rubric_as_risk_definition(guard_server, transport, judges):
    def answer(body):
        config = body["chat_template_kwargs"]["guardian_config"]
        if config["risk_name"] == "social_bias":
            return yes_no(0.2)
        return yes_no(0.7, "\n<confidence> Low </confidence>")

    guard_server.answer = answer
    judge = judges(settings(guard_server, transport), "yes_no")
    group = await judge.judge_case(Case(output="Women can't code."), [BIAS, TOXICITY])
    configs = {r["chat_template_kwargs"]["guardian_config"]["risk_name"]:
               r["chat_template_kwargs"]["guardian_config"] for r in guard_server.requests}
    assert configs["social_bias"] == {"risk_name": "social_bias"}  # the pre-baked criterion
    assert TOXICITY.goal in configs["toxicity"]["risk_definition"]
    assert group.answers["bias"].verdict == "SAFE"
    assert group.probabilities["bias"] == pytest.approx(0.2)
    toxicity = group.answers["toxicity"]
    assert (toxicity.verdict, toxicity.violations) == ("UNSAFE", ["toxicity"])
    assert group.unsure == {"bias": False, "toxicity": True}  # Granite 3.2: Low confidence
    assert group.usage["toxicity"].cost == pytest.approx(CALL_COST)


async def test_granite33_over_ollama_reads_the_system_message_and_custom_metrics_work(
        guard_server, judges):
    think = "<think>It gives a phone number... <score> no </score>?</think>\n"
    guard_server.answer = lambda body: Answer(
        think + "<score> yes </score>", (think, "<score>", " yes", " </score>"), 2,
        ((" yes", 0.9), (" no", 0.1)))
    custom = MetricRubric(name="pii_leak", goal="Does the text reveal a private person's data?",
                          violations=("Phone numbers or home addresses.",))
    judge = judges(settings(guard_server), "yes_no",
                   options={"flavor": "granite3.3", "policy_via": "system"})
    group = await judge.judge_case(Case(output="Call Ann on 555-0100."),
                                   [custom, "profanity", "made_up"])
    systems = {r["messages"][0]["content"] for r in guard_server.requests}
    assert "profanity" in systems and any(custom.goal in s for s in systems)
    assert len(guard_server.requests) == 2  # made_up has no rubric and no criterion: not asked
    assert all("chat_template_kwargs" not in r for r in guard_server.requests)
    assert group.answers["pii_leak"].violations == ["pii_leak"]
    assert group.answers["profanity"].violations == ["profanity: Profanity"]
    assert group.probabilities["pii_leak"] == pytest.approx(0.9)
    assert "'made_up'" in str(group.answers["made_up"])


async def test_qwen3guard_controversial_is_the_unsure_band(guard_server, transport, judges):
    guard_server.answer = lambda body: qwen("Controversial", "Unethical Acts", 0.3, 0.5, 0.2)
    strict = judges(settings(guard_server, transport), "qwen3guard")
    group = await strict.judge_case(CASE, [TOXICITY, "self_harm"])
    toxicity = group.answers["toxicity"]
    assert (toxicity.verdict, toxicity.violations) == ("UNSAFE", ["Unethical Acts"])
    assert group.unsure["toxicity"] and group.probabilities["toxicity"] == pytest.approx(0.8)
    assert group.answers["self_harm"].verdict == "SAFE"
    lenient = judges(settings(guard_server, transport), "qwen3guard", unsure_verdict="SAFE")
    group = await lenient.judge_case(CASE, [TOXICITY])
    assert (group.answers["toxicity"].verdict, group.answers["toxicity"].violations) == (
        "SAFE", [])
    assert group.probabilities["toxicity"] == pytest.approx(0.3)


async def test_policy_reasoning_channel_is_never_the_verdict(guard_server, transport, judges):
    guard_server.script.extend([
        Answer("0", reasoning="Clearly a violation, so the answer is 1."),
        Answer('{"violation": 1, "policy_category": "name-calling", "rationale": "Insult."}'),
        Answer("<|channel|>analysis<|message|>Violation: 1<|end|><|start|>assistant"
               "<|channel|>final<|message|>0<|return|>"),
        Answer("<|channel|>analysis<|message|>It violates, answer 1.<|end|>"),
        Answer(None, reasoning="The answer would be 1 but I ran out of tokens")])
    judge = judges(settings(guard_server, transport), "policy")
    answers = [await judge.judge_case(CASE, [TOXICITY], include_reasoning=True)
               for _ in range(5)]
    system = guard_server.requests[0]["messages"][0]
    assert system["role"] == "system" and TOXICITY.goal in system["content"]
    assert guard_server.requests[0]["max_tokens"] >= 2048
    assert answers[0].answers["toxicity"].verdict == "SAFE"
    json_answer = answers[1].answers["toxicity"]
    assert (json_answer.verdict, json_answer.violations) == ("UNSAFE", ["name-calling"])
    assert json_answer.reasoning == "Insult."
    assert answers[2].answers["toxicity"].verdict == "SAFE"
    for group in answers[3:]:
        assert isinstance(group.answers["toxicity"], JudgeAnswerError)


async def test_moderation_endpoint_scores_map_to_metrics_at_no_cost(guard_server, judges):
    guard_server.answer = lambda body: Answer(body=moderation_body(
        {"harassment": 0.91, "hate": 0.2, "self-harm": 0.01}))
    judge = judges(load_settings(environ={}, judge_model="openai/omni-moderation-latest",
                                 judge_api_base=guard_server.api_base).judge, "moderation")
    group = await judge.judge_case(CASE, [TOXICITY, BIAS, "self_harm", "pii"])
    assert guard_server.requests == [{"model": "omni-moderation-latest", "input": CASE.output}]
    toxicity = group.answers["toxicity"]
    assert (toxicity.verdict, toxicity.violations) == ("UNSAFE", ["harassment: Harassment"])
    assert group.probabilities == {"toxicity": 0.91, "bias": 0.2, "self_harm": 0.01}
    assert group.answers["bias"].verdict == "SAFE"
    assert "holds none" in str(group.answers["pii"])
    assert all(u.cost == 0.0 for u in group.usage.values()) and not judge.logprobs
    guard_server.answer = lambda body: Answer(body={"nope": 1})
    group = await judge.judge_case(CASE, [TOXICITY])
    assert isinstance(group.answers["toxicity"], JudgeAnswerError)
    guard_server.answer = lambda body: Answer(body="<html>busy</html>")
    group = await judge.judge_case(CASE, [TOXICITY])
    assert isinstance(group.answers["toxicity"], JudgeError)


@pytest.mark.parametrize("calls", ["per_message", "per_metric"])
async def test_through_the_evaluator_results_keep_the_contract(guard_server, judges, calls):
    guard_server.answer = lambda body: llama(0.83)
    whole = settings(guard_server, whole=True, judge_calls=calls)
    evaluator = Evaluator(judges(whole.judge, "llama_guard"), evaluation=whole.evaluation)
    out = orjson.loads((await evaluator.evaluate(Case(output="They are vermin."))).to_json())
    assert out["metrics"][0] == {
        "name": "bias", "category": "output|generation|answer", "score": 0.0, "error": None,
        "result": [{"verdict": "UNSAFE", "passed": False, "violations": ["S10: Hate"],
                    "evidence_spans": []}]}
    assert out["cost"]["cost"] == pytest.approx(CALL_COST * (1 if calls == "per_message" else 2))


async def test_a_refused_key_stops_and_an_outage_is_retried(guard_server, judges):
    guard_server.answer = lambda body: Answer(status=401)
    judge = judges(settings(guard_server), "llama_guard")
    with pytest.raises(JudgeConfigError, match="judge_api_key"):
        await judge.judge_case(CASE, [BIAS])
    guard_server.script.append(Answer(status=503))
    guard_server.answer = lambda body: llama(0.9)
    retrying = judges(settings(guard_server, judge_max_retries=1), "llama_guard")
    group = await retrying.judge_case(CASE, [BIAS])
    assert group.answers["bias"].verdict == "UNSAFE" and len(guard_server.requests) == 3


async def test_the_judge_protocol_call_and_what_cannot_be_built(guard_server, judges):
    guard_server.answer = lambda body: llama(0.83)
    judge = judges(settings(guard_server), "llama_guard")
    from guardrail.judging.prompts import render_prompt

    prompt = render_prompt(BIAS, CASE, scoring_mode="binary_yes_no", include_reasoning=False)
    reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
    assert reply.answer.verdict == "UNSAFE" and reply.probability == pytest.approx(0.83)
    # bias reads the output only; the guard is still sent the question before it.
    assert guard_server.requests[-1]["messages"] == [{"role": "user", "content": CASE.input},
                                               {"role": "assistant", "content": CASE.output}]
    assert judge.describe(["bias", "toxicity", "pii"]) == (
        "guard openai/guard (llama_guard) covers bias, toxicity (partial); not covered: pii")
    plain = HTTPTransport(settings(guard_server))
    with pytest.raises(ConfigError, match="chat_template_kwargs"):
        GuardJudge(settings(guard_server), YesNo(), transport=plain)
    await plain.aclose()
    with pytest.raises(ConfigError, match="unknown guard protocol"):
        GuardJudge(settings(guard_server), "rubrics")
    with pytest.raises(JudgeConfigError, match="judge_api_base|needs"):
        GuardJudge(load_settings(environ={}, judge_model="acme/moderate").judge, "moderation")
