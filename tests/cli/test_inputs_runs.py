"""``guardrail inputs check`` on OTLP records of agent runs: the runs they assemble
into (trace, root span, spans, complete or not, the status the worker would give,
the rendered trajectory; with ``--json`` the whole run case), besides the cases of
spans outside any run, as before. Records: synthetic OTel GenAI runs, one span
per record, shuffled, as the Collector's kafka exporter writes them."""

from __future__ import annotations

import os
import random

import orjson
import pytest
from click.testing import CliRunner
from support.otel_traffic import genai_spans, otlp_json, span_ids
from support.run_traffic import agent_run

from guardrail.cli import cli
from guardrail.formats.otlp import OtlpDecoder
from guardrail.assembly.runs.case import run_case
from guardrail.assembly.runs.routing import RunRouter


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [n for n in os.environ if n.startswith("GUARDRAIL_")]:
        monkeypatch.delenv(name)


def _lines(*runs, seed: int = 4) -> list[bytes]:
    """One OTLP JSON record per span, the runs' spans shuffled together."""
    lines = [otlp_json([span]) for run in runs for span in run.spans]
    random.Random(seed).shuffle(lines)
    return lines


def _check(tmp_path, lines: list[bytes], *flags: str):
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return CliRunner().invoke(cli, ["inputs", "check", str(path), "--input-format", "otlp",
                                    "--max", "100", *flags])


def _expected_case(run, status: str) -> dict:
    decoder = OtlpDecoder(runs=RunRouter())
    spans = [s for record in run.records
             for s in decoder.decode(record, {"content-type": b"application/x-protobuf"})
             .run_spans]
    return run_case(spans, status=status)


def test_runs_are_shown_with_their_spans_status_and_trajectory(tmp_path):
    mail = agent_run(tool="send_email", arguments={"to": "eve@evil.example"},
                     result="sent \x1b[2J", agent="mail-assistant")
    pay = agent_run(request="Pay invoice 7.", tool="transfer_funds",
                    arguments={"amount": 5000}, with_root=False, agent="payments")
    (chat,) = genai_spans(["Hello there."])  # a chat span outside any agent run
    lines = [*_lines(mail, pay), otlp_json([chat])]
    chat_id = ":".join(span_ids(chat))

    result = _check(tmp_path, lines)

    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count(f"1 span of agent run {mail.trace_id}") == len(mail.spans)
    assert f"line {len(lines)}: 1 case(s)\n  case_id={chat_id}" in out  # as before
    assert "2 agent run(s) from these records" in out
    assert (f"run {mail.trace_id}: {len(mail.spans)} span(s); root span seen; "
            "status complete") in out
    assert f"case_id={mail.trace_id}:{mail.root_span_id}  agent=mail-assistant" in out
    assert (f"run {pay.trace_id}: {len(pay.spans)} span(s); no root span: judged after "
            "run_idle_seconds, as far as it goes; status idle") in out
    shown = out.split(f"\nrun {mail.trace_id}:")[1].split("\nrun ")[0]
    trajectory = [line[6:] for line in shown.splitlines() if line.startswith("    | ")]
    assert trajectory[0] == "USER REQUEST: Summarise my inbox."
    assert '  [3] tool call send_email({"to": "eve@evil.example"})' in trajectory
    assert "sent \\x1b[2J" in trajectory  # a terminal escape is shown, not sent
    assert "\x1b" not in out
    assert trajectory[-1] == "FINAL ANSWER: You have 3 new messages."
    assert '[2] tool call transfer_funds({"amount": 5000})' in out


def test_json_gives_each_run_case_as_the_worker_judges_it(tmp_path):
    run = agent_run(tools=2)
    lines = _lines(run)
    lines.append(lines[0])  # a redelivered span counts once

    result = _check(tmp_path, lines, "--json")

    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in result.output.splitlines()]
    assert [r["run_spans"] for r in records if "where" in r] == [{run.trace_id: 1}] * len(lines)
    (view,) = [r["run"] for r in records if "run" in r]
    assert {k: v for k, v in view.items() if k != "case"} == {
        "trace_id": run.trace_id, "root_span_id": run.root_span_id, "root_seen": True,
        "spans": len(run.spans), "dropped_spans": 0, "duplicate_spans": 1,
        "status": "complete"}
    assert view["case"] == _expected_case(run, "complete")
    assert view["case"]["run"]["tool_calls"] == 2


def test_a_run_over_run_max_spans_is_truncated_and_keeps_its_root(tmp_path, monkeypatch):
    monkeypatch.setenv("GUARDRAIL_RUN_MAX_SPANS", "3")
    run = agent_run(tools=3)  # 8 spans
    lines = [otlp_json([span]) for span in run.spans]  # as they ended: the root last

    result = _check(tmp_path, lines, "--json")

    (view,) = [orjson.loads(line)["run"] for line in result.output.splitlines()
               if line.startswith('{"run"')]
    assert (view["status"], view["spans"], view["dropped_spans"]) == ("truncated", 4, 4)
    assert view["root_span_id"] == run.root_span_id and view["root_seen"]
    assert view["case"]["run"]["status"] == "truncated"


def test_without_agent_runs_each_span_is_a_case_as_before(tmp_path):
    run = agent_run()
    result = _check(tmp_path, _lines(run), "--no-agent-runs")
    assert result.exit_code == 0, result.output
    assert "agent run" not in result.output
    assert result.output.count("1 case(s)") == 1  # the chat span with the answer
