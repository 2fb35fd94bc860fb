"""The real worker on the spans teams' tracing clients write (#54): Langfuse,
MLflow Tracing, the Vercel AI SDK and Google ADK, each app run for real against
the scripted model, its own exporter's requests produced as records and shuffled
over two partitions. Every turn is judged once, every conversation judged as a
whole and closed, a later turn resumes one, and an agent run that is a
conversation of one turn is not judged a second time: its verdict counts for its
session in the session windows."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from support.agent_traffic import SCENARIOS, ScriptedModel
from support.client_traffic import CLIENTS, client_traffic, missing
from support.harness import StreamEnv, TopicWatcher
from support.run_traffic import produce_spread, worker_fed
from support.session_traffic import SMALL_TALK, SPLIT_PHISHING, closing_judgments, shuffled

from guardrail.stream.events import decode_events

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SETTINGS = {"input_format": "otlp", "topic_partitions": 2, "run_settle_seconds": 1,
            "session_judge_every": 3, "session_idle_seconds": 5}
RUN = SCENARIOS["benign"]


def test_the_clients_conversations_are_judged_and_one_turn_ones_only_once(
        kafka_bootstrap, thread_judge, tmp_path):
    clients = [c for c in CLIENTS if missing(c) is None]
    if "langfuse" not in clients:
        pytest.skip(f"langfuse: {missing('langfuse')}")
    thread_judge.reset()
    with ScriptedModel() as model:
        traffic = {c: client_traffic(c, model, {f"attack-{c}": SPLIT_PHISHING,
                                                f"chat-{c}": SMALL_TALK}, runs={f"run-{c}": RUN})
                   for c in clients}
        resumed = client_traffic("langfuse", model, {"chat-langfuse": (
            ("Any name for a third?", "Tempeh."),)})
    records = [r for t in traffic.values() for r in t.records]
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path, **SETTINGS)
    try:
        worker_fed(env, shuffled(records, 3))
        with TopicWatcher(env.bootstrap, env.topic("results")) as results, \
                TopicWatcher(env.bootstrap, env.topic("judgments")) as judgments:
            assert results.wait_for(lambda r: len(closing_judgments(r)) >= 2 * len(clients),
                                    timeout=150), env.logs()[-3000:]
            asyncio.run(produce_spread(env.bootstrap, env.topic("input"),
                                       [(1, r) for r in resumed.records]))
            assert results.wait_for(lambda r: any(
                x.get("session", {}).get("trigger") == "resumed" for x in r), timeout=60), \
                env.logs()[-3000:]
            runs = {f"run-{c}" for c in clients}
            assert judgments.wait_for(lambda j: runs <= _session_cases(j), timeout=30), \
                env.logs()[-3000:]
            got, events = results.snapshot(), judgments.snapshot()
    finally:
        env.stop_workers()
    # Every turn judged once (ADK's as agent runs): 6 chat turns and a run per client,
    # and the turn that resumed a conversation; no span judged twice over.
    turns = {r["case_id"] for r in got if "session" not in r}
    assert len(turns) == len(clients) * (len(SPLIT_PHISHING) + len(SMALL_TALK) + 1) + 1, \
        sorted(turns)
    closing = closing_judgments(got)
    assert sorted(closing) == sorted(f"{kind}-{c}" for c in clients for kind in ("attack", "chat"))
    for session_id, result in closing.items():
        turns_made = len(SPLIT_PHISHING if session_id.startswith("attack") else SMALL_TALK)
        assert result["session"]["turns"] == turns_made, session_id
        verdict = {m["name"]: m["result"][0]["verdict"] for m in result["metrics"]}
        expected = "UNSAFE" if session_id.startswith("attack") else "SAFE"
        assert verdict["multi_turn_jailbreak"] == expected, session_id
    # A one-turn conversation (the agent run) is no second judgment, but it counts.
    assert not any(r.get("session", {}).get("id", "").startswith("run-") for r in got)
    assert _session_cases(events) >= runs


def _session_cases(records: list[dict]) -> set[str]:
    """The sessions counted in the windows (unit=session), by session id."""
    found = set()
    for record in records:
        for event in decode_events(orjson.dumps(record))[0]:
            if event.group.get("unit") == "session":
                found.add(event.case_id.partition("#")[0])
    return found
