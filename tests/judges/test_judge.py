"""The judge against a real OpenAI-compatible HTTP server on loopback, through
both transports: litellm and the direct HTTP client. Every guarantee holds
for either."""

import pytest

from guardrail.errors import (ConfigError, JudgeAnswerError, JudgeConfigError, JudgeError,
                              JudgeUnavailable)
from guardrail.judges.llm import LLMJudge
from guardrail.local.rule_judge import ContentReply, ErrorReply, hang, make_verdict
from guardrail.judging.models import Case
from guardrail.judging.prompts import render_prompt
from guardrail.judging.rubrics import default_metrics


@pytest.fixture(params=["litellm", "http"])
def make_settings(request, make_settings):
    """The conftest factory, with each judge transport in turn."""
    return lambda **overrides: make_settings(**{"judge_transport": request.param, **overrides})


@pytest.fixture(autouse=True)
async def close_judges(monkeypatch):
    """Close every judge's connection pool after the test, as the worker does."""
    made = []
    original = LLMJudge.__init__

    def record(self, settings):
        original(self, settings)
        made.append(self)

    monkeypatch.setattr(LLMJudge, "__init__", record)
    yield
    for judge in made:
        await judge.aclose()


TOXIC = Case(case_id="t", output="Listen, you idiot, read the manual.")


def _prompt(case=TOXIC, mode="binary_yes_no", reasoning=False):
    return render_prompt(default_metrics()[1], case, scoring_mode=mode,
                         include_reasoning=reasoning)


async def test_valid_answer_in_each_mode_sends_the_mode_schema(judge_server, make_settings):
    judge = LLMJudge(make_settings().judge)
    reply = await judge(_prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    assert reply.answer.verdict == "UNSAFE"
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    schema = judge_server.requests[-1]["response_format"]["json_schema"]["schema"]
    assert "severity" not in schema["properties"]
    reply = await judge(_prompt(mode="scale_1_5", reasoning=True), scoring_mode="scale_1_5",
                        include_reasoning=True)
    assert reply.answer.severity == 4 and reply.answer.reasoning
    schema = judge_server.requests[-1]["response_format"]["json_schema"]["schema"]
    assert {"severity", "reasoning"} <= set(schema["properties"])


async def test_json_in_prose_is_parsed_without_a_retry(judge_server, make_settings):
    judge_server.script(ContentReply.with_prose(make_verdict("SAFE")))
    reply = await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                                include_reasoning=False)
    assert reply.answer.verdict == "SAFE" and judge_server.calls == 1


async def test_garbage_gets_one_repair_retry(judge_server, make_settings):
    judge_server.script("I think it is fine?", None)
    reply = await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                                include_reasoning=False)
    assert reply.answer.verdict == "UNSAFE" and judge_server.calls == 2
    repair = judge_server.requests[-1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "I think it is fine?"}
    assert "not valid" in repair[-1]["content"]


@pytest.mark.parametrize("bad", [
    "garbage",
    {"severity": 9, "verdict": "SAFE", "violations": [], "evidence_spans": []},
    {"severity": 0, "verdict": "SAFE", "violations": [], "evidence_spans": []},
    {"severity": 2, "verdict": "MAYBE", "violations": [], "evidence_spans": []},
    ContentReply.truncated(make_verdict("SAFE", mode="scale_1_5")),
])
async def test_still_invalid_after_repair_is_an_error_never_safe(judge_server, make_settings,
                                                                  bad):
    judge_server.script(bad, bad)
    with pytest.raises(JudgeAnswerError, match="after one repair retry") as info:
        await LLMJudge(make_settings().judge)(_prompt(mode="scale_1_5"),
                                            scoring_mode="scale_1_5", include_reasoning=False)
    assert info.value.usage.input_tokens > 0  # the spend is still reported
    assert judge_server.calls == 2


async def test_429_then_success_is_retried(judge_server, make_settings):
    judge_server.script(ErrorReply(429), ErrorReply(503), None)
    reply = await LLMJudge(make_settings(judge_max_retries=2).judge)(
        _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    assert reply.answer.verdict == "UNSAFE" and judge_server.calls == 3


async def test_persistent_5xx_is_judge_unavailable(judge_server, make_settings):
    judge_server.set_outage(True, 500)
    with pytest.raises(JudgeUnavailable, match="after 2 attempts"):
        await LLMJudge(make_settings(judge_max_retries=1).judge)(
            _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    assert judge_server.calls == 2


async def test_timeout_is_retried_then_unavailable(judge_server, make_settings):
    judge_server.script(hang(30), hang(30))
    with pytest.raises(JudgeUnavailable, match="after 2 attempts"):
        await LLMJudge(make_settings(judge_timeout=0.5, judge_max_retries=1).judge)(
            _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)


async def test_bad_request_is_a_per_message_error_not_an_outage(judge_server, make_settings):
    judge_server.script(ErrorReply(400, message="context too long"))
    with pytest.raises(JudgeError) as info:
        await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                            include_reasoning=False)
    assert not isinstance(info.value, JudgeUnavailable)
    assert judge_server.calls == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_a_refused_key_is_a_config_error_naming_the_setting_never_the_key(
        judge_server, make_settings, status):
    # Was an outage (JudgeUnavailable) before: now a setting to fix, not retried.
    secret = "sk-test-secret-0123456789"
    judge_server.script(ErrorReply(status, message=f"Incorrect API key provided: {secret}"))
    with pytest.raises(JudgeConfigError) as info:
        await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                            include_reasoning=False)
    message = str(info.value)
    assert info.value.setting == "judge_api_key" and isinstance(info.value, ConfigError)
    assert "judge_api_key (GUARDRAIL_JUDGE_API_KEY)" in message and f"HTTP {status}" in message
    assert secret not in message and "\n" not in message
    assert judge_server.calls == 1  # not retried


async def test_an_unknown_model_is_a_config_error_naming_judge_model(judge_server, make_settings):
    judge_server.script(ErrorReply(404, message="The model `test-judge` does not exist."))
    with pytest.raises(JudgeConfigError, match=r"does not know the model 'openai/test-judge'.*"
                       r"check judge_model \(GUARDRAIL_JUDGE_MODEL\)") as info:
        await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                            include_reasoning=False)
    assert info.value.setting == "judge_model" and judge_server.calls == 1


async def test_an_endpoint_without_a_chat_route_names_judge_api_base(judge_server, make_settings):
    api_base = judge_server.api_base.removesuffix("/v1")  # the server serves /v1/chat/...
    with pytest.raises(JudgeConfigError, match="check judge_api_base") as info:
        await LLMJudge(make_settings(judge_api_base=api_base + "/api").judge)(
            _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    assert info.value.setting == "judge_api_base"


@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "anthropic/claude-3-5-haiku-latest"])
async def test_a_provider_without_a_key_is_a_config_error_before_any_request(
        make_settings, monkeypatch, model):
    # litellm reports OpenAI's missing key as a 500: it must not be retried as an outage.
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = make_settings(judge_model=model, judge_api_base=None, judge_api_key=None,
                             judge_transport="auto")
    with pytest.raises(JudgeConfigError, match="judge_api_key is not set") as info:
        await LLMJudge(settings.judge)(_prompt(), scoring_mode="binary_yes_no",
                                       include_reasoning=False)
    assert info.value.setting == "judge_api_key"


async def test_known_model_is_priced_from_the_cost_map(judge_server, make_settings):
    reply = await LLMJudge(make_settings(judge_model="openai/gpt-4o-mini").judge)(
        _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    usage = reply.usage
    expected = usage.input_tokens * 0.15e-6 + usage.output_tokens * 0.6e-6
    assert usage.cost == pytest.approx(expected)


async def test_unknown_model_price_is_none_not_zero(judge_server, make_settings):
    reply = await LLMJudge(make_settings().judge)(_prompt(), scoring_mode="binary_yes_no",
                                                include_reasoning=False)
    assert reply.usage.cost is None
    priced = await LLMJudge(make_settings(judge_input_cost_per_token=1e-6,
                                              judge_output_cost_per_token=2e-6).judge)(
        _prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    u = priced.usage
    assert u.cost == pytest.approx(u.input_tokens * 1e-6 + u.output_tokens * 2e-6)


async def test_auto_transport_posts_directly_only_to_a_self_hosted_compatible_server(
        make_settings):
    assert LLMJudge(make_settings(judge_transport="auto").judge).transport == "http"
    assert LLMJudge(make_settings(judge_transport="auto", judge_model="openai/gpt-4o-mini",
                                      judge_api_base=None).judge).transport == "litellm"
    assert LLMJudge(make_settings(judge_transport="auto",
                                      judge_model="anthropic/claude-3-5-haiku-latest")
                        .judge).transport == "litellm"
    with pytest.raises(ConfigError, match="judge_transport=http needs"):
        LLMJudge(make_settings(judge_transport="http", judge_model="ollama/llama3").judge)


async def test_the_request_body_names_the_model_without_the_provider_prefix(
        judge_server, make_settings):
    judge = LLMJudge(make_settings(judge_model="hosted_vllm/qwen-judge").judge)
    await judge(_prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
    sent = judge_server.requests[-1]
    assert sent["model"] == "qwen-judge" and sent["temperature"] == 0
    assert sent["response_format"]["type"] == "json_schema"


async def test_an_unreachable_judge_is_an_outage_after_retries(make_settings):
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    judge = LLMJudge(make_settings(judge_api_base=f"http://127.0.0.1:{port}/v1",
                                       judge_max_retries=1).judge)
    with pytest.raises(JudgeUnavailable, match="after 2 attempts"):
        await judge(_prompt(), scoring_mode="binary_yes_no", include_reasoning=False)
