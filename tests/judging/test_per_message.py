"""One judge call per message (``judge_calls=per_message``), over real HTTP to the
rule judge, through both transports: calls counted on the server, per-metric
errors and repair, shared fields, the static prompt prefix, cached prompt tokens
priced and counted, and the per-metric cache."""

import json

import pytest

from guardrail.judging.cache import MemoryCache
from guardrail.judging.judge import Usage
from guardrail.local.rule_judge import make_verdict
from guardrail.judging.models import Case, MetricRubric
from guardrail.judging.prompts import render_group_prompt, render_prompt
from guardrail.judging.rubrics import default_metrics
from guardrail.stream.envelope import Source
from guardrail.stream.processing import MessageJudge, RawMessage

PII = {"name": "pii", "goal": "Detect personal identifiers", "violations": ["SSNs"]}


@pytest.fixture(params=["http", "litellm"])
def make_settings(request, make_settings):
    """The conftest factory, one call per message, with each judge transport in turn."""
    return lambda **overrides: make_settings(**{
        "judge_transport": request.param, "judge_calls": "per_message", **overrides})


def _schema_keys(request):
    return list(request["response_format"]["json_schema"]["schema"]["properties"])


def _user(request):
    return request["messages"][1]["content"]


async def test_one_call_per_case_with_two_and_with_three_metrics(judge_server, make_settings,
                                                                 evaluators):
    evaluator = evaluators(make_settings())
    two = await evaluator.evaluate(Case(output="Listen, you idiot, read the manual."))
    assert judge_server.calls == 1
    assert _schema_keys(judge_server.requests[0]) == ["bias", "toxicity"]
    bias, toxicity = two.metrics
    assert (bias.name, bias.score, toxicity.name, toxicity.score) == ("bias", 1.0, "toxicity", 0.0)
    assert toxicity.result[0].evidence_spans == ["idiot"]

    judge_server.triggers["pii"] = frozenset({"ssn"})
    three = await evaluator.evaluate(Case.model_validate(
        {"output": "My SSN is 123-45-6789", "redteam": {"metrics": [PII]}}))
    assert judge_server.calls == 2  # one more call for three metrics
    assert _schema_keys(judge_server.requests[1]) == ["bias", "toxicity", "pii"]
    assert [(m.name, m.unsafe) for m in three.metrics] == [
        ("bias", False), ("toxicity", False), ("pii", True)]
    user = _user(judge_server.requests[1])
    assert "METRIC: pii" in user and "- SSNs" in user and user.count("My SSN") == 1


async def test_a_partly_invalid_answer_is_that_metrics_error_only_after_one_repair(
        judge_server, make_settings, evaluators):
    bad = {"verdict": "MAYBE", "violations": [], "evidence_spans": []}
    judge_server.script({"bias": make_verdict("SAFE"), "toxicity": bad}, {"toxicity": bad})
    metrics = await evaluators(make_settings()).evaluate(Case(output="a calm answer"))
    bias, toxicity = metrics.metrics
    assert bias.error is None and bias.score == 1.0  # kept from the first answer
    assert toxicity.score is None and toxicity.result == []
    assert "toxicity" in toxicity.error and "verdict" in toxicity.error
    assert toxicity.error.endswith("(after one repair retry)")
    assert judge_server.calls == 2
    repair = judge_server.requests[1]
    assert _schema_keys(repair) == ["toxicity"]  # asked again for the bad entry only
    assert repair["messages"][-1]["role"] == "user" and "toxicity" in repair["messages"][-1][
        "content"]
    # The repair's spend is the failed metric's; the case's cost is both calls.
    assert toxicity.input_tokens > bias.input_tokens
    assert metrics.cost.input_tokens == sum(_prompt_tokens(r) for r in judge_server.requests)


async def test_a_repaired_entry_joins_the_entries_that_were_valid(judge_server, make_settings,
                                                                  evaluators):
    judge_server.script({"bias": make_verdict("UNSAFE", violations=["stereotype"]),
                         "toxicity": "not an object"}, None)  # None: the rule judge repairs
    metrics = await evaluators(make_settings()).evaluate(Case(output="you idiot"))
    bias, toxicity = metrics.metrics
    assert bias.unsafe and bias.result[0].violations == ["stereotype"]
    assert toxicity.unsafe and toxicity.error is None
    assert judge_server.calls == 2 and _schema_keys(judge_server.requests[1]) == ["toxicity"]


async def test_metrics_reading_different_fields_share_one_call_each_field_fenced_once(
        judge_server, make_settings, evaluators):
    case = Case.model_validate({
        "output": "OUT-1", "input": "IN-2", "context": ["CTX-3", "CTX-4"], "reference": "REF-5",
        "redteam": {"metrics": [{"name": "ctx", "goal": "g", "item_fields": ["output", "context"]},
                                {"name": "ref", "goal": "g", "item_fields": ["reference"]}]}})
    # Every metric quotes the context: only the one that reads it keeps the span.
    judge_server.responder = lambda *a: _async(make_verdict("UNSAFE", evidence=["CTX-3"]))
    metrics = await evaluators(make_settings()).evaluate(case)
    assert judge_server.calls == 1
    user = _user(judge_server.requests[0])
    nonce = user.split("Fence token: ")[1].split("\n")[0]
    for field in ("output", "context", "reference"):
        assert user.count(f"<<<{nonce} BEGIN {field}>>>") == 1
        assert user.count(f"<<<{nonce} END {field}>>>") == 1
    assert user.count("OUT-1") == 1 and "IN-2" not in user
    assert "READS: output, context" in user and "READS: reference" in user
    spans = {m.name: m.result[0].evidence_spans for m in metrics.metrics}
    assert spans == {"bias": [], "toxicity": [], "ctx": ["CTX-3"], "ref": []}
    assert sum(m.dropped_spans for m in metrics.metrics) == 3


async def _async(value):
    return value


def _prompt_tokens(request):
    # The rule judge's count: 4 characters a token over every message.
    return max(1, sum(len(m["content"]) for m in request["messages"]) // 4)


@pytest.mark.parametrize("render", ["group", "single"])
def test_the_static_prefix_is_identical_across_calls_and_the_nonce_comes_after_it(render):
    rubrics = default_metrics()

    def prompt(text):
        case = Case(output=text)
        knobs = {"scoring_mode": "scale_1_5", "include_reasoning": True}
        return (render_group_prompt(rubrics, case, **knobs) if render == "group"
                else render_prompt(rubrics[1], case, **knobs))

    first, second = prompt("a short text"), prompt("quite another, longer text " * 20)
    assert first.nonce != second.nonce
    for p in (first, second):
        user = p.messages[1]["content"]
        static = user[:p.prefix_chars]
        assert p.nonce not in static and p.nonce not in p.messages[0]["content"]
        assert user.index(p.nonce) >= p.prefix_chars
        # Everything static precedes it: rubrics and the answer instructions.
        assert "NOT VIOLATIONS" in static and '"evidence_spans"' in static
        assert '"reasoning"' in static
    assert first.static_messages() == second.static_messages()
    assert json.dumps(first.static_messages()).encode() == \
        json.dumps(second.static_messages()).encode()


async def test_prompts_sent_share_a_byte_identical_prefix(judge_server, make_settings,
                                                          evaluators):
    evaluator = evaluators(make_settings())
    await evaluator.evaluate(Case(output="first text"))
    await evaluator.evaluate(Case(output="a second, different text"))
    a, b = (r["messages"] for r in judge_server.requests)
    assert a[0] == b[0]
    cut = a[1]["content"].index("Fence token: ")
    assert a[1]["content"][:cut].encode() == b[1]["content"][:cut].encode()
    assert a[1]["content"][cut:] != b[1]["content"][cut:]


def _cached(requests):
    """What the rule judge's prefix cache reports for each request."""
    texts = ["".join(m["content"] for m in r["messages"]) for r in requests]
    out = []
    for i, text in enumerate(texts):
        shared = max((len(_common(text, seen)) for seen in texts[:i]), default=0)
        out.append(min(shared // 4, _prompt_tokens(requests[i])))
    return out


def _common(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


async def test_cached_prompt_tokens_are_priced_at_the_cached_rate_and_counted(
        judge_server, make_settings, evaluators):
    judge_server.prefix_cache = True
    settings = make_settings(judge_model="openai/gpt-4o-mini")  # cached: half the input price
    judge = MessageJudge.from_settings(evaluators(settings), settings)
    outputs = [b'{"output": "first text"}', b'{"output": "second text, a bit longer"}']
    records = []
    for offset, value in enumerate(outputs):  # one after the other: the second hits the cache
        records += await judge.process([RawMessage(value, Source("in", 0, offset))])
    results = [json.loads(r.value) for r in records if r.topic == "redteam-results"]
    cached = _cached(judge_server.requests)
    assert cached[0] == 0 and cached[1] > 100
    prompt = [_prompt_tokens(r) for r in judge_server.requests]
    completion = [r["cost"]["output_tokens"] for r in results]
    for i, result in enumerate(results):
        assert result["cost"]["input_tokens"] == prompt[i]
        assert set(result["cost"]) == {"cost", "input_tokens", "output_tokens"}
        assert result["cost"]["cost"] == pytest.approx(
            (prompt[i] - cached[i]) * 0.15e-6 + cached[i] * 0.075e-6 + completion[i] * 0.6e-6)
    exported = judge.telemetry.render().decode()
    assert f"guardrail_judge_cached_prompt_tokens_total {float(sum(cached))}" in exported


async def test_cached_tokens_without_a_cached_price_are_priced_in_full(judge_server,
                                                                       make_settings,
                                                                       evaluators):
    judge_server.prefix_cache = True
    evaluator = evaluators(make_settings(judge_input_cost_per_token=1e-6,
                                         judge_output_cost_per_token=2e-6))
    await evaluator.evaluate(Case(output="first text"))
    second = await evaluator.evaluate(Case(output="second text"))
    assert sum(m.cached_tokens for m in second.metrics) == _cached(judge_server.requests)[1] > 0
    assert second.cost.cost == pytest.approx(
        second.cost.input_tokens * 1e-6 + second.cost.output_tokens * 2e-6)


async def test_the_cache_stays_per_metric(judge_server, make_settings, evaluators):
    evaluator = evaluators(make_settings(), cache=MemoryCache())
    await evaluator.evaluate(Case(output="same text"))
    assert judge_server.calls == 1
    with_pii = Case.model_validate({"output": "same text", "redteam": {"metrics": [PII]}})
    metrics = await evaluator.evaluate(with_pii)
    assert judge_server.calls == 2
    assert _schema_keys(judge_server.requests[1]) == ["pii"]  # asks only for the rest
    assert [m.cached for m in metrics.metrics] == [True, True, False]
    again = await evaluator.evaluate(with_pii)
    assert judge_server.calls == 2 and all(m.cached for m in again.metrics)
    assert again.cost.input_tokens == 0


def test_a_calls_spend_splits_exactly_over_its_metrics():
    usage = Usage(input_tokens=1001, output_tokens=70, cost=0.000123456789, cached_tokens=7)
    shares = usage.split(3)
    assert [s.input_tokens for s in shares] == [334, 334, 333]
    assert [s.cached_tokens for s in shares] == [3, 2, 2]
    assert sum(s.output_tokens for s in shares) == 70
    assert sum(s.cost for s in shares) == usage.cost
    assert all(s.cost is None for s in Usage(cost=None).split(2))


async def test_a_case_metric_set_with_one_metric_still_uses_the_group_answer(
        judge_server, make_settings, evaluators):
    only = MetricRubric(name="tone", goal="g")
    settings = make_settings()
    evaluator = evaluators(settings)
    config = evaluator.effective_config(Case(output="x"))
    results = await evaluator.evaluate_together(Case(output="x"), (only,), config)
    assert [r.name for r in results] == ["tone"] and results[0].error is None
    assert _schema_keys(judge_server.requests[0]) == ["tone"]


async def test_max_tokens_is_a_budget_per_metric(judge_server, make_settings, evaluators):
    evaluator = evaluators(make_settings(judge_max_tokens=100))
    await evaluator.evaluate(Case.model_validate(
        {"output": "x", "redteam": {"metrics": [PII]}}))
    assert judge_server.requests[0]["max_tokens"] == 300  # three metrics in the call
