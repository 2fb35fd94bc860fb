"""Spans the tracing clients teams already run write, read as they come: Langfuse
(Python SDK 5, its OpenAI drop-in, ``propagate_attributes``), MLflow Tracing
(``mlflow.openai.autolog``), the Vercel AI SDK (Node, OpenTelemetry Node SDK) and
Google ADK (legacy ``call_llm`` spans, model through LiteLLM). Each app runs for real
against the scripted model (support/client_traffic.py); its exporter's requests are
the records. Every chat turn is judged once, every agent run assembled with its tool
call, every conversation gathered by its id, and ``guardrail inputs check`` names
the convention it read."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.agent_traffic import SCENARIOS, ScriptedModel
from support.client_traffic import CLIENTS, client_traffic, missing
from support.otel_traffic import otlp_json_of
from support.session_traffic import SMALL_TALK, SPLIT_PHISHING

from guardrail.assembly.runs.case import run_case
from guardrail.assembly.runs.routing import RunRouter
from guardrail.formats.otlp import OtlpDecoder

SCRIPTS = {"attack": SPLIT_PHISHING, "chat": SMALL_TALK}
RUN = SCENARIOS["unsafe_args"]
#: ADK writes every span under its agent scope: each turn is an agent run.
TURNS_AS_RUNS = {"google_adk"}


@pytest.fixture(scope="module", params=CLIENTS)
def traffic(request):
    reason = missing(request.param)
    if reason is not None:
        pytest.skip(reason)
    with ScriptedModel() as model:
        return client_traffic(request.param, model, SCRIPTS, runs={"run-1": RUN})


def _decoded(traffic, runs: bool):
    decoder = OtlpDecoder(runs=RunRouter() if runs else None)
    return [decoder.decode(record, {}) for record in traffic.records]


def _runs(decoded) -> dict[str, dict]:
    spans: dict[str, list] = {}
    for record in decoded:
        for span in record.run_spans:
            spans.setdefault(span.trace_id, []).append(span)
    cases = [run_case(s, status="complete") for s in spans.values()]
    return {c["trace"]["trace_id"]: c for c in cases}


def test_every_chat_turn_is_judged_once_with_its_conversation(traffic):
    decoded = _decoded(traffic, runs=True)
    cases = [c for record in decoded for c in record.cases]
    runs = list(_runs(decoded).values())
    turns = runs if traffic.client in TURNS_AS_RUNS else cases
    got = sorted((t["conversation_id"], t["output"]) for t in turns
                 if t.get("conversation_id") != "run-1")
    assert got == sorted((conversation, answer) for conversation, _, answer in traffic.turns)
    if traffic.client not in TURNS_AS_RUNS:
        asked = {answer: user for _, user, answer in traffic.turns}  # requests may overtake
        for case in (c for c in cases if c["output"] in asked):
            assert case["messages"][-1] == {"role": "user", "content": asked[case["output"]]}
            assert case["metadata"]["model"].startswith("scripted-")
            assert case["metadata"]["model_version"] == "v1"
    assert all(not any(k in ("no_content", "unreadable_content") for k in r.skipped)
               for r in decoded)


def test_the_agent_run_is_assembled_with_its_tool_call_and_conversation(traffic):
    runs = _runs(_decoded(traffic, runs=True))
    run = next(c for c in runs.values() if c.get("conversation_id") == "run-1")
    assert run["input"] == RUN.request and run["output"] == RUN.answer
    assert run["run"]["tool_calls"] == 1, run["trajectory"]
    assert "tool call send_email(" in run["trajectory"]
    assert "eve@evil.example" in run["trajectory"]
    assert RUN.steps[0].result in run["trajectory"]


def test_without_run_assembly_each_model_call_is_judged_once(traffic):
    """Spans of other kinds (Langfuse agent and tool observations, MLflow's chain
    and tool spans, the Vercel AI SDK's generateText around its model calls) are no
    cases, and go nowhere near the DLQ."""
    decoded = _decoded(traffic, runs=False)
    cases = [c for record in decoded for c in record.cases]
    # The run's two model calls: the first asks for the tool (counted, not judged).
    assert len(cases) == len(traffic.turns) + 1
    assert sum(r.skipped.get("tool_calls", 0) for r in decoded) == 1
    # Each answer once; in the order the exporter sent the spans, which need not be
    # the order of the calls (the Vercel AI SDK's app ends its spans concurrently).
    assert sorted(c["output"] for c in cases) == sorted(
        [answer for _, _, answer in traffic.turns] + [RUN.answer])


def test_inputs_check_names_the_convention_and_lists_the_sessions(traffic, tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"\n".join(otlp_json_of(record) for record in traffic.records))
    done = _check(path, "--json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    read_as = {name for line in lines for name in line.get("conventions", {})}
    assert read_as == {traffic.client}
    sessions = {line["session"]["id"]: line["session"] for line in lines if "session" in line}
    assert {k: v["turns"] for k, v in sessions.items()} == {"attack": 4, "chat": 2, "run-1": 1}
    assert f"read as {traffic.client} (" in _check(path).stdout


def _check(path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["guardrail", "inputs", "check", str(path), "--input-format", "otlp",
                           "--max", "1000", *flags], capture_output=True, text=True, timeout=120)


# -- content that is missing, hidden or cannot be read: a clear outcome each ---------------

_LANGFUSE = {"langfuse.observation.type": "generation"}
_MLFLOW = {"mlflow.spanType": '"CHAT_MODEL"'}
_VERCEL = {"ai.operationId": "ai.generateText.doGenerate"}
_ADK = {"gen_ai.system": "gcp.vertex.agent"}


@pytest.mark.parametrize(("attributes", "outcome"), [
    # Broken JSON, a shape of nothing known, nesting past any conversation.
    ({**_LANGFUSE, "langfuse.observation.output": '{"role": "assistant", "content": "Hi'},
     "unreadable_content"),
    ({**_LANGFUSE, "langfuse.observation.output": "[1, 2, 3]"}, "unreadable_content"),
    ({**_MLFLOW, "mlflow.spanOutputs": '{"unexpected": true}'}, "unreadable_content"),
    ({**_MLFLOW, "mlflow.spanOutputs": "[" * 5000 + "]" * 5000}, "unreadable_content"),
    ({**_ADK, "gcp.vertex.agent.llm_response": "{not json"}, "unreadable_content"),
    ({**_ADK, "gcp.vertex.agent.llm_response": '{"model_version": "m"}'},
     "unreadable_content"),
    ({**_VERCEL, "ai.response.toolCalls": "{broken", "ai.response.text": ""},
     "unreadable_content"),
    # Capture off, or nothing said: never the advice's opposite, never a case.
    ({**_ADK, "gcp.vertex.agent.llm_response": "{}", "gcp.vertex.agent.llm_request": "{}"},
     "no_content"),
    ({**_VERCEL, "gen_ai.system": "openai"}, "no_content"),
    ({**_LANGFUSE, "langfuse.observation.output": "__REDACTED__"}, "no_content"),
])
def test_bad_or_hidden_content_is_counted_never_judged_nor_dlqd(attributes, outcome):
    from support.otel_traffic import chat_span, otlp_proto

    decoded = OtlpDecoder().decode(otlp_proto([chat_span(attributes)]), {})
    assert (decoded.cases, decoded.skipped) == ([], {outcome: 1})
    if outcome == "unreadable_content":
        assert "cannot be read" in decoded.notices[0].text


def test_other_langfuse_and_mlflow_spans_are_no_genai_spans():
    from support.otel_traffic import chat_span, otlp_proto

    for attributes in ({"langfuse.observation.type": "span",
                        "langfuse.observation.output": '"not an answer"'},
                       {"mlflow.spanType": '"RETRIEVER"', "mlflow.spanOutputs": '"docs"'},
                       {"ai.operationId": "ai.generateText", "ai.response.text": "repeat"}):
        decoded = OtlpDecoder().decode(otlp_proto([chat_span(attributes)]), {})
        assert (decoded.cases, decoded.skipped) == ([], {"no_genai_span": 1}), attributes


def test_plain_text_and_broken_utf8_are_read_as_text():
    from support.otel_traffic import chat_span, otlp_proto

    span = chat_span({**_LANGFUSE, "langfuse.observation.input": "plain question",
                      "langfuse.observation.output": "plain \udcff answer".encode(
                          "utf-8", "surrogateescape").decode("utf-8", "replace")})
    case = OtlpDecoder().decode(otlp_proto([span]), {}).cases[0]
    assert case["output"].startswith("plain ") and case["output"].endswith(" answer")
    assert case["messages"] == [{"role": "user", "content": "plain question"}]
