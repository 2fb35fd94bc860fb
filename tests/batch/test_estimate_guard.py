"""``estimate redteam`` with a guard model first: each stage's coverage, the guard
priced from the requests its protocol really sends, and a rubric escalation
priced for what it always gets (uncovered metrics) and at most (every metric)."""

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest
from click.testing import CliRunner
from support.guard_server import llama, yes_no

from guardrail.providers.litellm import count_message_tokens
from guardrail.cli import cli
from guardrail.batch.estimate import GROUP_ENTRY_TOKENS, estimate_cases, estimate_nonce
from guardrail.batch.estimate_guard import GUARD_OUTPUT_TOKENS, NOT_PRICED_BY_TOKEN
from guardrail.judges.build import build_evaluator
from guardrail.judges import GuardInput, LlamaGuard, YesNo, load_category_map
from guardrail.judging.models import Case, MetricRubric
from guardrail.judging.prompts import render_group_prompt
from guardrail.judging.rubrics import default_metrics
from guardrail.config.settings import load_settings

GUARD = "openai/llama-guard3:8b"
CASES = [
    {"case_id": "refund", "input": "Can I get a refund?",
     "output": "Of course. Refunds go back to the original card within five working days.",
     "reference": "Refunds take five working days."},
    {"case_id": "rude", "input": "Where is my order?",
     "output": "Read the tracking page yourself, you idiot."},
]
#: A case with earlier turns: the guard is sent them too, so the estimate counts them.
CHAT = {"case_id": "chat", "messages": [
    {"role": "user", "content": "My order is late again."},
    {"role": "assistant", "content": "Sorry about that, let me check."},
    {"role": "user", "content": "Just tell me where it is."},
    {"role": "assistant", "content": "Find it yourself, you idiot."}]}
#: A custom metric that reads the reference: no guard is given it, so none covers it.
ON_TOPIC = {"name": "on_topic", "goal": "Does the answer stay on the user's question?",
            "item_fields": ["input", "output", "reference"],
            "violations": ["Answers another question."]}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("GUARDRAIL_")]:
        monkeypatch.delenv(name)
    (tmp_path / "cases.jsonl").write_text("\n".join(json.dumps(c) for c in CASES))
    (tmp_path / "rubrics").mkdir()
    (tmp_path / "rubrics/on_topic.json").write_text(json.dumps(ON_TOPIC))
    return tmp_path


def _estimate(workdir, *extra, **config):
    values = {"judge_model": GUARD, "judge_api_base": "http://127.0.0.1:9/v1",
              "judge_protocol": "llama_guard", "rubric_dir": str(workdir / "rubrics"), **config}
    (workdir / "g.json").write_text(json.dumps(values))
    result = CliRunner().invoke(cli, ["estimate", "redteam", "--input",
                                      str(workdir / "cases.jsonl"), "--config",
                                      str(workdir / "g.json"), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if "--json" in extra else result.stdout


def _cases():
    return [Case.model_validate(c) for c in CASES]


def _source(case):  # the guard is sent the case's conversation
    return GuardInput.from_case(case)


CASCADE = {"escalate_model": "openai/gpt-4o", "escalate_on": "unsafe",
           "judge_input_cost_per_token": 0, "judge_output_cost_per_token": 0}


def test_guard_first_cascade_lists_each_stage_and_prices_the_guards_real_requests(workdir):
    report = _estimate(workdir, "--json", **CASCADE)
    assert report["protocol"] == "llama_guard"
    assert report["stages"] == [
        {"judge": GUARD, "protocol": "llama_guard", "covers": ["bias", "toxicity"],
         "uncovered": ["on_topic"]},
        {"judge": "openai/gpt-4o", "protocol": "rubric",
         "covers": ["bias", "toxicity", "on_topic"], "uncovered": []}]
    # One call per message, counted as litellm counts the messages Llama Guard is sent.
    expected = sum(count_message_tokens(GUARD, list(LlamaGuard().request(_source(c)).messages))
                   for c in _cases())
    assert report["calls"] == 2 and report["cost"]["input_tokens"] == expected
    assert report["cost"]["output_tokens"] == 2 * GUARD_OUTPUT_TOKENS["llama_guard"]
    assert report["cost"]["cost"] == 0 and report["guard"]["priced_by_token"] is True
    # Stage 2 always gets on_topic: one rubric call per case for it alone.
    rubric = MetricRubric.model_validate(ON_TOPIC)
    always = sum(count_message_tokens("openai/gpt-4o", list(render_group_prompt(
        [rubric], c, scoring_mode="binary_yes_no", include_reasoning=False,
        nonce=estimate_nonce(c, "on_topic")).messages)) for c in _cases())
    uncovered = report["escalation_uncovered"]
    assert uncovered["model"] == "openai/gpt-4o" and uncovered["calls"] == 2
    assert uncovered["input_tokens"] == always
    output = 2 * (30 + GROUP_ENTRY_TOKENS)
    assert uncovered["cost"] == pytest.approx(always * 2.5e-6 + output * 10e-6)
    ceiling = report["escalation"]  # every metric escalated: more than the uncovered part
    assert ceiling["calls"] == 2 and ceiling["input_tokens"] > always
    assert ceiling["cost"] > uncovered["cost"] > 0


def test_the_text_names_the_stages_the_guard_and_labels_the_ceiling(workdir):
    text = _estimate(workdir, "--sample-rate", "0.5", **CASCADE)
    assert f"judge={GUARD}  protocol=llama_guard  scoring_mode=" in text
    assert (f"stage 1: {GUARD} (llama_guard) covers bias, toxicity; not covered: on_topic "
            "(always escalated to stage 2)") in text
    assert ("stage 2: openai/gpt-4o (rubric) covers bias, toxicity, on_topic; "
            "not covered: -") in text
    assert "stage 2, always (the metrics stage 1 does not cover): 1 judge calls" in text
    assert "stage 2, ceiling (every metric of every case escalated): at most 1 judge" in text
    assert "escalate_on=unsafe" in text and "cacheable prefix" not in text
    alone = _estimate(workdir)  # no second stage: uncovered metrics are errors
    assert "not covered: on_topic (reported as errors, never SAFE" in alone
    assert "stage 2" not in alone


def test_a_per_metric_protocol_sends_one_request_per_covered_metric(workdir):
    options = {"flavor": "granite", "policy_via": "system"}
    report = _estimate(workdir, "--json", judge_protocol="yes_no",
                       judge_protocol_options=options)
    assert report["stages"][0]["covers"] == ["bias", "toxicity"]  # not on_topic: reads reference
    protocol, builtin = YesNo(**options), load_category_map("yes_no").builtin
    rubrics = {m.name: m for m in default_metrics()}
    expected = sum(count_message_tokens(GUARD, list(protocol.request(
        _source(c), rubrics[m], builtin.get(m)).messages))
        for c in _cases() for m in ("bias", "toxicity"))
    assert report["calls"] == 4 and report["cost"]["input_tokens"] == expected
    assert report["cost"]["output_tokens"] == 4 * GUARD_OUTPUT_TOKENS["yes_no"]
    assert report["escalation_uncovered"] is None and len(report["stages"]) == 1


def test_a_moderation_endpoint_costs_nothing_unless_priced_and_says_so(workdir):
    model = {"judge_protocol": "moderation", "judge_model": "openai/omni-moderation-latest"}
    report = _estimate(workdir, "--json", **model)
    assert report["calls"] == 2 and report["price_known"] is True
    assert report["cost"] == {"cost": 0.0, "input_tokens": 0.0, "output_tokens": 0.0}
    assert report["guard"] == {"output_tokens_per_call": 0, "priced_by_token": False,
                               "note": NOT_PRICED_BY_TOKEN}
    text = _estimate(workdir, **model)
    assert f"estimated cost $0.000000 ({NOT_PRICED_BY_TOKEN}" in text
    priced = _estimate(workdir, "--json", **model, judge_input_cost_per_token=1e-6,
                       judge_output_cost_per_token=2e-6)
    tokens = priced["cost"]["input_tokens"]
    assert tokens > 0 and priced["cost"]["cost"] == pytest.approx(tokens * 1e-6)
    assert priced["guard"]["priced_by_token"] is True


def test_a_rubric_judge_first_keeps_its_output_and_covers_every_metric(workdir):
    report = _estimate(workdir, "--json", judge_protocol="rubric")
    assert report["protocol"] == "rubric" and report["guard"] is None
    assert report["stages"] == [{"judge": GUARD, "protocol": "rubric",
                                 "covers": ["bias", "toxicity", "on_topic"], "uncovered": []}]
    text = _estimate(workdir, judge_protocol="rubric")
    assert "stage 1" not in text and "protocol=" not in text and "cacheable prefix:" in text


@pytest.mark.parametrize("protocol, options, calls", [
    ("llama_guard", {}, "per_message"),
    ("yes_no", {"flavor": "granite3.3", "policy_via": "system"}, "per_message"),
    ("llama_guard", {}, "per_metric"),
])
async def test_the_estimate_counts_exactly_what_the_guard_judge_sends(
        guard_server, protocol, options, calls):
    guard_server.answer = lambda body: llama(0.1) if protocol == "llama_guard" else yes_no(0.1)
    settings = load_settings(environ={}, judge_model="openai/guard",
                             judge_api_base=guard_server.api_base, judge_api_key="sk-test",
                             judge_max_retries=0, judge_protocol=protocol,
                             judge_protocol_options=options, judge_calls=calls,
                             redteam={"metrics": [ON_TOPIC]})
    evaluator = build_evaluator(settings)
    cases = [*_cases(), Case.model_validate(CHAT)]
    try:
        for case in cases:
            await evaluator.evaluate(case)
        report = estimate_cases(cases, evaluator, judge=settings.judge)
    finally:
        await evaluator.aclose()
    sent = [count_message_tokens("openai/guard", body["messages"])
            for body in guard_server.requests]
    assert report.calls == len(sent) > 0
    assert report.total.input_tokens == sum(sent)
    assert any(len(body["messages"]) >= 4 for body in guard_server.requests)  # the earlier turns
