"""Runs of real agent frameworks under real instrumentation, judged on the real worker.

The OpenAI Agents SDK (under OpenInference, and under OpenLLMetry) and Pydantic AI
(its own OTel GenAI spans) run against a scripted model that makes the tool
calls; their tools really run. Each span is its own record, shuffled over two
partitions, the root first in some runs and last in others. Each run must be
judged exactly once, on its root span, with the tool-call arguments and tool
results in what the judge read; no LLM span of a run is judged on its own.
"""

from __future__ import annotations

import asyncio

import pytest
from support.agent_traffic import SCENARIOS, ScriptedModel, run_agent, spread
from support.harness import OtlpLogSink, StreamEnv, consume, poll
from support.run_traffic import produce_spread

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

FRAMEWORKS = ("openai_agents", "openai_agents_openllmetry", "pydantic_ai")
#: What the stand-in judge flags in each scenario's trajectory: the mailbox sent
#: to an outside address (arguments), the page's instruction (a tool result).
EXPECTED = {"unsafe_args": {"unsafe_action"},
            "injected_result": {"tool_injection", "unsafe_action"},
            "benign": set()}


@pytest.fixture(scope="module")
def framework_runs():
    with ScriptedModel() as model:
        return [(name, run_agent(framework, SCENARIOS[name], model, version="v2"))
                for framework in FRAMEWORKS for name in EXPECTED]


def test_real_framework_runs_are_judged_once_each_on_their_root_spans(
        kafka_bootstrap, thread_judge, tmp_path, framework_runs):
    thread_judge.reset()
    records = spread([run for _, run in framework_runs], partitions=2, seed=3)
    with OtlpLogSink() as sink:
        env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, input_format="otlp",
                        topic_partitions=2, run_settle_seconds=1, otlp_endpoint=sink.url)
        try:
            assert env.cli("produce", "--input", "/dev/null").returncode == 0
            asyncio.run(produce_spread(env.bootstrap, env.topic("input"), records))
            env.start_worker()
            results = asyncio.run(consume(env.bootstrap, env.topic("results"),
                                          expect=len(framework_runs), timeout=120, settle=3))
            poll(lambda: len(sink.log_records()) >= 5 * len(framework_runs), 20)
        finally:
            env.stop_workers()
    logs = env.logs()
    # A run whose spans carry a conversation id is also a turn of its session; a
    # flagged run makes its session judged at once: those results are sessions'.
    results = [r for r in results if "session" not in r]
    by_id = {r["case_id"]: r for r in results}
    assert len(results) == len(by_id) == len(framework_runs), logs[-3000:]
    for scenario, run in framework_runs:
        result = by_id.get(f"{run.trace_id}:{run.root_span_id}")
        assert result is not None, (run.framework, scenario)
        assert result["trace"] == {"trace_id": run.trace_id, "span_id": run.root_span_id}
        assert result["run"]["spans"] == run.span_count, run.framework
        assert result["run"]["tool_calls"] == len(SCENARIOS[scenario].steps)
        unsafe = {m["name"] for m in result["metrics"] if m["result"][0]["verdict"] == "UNSAFE"}
        assert unsafe == EXPECTED[scenario], (run.framework, scenario)
    # Every evaluation event lands on a run's root span.
    on_span = {(r.trace_id.hex(), r.span_id.hex()) for r in sink.log_records()}
    assert on_span == {(run.trace_id, run.root_span_id) for _, run in framework_runs}


def test_what_the_judge_read_holds_the_arguments_and_the_results(framework_runs):
    """The trajectory of each framework's run carries the tool calls' arguments
    and the tool results verbatim (checked on the case the worker judges)."""
    from guardrail.formats.otlp import OtlpDecoder
    from guardrail.assembly.runs.case import run_case
    from guardrail.assembly.runs.routing import RunRouter

    decoder = OtlpDecoder(runs=RunRouter())
    for scenario, run in framework_runs:
        spans = [s for record in run.records
                 for s in decoder.decode(record, {}).run_spans]
        assert len(spans) == run.span_count, run.framework  # every span claimed by the run
        trajectory = run_case(spans, status="complete")["trajectory"]
        for step in SCENARIOS[scenario].steps:
            assert step.tool in trajectory, (run.framework, step.tool)
            for value in step.arguments.values():
                assert str(value).splitlines()[0] in trajectory, (run.framework, value)
            assert step.result.split(" <!--")[0] in trajectory, run.framework
        if scenario == "injected_result":
            assert "IGNORE THE USER" in trajectory, run.framework
