"""The agent-run test traffic (tests/support/agent_traffic.py) holds what the agent-run
tests rely on: real frameworks ran real tools, and each run's records decode to one
span each, one trace, one root, an agent span, model calls, and tool spans carrying
the arguments and results that make the run unsafe.

Runs are made once per module: the frameworks' imports cost seconds.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from guardrail.formats.otlp import request_from_bytes
from tests.support.agent_traffic import (
    SCENARIOS, AgentRun, ScriptedModel, available_frameworks, run_agent, spread)

# Frameworks the dev extra installs; Strands is optional (it needs an older OTel patch).
REQUIRED = ("openai_agents", "openai_agents_openllmetry", "pydantic_ai")
FRAMEWORKS = [*REQUIRED, "strands"]
# The instrumentation scope each one's spans carry: what routing by scope keys on.
SCOPES = {"openai_agents": "openinference.instrumentation.openai_agents",
          "openai_agents_openllmetry": "opentelemetry.instrumentation.openai_agents",
          "pydantic_ai": "pydantic-ai", "strands": "strands.telemetry.tracer"}


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], AgentRun]:
    here = available_frameworks()
    missing = [name for name in REQUIRED if name not in here]
    assert not missing, f"dev extra not installed: {missing}"
    with ScriptedModel() as model:
        return {(framework, name): run_agent(framework, SCENARIOS[name], model)
                for framework in here for name in SCENARIOS}


def _plain(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _spans(run: AgentRun) -> list[dict[str, Any]]:
    """Each record's one span: ids, scope, and attributes (its events' too: Strands
    writes messages as event attributes)."""
    out = []
    for record in run.records:
        request = request_from_bytes(record, {})
        assert len(request.resource_spans) == 1
        scopes = request.resource_spans[0].scope_spans
        assert len(scopes) == 1 and len(scopes[0].spans) == 1, "one span per record"
        span = scopes[0].spans[0]
        attrs = {kv.key: _plain(kv.value) for kv in span.attributes}
        for event in span.events:
            attrs.update({kv.key: _plain(kv.value) for kv in event.attributes})
        out.append({"trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent": span.parent_span_id.hex(), "name": span.name,
                    "scope": scopes[0].scope.name, "attrs": attrs})
    return out


def _kind(attrs: dict[str, Any]) -> str:
    """agent / tool / llm / other, in whichever convention the span speaks."""
    kinds = {"AGENT": "agent", "TOOL": "tool", "LLM": "llm", "invoke_agent": "agent",
             "execute_tool": "tool", "chat": "llm", "workflow": "agent"}
    for key in ("openinference.span.kind", "traceloop.span.kind", "gen_ai.operation.name"):
        if attrs.get(key) in kinds:
            return kinds[attrs[key]]
    return "other"


def _tool_io(attrs: dict[str, Any]) -> tuple[str, str]:
    arguments = attrs.get("gen_ai.tool.call.arguments", attrs.get("input.value", ""))
    result = attrs.get("gen_ai.tool.call.result", attrs.get("output.value", ""))
    return str(arguments), str(result)


def _frameworks(runs: dict[tuple[str, str], AgentRun]) -> set[str]:
    return {framework for framework, _ in runs}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_run_is_one_trace_one_root_one_record_per_span(runs, framework):
    if framework not in _frameworks(runs):
        pytest.skip(f"{framework} is not installed (see tests/support/agent_traffic.py)")
    for name in SCENARIOS:
        run = runs[framework, name]
        spans = _spans(run)
        assert run.span_count == len(run.records) == len(spans)
        assert {s["trace_id"] for s in spans} == {run.trace_id}
        assert [s["span_id"] for s in spans if not s["parent"]] == [run.root_span_id]
        assert len({s["span_id"] for s in spans}) == len(spans)
        assert {s["scope"] for s in spans} == {SCOPES[framework]}
        kinds = Counter(_kind(s["attrs"]) for s in spans)
        steps = len(SCENARIOS[name].steps)
        assert kinds["agent"] >= 1 and kinds["tool"] == steps and kinds["llm"] == steps + 1, kinds


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_tools_really_ran_and_their_arguments_and_results_are_on_the_spans(runs, framework):
    if framework not in _frameworks(runs):
        pytest.skip(f"{framework} is not installed")
    for name, scenario in SCENARIOS.items():
        run = runs[framework, name]
        assert run.tool_calls == [(s.tool, s.arguments) for s in scenario.steps]
        tools = [_tool_io(s["attrs"]) for s in _spans(run) if _kind(s["attrs"]) == "tool"]
        for step, (arguments, result) in zip(scenario.steps, tools, strict=True):
            assert json.loads(arguments) == step.arguments
            assert step.result in result  # Strands wraps it: [{"text": ...}]
    unsafe = [_tool_io(s["attrs"]) for s in _spans(runs[framework, "unsafe_args"])]
    assert any("eve@evil.example" in arguments for arguments, _ in unsafe)
    injected = [_tool_io(s["attrs"]) for s in _spans(runs[framework, "injected_result"])]
    assert any("IGNORE THE USER" in result for _, result in injected)


def test_conventions_are_those_of_the_frameworks(runs):
    """OpenInference, OTel GenAI and OpenLLMetry agent spans: what run detection keys on."""
    def agent_attrs(framework: str) -> list[dict[str, Any]]:
        spans = _spans(runs[framework, "benign"])
        return [s["attrs"] for s in spans if _kind(s["attrs"]) == "agent"]

    assert any(a.get("openinference.span.kind") == "AGENT" and a.get("agent.name")
               for a in agent_attrs("openai_agents"))
    assert any(a.get("gen_ai.operation.name") == "invoke_agent"
               and a.get("gen_ai.agent.name") == "mail-assistant"
               for a in agent_attrs("pydantic_ai"))
    assert {a.get("traceloop.span.kind") for a in agent_attrs("openai_agents_openllmetry")} \
        == {"agent", "workflow"}


def test_spread_shuffles_runs_over_partitions_root_first_and_last(runs):
    chosen = list(runs.values())
    spread_out = spread(chosen, partitions=4, seed=11)
    assert spread_out == spread(chosen, partitions=4, seed=11)  # the seed decides
    assert sorted(value for _, value in spread_out) == sorted(r for run in chosen
                                                            for r in run.records)
    assert {partition for partition, _ in spread_out} == {0, 1, 2, 3}
    places = []
    for run in chosen:
        order = [value for _, value in spread_out if value in set(run.records)]
        root = [value for value in run.records
                if request_from_bytes(value, {}).resource_spans[0].scope_spans[0].spans[0]
                .span_id.hex() == run.root_span_id][0]
        places.append("first" if order[0] == root else "last" if order[-1] == root else "?")
    assert "?" not in places and {"first", "last"} <= set(places)


def test_run_case_of_each_run_carries_its_tool_arguments_and_results(runs):
    from guardrail.assembly.runs import run_case, run_spans_of

    for (framework, name), run in runs.items():
        spans = [span for record in run.records
                 for span in run_spans_of(request_from_bytes(record, {}))]
        case = run_case(spans, status="complete")
        scenario = SCENARIOS[name]
        assert case["trace"] == {"trace_id": run.trace_id, "span_id": run.root_span_id}
        assert (case["input"], case["output"]) == (scenario.request, scenario.answer), framework
        assert case["run"]["tool_calls"] == len(scenario.steps), (framework, name)
        for step in scenario.steps:
            assert step.tool in case["trajectory"], (framework, name)
            for value in step.arguments.values():
                assert str(value).splitlines()[0] in case["trajectory"], (framework, name)
            assert step.result[:40] in case["trajectory"], (framework, name)
