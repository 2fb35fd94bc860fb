"""``guardrail inputs check`` lists the sessions a file assembles into: per session
its id, turns, traces, first and last turn time, model versions, turn ids and the
transcript the judge would read (``--json``: the session case), and how many cases
carry no conversation id. Traffic: real conversations from instrumented clients
(the OpenAI client under OpenInference's ``using_session``; Pydantic AI's own GenAI
spans, each turn an agent run), one span per record, shuffled; and case JSON."""

from __future__ import annotations

import json
import os
import random

import orjson
import pytest
from click.testing import CliRunner
from support.agent_traffic import ScriptedModel
from support.otel_traffic import genai_spans, otlp_json, otlp_json_of
from support.session_traffic import SMALL_TALK, SPLIT_PHISHING, converse

from guardrail.cli import cli
from guardrail.formats.otlp import OtlpDecoder
from guardrail._event_time import utc_iso
from guardrail.stream.envelope import Source, decode_record

SCRIPTS = {"chat-1": SPLIT_PHISHING, "chat-2": SMALL_TALK}


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [n for n in os.environ if n.startswith("GUARDRAIL_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def traffic():
    """The same two conversations under two conventions."""
    with ScriptedModel() as model:
        return {convention: converse(model, SCRIPTS, convention=convention, version="v4")
                for convention in ("openinference", "pydantic_ai")}


def _shuffled(records: list[bytes], seed: int = 3) -> list[bytes]:
    """One OTLP/JSON line per span, shuffled as partitions interleave them."""
    lines = [otlp_json_of(record) for record in records]
    random.Random(seed).shuffle(lines)
    return lines


def _check(tmp_path, lines: list[bytes], *flags: str, input_format: str = "otlp"):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return CliRunner().invoke(cli, ["inputs", "check", str(path), "--input-format",
                                    input_format, "--max", "100", *flags])


def _block(output: str, session_id: str) -> str:
    return output.split(f"\nsession {session_id}:")[1].split("\nsession ")[0]


def _event_times(lines: list[bytes]) -> dict[str, list[int]]:
    """Each session's turn times as the worker's own decoding reads them."""
    decoder, times = OtlpDecoder(), {}
    for number, line in enumerate(lines):
        record = decode_record(line, max_bytes=10**7, source=Source("f", 0, number),
                               decoder=decoder)
        for _, message in record.items:
            times.setdefault(message.session_id, []).append(message.event_time_ms)
    return times


def test_sessions_of_openinference_turns_with_times_versions_and_transcript(tmp_path, traffic):
    conversation = traffic["openinference"]
    (other,) = genai_spans(["No conversation here."])
    lines = [*_shuffled(conversation.records()), otlp_json([other])]

    result = _check(tmp_path, lines)

    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 session(s) from these records (each judged as a whole every 3 turn(s)" in out
    times = _event_times(lines)
    chat1 = _block(out, "chat-1")
    assert chat1.startswith(
        f" 4 turn(s) in 4 trace(s); first turn {utc_iso(min(times['chat-1']))}, "
        f"last turn {utc_iso(max(times['chat-1']))}\n")
    assert "closing judgment: case_id=chat-1#4 (status closed)  model_versions=v4" in chat1
    ids = [f"{t.trace_id}:{t.span_ids[0]}" for t in conversation.conversation("chat-1")]
    assert f"  turns: {', '.join(ids)}\n" in chat1  # in the order they were made
    transcript = [line[6:] for line in chat1.splitlines() if line.startswith("    | ")]
    users = [line for i, line in enumerate(transcript[1:]) if "USER>>>" in transcript[i]]
    assert users == [user for user, _ in SPLIT_PHISHING]  # shuffled, shown in turn order
    assert transcript[-2] == SPLIT_PHISHING[-1][1]
    assert _block(out, "chat-2").startswith(" 2 turn(s) in 2 trace(s)")
    assert out.endswith("\n1 case(s) without a conversation id (judged as turns only)\n")


def test_json_gives_pydantic_ai_runs_as_turns_of_their_sessions(tmp_path, traffic):
    conversation = traffic["pydantic_ai"]

    result = _check(tmp_path, _shuffled(conversation.records()), "--json")

    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in result.output.splitlines()]
    runs = {r["run"]["trace_id"]: r["run"] for r in records if "run" in r}
    assert len(runs) == 6  # each turn an agent run
    sessions = {r["session"]["id"]: r["session"] for r in records if "session" in r}
    view = sessions["chat-1"]
    turns = conversation.conversation("chat-1")
    assert view["turn_ids"] == [runs[t.trace_id]["case"]["case_id"] for t in turns]
    assert (view["turns"], view["traces"], view["status"]) == (4, 4, "closed")
    assert view["model_versions"] == ["v4"]
    assert view["first_turn_at"] == utc_iso(runs[turns[0].trace_id]["case"]["timestamp"])
    assert view["last_turn_at"] == utc_iso(runs[turns[-1].trace_id]["case"]["timestamp"])
    case = view["case"]
    assert case["case_id"] == "chat-1#4" and case["session_id"] == "chat-1"
    assert "<<<TURN 4 AGENT STEPS>>>" in case["session"]  # a run's steps are in the transcript
    assert case["output"] == SPLIT_PHISHING[-1][1]
    assert [m["role"] for m in case["messages"]] == ["user", "assistant"] * 4
    assert sessions["chat-2"]["turns"] == 2
    assert records[-1] == {"without_session": 0}


def _case_lines(*cases: dict) -> list[bytes]:
    return [json.dumps(case).encode() for case in cases]


def test_case_json_turns_counted_once_and_without_an_id_counted(tmp_path):
    second = {"case_id": "t2", "conversation_id": "chat-7", "output": "Second.",
              "timestamp": "2026-11-27T09:00:02Z"}
    lines = _case_lines(
        second,
        {"case_id": "t1", "metadata": {"conversation_id": "chat-7", "model_version": "v3"},
         "input": "Hi", "output": "First.", "timestamp": "2026-11-27T09:00:01Z"},
        second,  # redelivered
        {"case_id": "solo", "output": "No conversation."},
        {"case_id": "u1", "conversation_id": "chat-8", "output": "No time."})

    result = _check(tmp_path, lines, input_format="case")

    assert result.exit_code == 0, result.output
    out = result.output
    assert (" 2 turn(s) in 0 trace(s), 1 turns seen twice (kept once); first turn "
            "2026-11-27T09:00:01.000+00:00, last turn 2026-11-27T09:00:02.000+00:00\n") in _block(out, "chat-7")
    assert "  turns: t1, t2\n" in out  # by event time, not as read
    assert "model_versions=v3" in out
    assert "no event time (turns ordered by turn id)" in _block(out, "chat-8")
    assert out.endswith("\n1 case(s) without a conversation id (judged as turns only)\n")


def test_caps_truncate_and_sessions_can_be_left_out(tmp_path, monkeypatch):
    lines = _case_lines(*({"case_id": f"t{n}", "conversation_id": "long", "output": f"A{n}",
                           "timestamp": 1000 * n} for n in range(1, 5)))
    monkeypatch.setenv("GUARDRAIL_SESSION_MAX_TURNS", "2")

    result = _check(tmp_path, lines, "--json", input_format="case")

    (view,) = [orjson.loads(line)["session"] for line in result.output.splitlines()
               if line.startswith('{"session"')]
    assert (view["turns"], view["dropped_turns"], view["status"]) == (4, 2, "truncated")
    assert view["turn_ids"] == ["t1", "t4"]  # the first turn and the latest kept
    assert view["case"]["case_id"] == "long#4"
    assert "session" not in _check(tmp_path, lines, "--no-sessions",
                                   input_format="case").output
    plain = _check(tmp_path, _case_lines({"output": "Hi"}), input_format="case").output
    assert "session" not in plain and "conversation id" not in plain  # nothing to list
