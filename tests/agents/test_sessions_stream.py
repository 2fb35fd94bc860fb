"""Sessions on the real worker: conversations made by real clients under real
instrumentation, one turn per trace, history kept server-side (each span holds
only its turn), every span its own record shuffled over two partitions.

Two conventions: OpenInference's ``using_session`` around the OpenAI client
(``session.id`` on the LLM span), and Pydantic AI's own OTel GenAI spans
(``gen_ai.conversation.id``; each turn an agent run, so the run is the turn).
The multi-turn attack (``SPLIT_PHISHING``) is harmless turn by turn and a
phishing mail as a whole: the stand-in judge's ``multi_turn_jailbreak`` rule
fires only when the transcript holds both of its parts.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from support.agent_traffic import ScriptedModel
from support.harness import StreamEnv, TopicWatcher, worker_page
from support.run_traffic import produce_spread, worker_fed
from support.session_faults import session_crash_scenario
from support.session_traffic import (SMALL_TALK, SPLIT_PHISHING, closing_judgments, converse,
                                     shuffled)

from guardrail.stream.events import decode_events

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SETTINGS = {"input_format": "otlp", "topic_partitions": 2, "run_settle_seconds": 1,
            "session_judge_every": 3, "session_idle_seconds": 5}
SESSION_METRICS = {"bias", "toxicity", "multi_turn_jailbreak", "conversation_harm"}


def _verdicts(result: dict) -> dict[str, str]:
    return {m["name"]: m["result"][0]["verdict"] if m["result"] else "ERROR"
            for m in result["metrics"]}


def _session_events(bootstrap: str, topic: str, expect: int) -> list:
    """The session-unit judgment events on the judgments topic (once ``expect``
    are there, or after 15 s)."""

    def read(records: list[dict]) -> list:
        events = [e for record in records for e in decode_events(orjson.dumps(record))[0]]
        return [e for e in events if e.group.get("unit") == "session"]

    with TopicWatcher(bootstrap, topic) as watcher:
        watcher.wait_for(lambda records: len(read(records)) >= expect, timeout=15)
        return read(watcher.snapshot())


@pytest.mark.both_brokers
def test_conversations_are_judged_whole_while_turns_stay_safe_alone(kafka_bootstrap,
                                                                       thread_judge, tmp_path):
    thread_judge.reset()
    scripts = {"oi": {"attack-oi": SPLIT_PHISHING, "chat-oi": SMALL_TALK},
               "pa": {"attack-pa": SPLIT_PHISHING, "chat-pa": SMALL_TALK}}
    with ScriptedModel() as model:
        traffic = {"oi": converse(model, scripts["oi"], convention="openinference"),
                   "pa": converse(model, scripts["pa"], convention="pydantic_ai")}
        resumed = converse(model, {"chat-oi": (("Any name for a third?", "Tempeh."),)},
                           convention="openinference")
    records = [r for t in traffic.values() for r in t.records()]
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, **SETTINGS)
    try:
        worker = worker_fed(env, shuffled(records, 7))
        with TopicWatcher(env.bootstrap, env.topic("results")) as results:
            assert results.wait_for(lambda r: len(closing_judgments(r)) >= 4, timeout=120), \
                env.logs()[-3000:]
            events = _session_events(env.bootstrap, env.topic("judgments"),
                                     4 * len(SESSION_METRICS))
            asyncio.run(produce_spread(env.bootstrap, env.topic("input"),
                                       [(1, r) for r in resumed.records()]))
            assert results.wait_for(lambda r: any(
                x.get("session", {}).get("trigger") == "resumed" for x in r), timeout=60), \
                env.logs()[-3000:]
            got = results.snapshot()
        metrics = worker_page(worker.web_port, "/metrics")
    finally:
        env.stop_workers()
    turns = [r for r in got if "session" not in r]
    # Every turn judged on its own, as before: each SAFE, the attack's included.
    assert len({r["case_id"] for r in turns}) == 12 + 1, sorted(r["case_id"] for r in turns)
    assert all(set(_verdicts(r).values()) == {"SAFE"} for r in turns)
    closing = closing_judgments(got)
    assert sorted(closing) == ["attack-oi", "attack-pa", "chat-oi", "chat-pa"]
    for session_id, result in closing.items():
        script = SPLIT_PHISHING if session_id.startswith("attack") else SMALL_TALK
        block = result["session"]
        assert (block["turns"], block["traces"], block["status"]) == (
            len(script), len(script), "closed"), session_id
        assert result["case_id"] == f"{session_id}#{len(script)}"
        assert set(_verdicts(result)) == SESSION_METRICS
        expected = "UNSAFE" if session_id.startswith("attack") else "SAFE"
        assert _verdicts(result)["multi_turn_jailbreak"] == expected, session_id
        assert result["metadata"]["model_version"] == "v1" and result["trace"]["trace_id"]
    # Judged while it went on too: the attack once three turns had come, before it ended.
    during = [r for r in got if r.get("session", {}).get("trigger") == "every_n"]
    assert {r["session"]["id"] for r in during} == {"attack-oi", "attack-pa"}
    resumed_result = next(r for r in got if r.get("session", {}).get("trigger") == "resumed")
    assert resumed_result["case_id"] == "chat-oi#3"
    # The windows count each session once (its closing judgment), apart from turns.
    counted = sorted((e.group.get("unit"), e.case_id, e.metric) for e in events)
    assert len(counted) == len(set(counted)) == 4 * len(SESSION_METRICS), counted
    assert 'guardrail_session_judgments_total{trigger="idle"} 4.0' in metrics


@pytest.mark.both_brokers
@pytest.mark.slow
def test_kill_9_while_sessions_are_open_and_a_worker_joining_lose_no_turn_nor_count_twice(
        kafka_bootstrap, thread_judge, tmp_path):
    """The worker dies while sessions are being judged; a restarted worker and a
    second one share the sessions. Every session's closing judgment holds all
    its turns, and the windows count each closing once, redeliveries skipped."""
    thread_judge.reset()
    figures = session_crash_scenario(kafka_bootstrap, thread_judge, tmp_path, sessions=30,
                                     turns=6, topic_partitions=2, session_judge_every=3,
                                     session_idle_seconds=8)
    # A string: pytest cuts a long tuple's repr, and the figures name what is missing.
    explain = (f"{ {k: v for k, v in figures.items() if k != 'logs'} }\n"
               f"{figures['logs'][-3000:]}")
    assert figures["finished"] and figures["workers_alive"], explain
    assert figures["turns_lost"] == [] and figures["sessions_missing_turns"] == [], explain
    assert figures["metrics"] == len(SESSION_METRICS)
    assert figures["window_sessions"] == figures["closing_lives"] * figures["metrics"], explain
