"""A conversation of one turn is not judged twice. Pydantic AI makes up a fresh
``gen_ai.conversation.id`` for every run without history, so every such run was a
"session" judged again (``turn_flagged`` for a flagged run, ``idle`` for all):
now a session is judged as one from its second turn, and until then its one
turn's verdict stands for it, counted in the session windows without a judge call
and without a second result."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
from support.assembly_records import Message

from guardrail.agents.assembly import Assembler
from guardrail.assembly.sessions.gathering import SessionGathering
from guardrail.assembly.sessions.turns import Turn
from guardrail.judging.cache import MemoryCache
from guardrail.judging.evaluate import Evaluator
from guardrail.judges.llm import LLMJudge
from guardrail.stream.events import decode_events
from guardrail.stream.processing import MessageJudge
from guardrail.stream.telemetry import Telemetry

T0 = 1_700_000_000_000
VERDICTS = {"toxicity": "unsafe", "bias": "safe", "jailbreak": "error"}


class _Sessions:
    def __init__(self, settings, **gathering) -> None:
        self.assembler = Assembler(SessionGathering(settings.sessions, Telemetry(), **gathering),
                                   {}, "t")
        self.offset = 0

    def send(self, kind: bytes, key: str, value: bytes = b""):
        self.offset += 1
        message = Message(key.encode(), value, [("guardrail-session", kind)], offset=self.offset)
        return self.assembler.apply(SimpleNamespace(message=message))

    def turn(self, key: str, n: int, verdicts: dict[str, str]) -> None:
        flagged = tuple(m for m, v in verdicts.items() if v == "unsafe")
        turn = Turn(turn_id=f"{key}-{n}", started_ms=T0 + n, user=f"q{n}", answer=f"a{n}",
                    flagged=bool(flagged), flagged_metrics=flagged, verdicts=verdicts,
                    trace_id=f"{n:032x}", span_id=f"{n:016x}", metadata={"model_version": "v1"})
        self.send(b"turn", key, turn.to_bytes())

    def age(self, key: str, seconds: float) -> None:
        header = self.assembler.book.headers[key]
        header.last_ms -= int(seconds * 1000)


async def _judged(settings, message) -> tuple[list, list, int]:
    evaluator = Evaluator(LLMJudge(settings.judge), evaluation=settings.evaluation,
                          cache=MemoryCache(100))
    judge = MessageJudge.from_settings(evaluator, settings)
    try:
        outgoing = await judge.process([message])  # the assembler's case, as the worker's
    finally:
        await evaluator.aclose()
    results = [orjson.loads(o.value) for o in outgoing if o.topic == settings.kafka.results_topic]
    events = [e for o in outgoing if o.topic == settings.kafka.judgments_topic
              for e in decode_events(o.value)[0]]
    return results, events, judge.tally.judged


async def test_a_flagged_one_turn_session_is_counted_on_its_turns_verdict_without_a_call(
        make_settings, judge_server):
    settings = make_settings(session_idle_seconds=60, session_judge_every=1)
    s = _Sessions(settings)
    s.turn("run-1", 1, VERDICTS)  # flagged: before, judged again at once ("turn_flagged")
    assert s.send(b"tick", "run-1") is None
    s.age("run-1", 61)
    closing = s.send(b"tick", "run-1")
    case = orjson.loads(closing.value)
    assert case["session_block"]["trigger"] == "idle"
    assert case["session_block"]["turn_verdicts"] == VERDICTS
    results, events, judged = await _judged(settings, closing)
    assert (results, judged, judge_server.calls) == ([], 0, 0)
    counted = sorted((e.metric, e.status, e.group.get("unit")) for e in events)
    assert counted == [("bias", "safe", "session"), ("jailbreak", "error", "session"),
                       ("toxicity", "unsafe", "session")]
    s.send(b"done", "run-1")
    assert s.assembler.book.headers["run-1"].state == "closed"


async def test_with_gate_session_holds_a_flagged_first_turn_is_judged_as_a_session_at_once(
        make_settings, judge_server):
    # The gate holds a session's later turns on an UNSAFE session judgment, which a
    # reviewer then releases: a flagged first turn cannot wait for the idle close.
    settings = make_settings(session_idle_seconds=60, session_judge_every=3)
    s = _Sessions(settings, judge_flagged_first_turn=True)
    s.turn("run-1", 1, VERDICTS)
    message = s.send(b"tick", "run-1")
    case = orjson.loads(message.value)
    assert case["session_block"]["trigger"] == "turn_flagged"
    assert "turn_verdicts" not in case["session_block"]
    results, _, judged = await _judged(settings, message)
    assert len(results) == 1 and judged > 0 and judge_server.calls > 0
    s.send(b"done", "run-1")
    s.turn("run-2", 1, {"toxicity": "safe"})  # a safe first turn still stands for its session
    assert s.send(b"tick", "run-2") is None


async def test_from_its_second_turn_a_session_is_judged_as_one(make_settings, judge_server):
    settings = make_settings(session_idle_seconds=60, session_judge_every=3)
    s = _Sessions(settings)
    s.turn("chat-1", 1, {"toxicity": "safe"})
    s.age("chat-1", 61)
    s.send(b"tick", "chat-1")
    s.send(b"done", "chat-1")  # closed on its one turn's verdict
    s.turn("chat-1", 2, {"toxicity": "unsafe"})  # resumes: now a conversation
    message = s.send(b"tick", "chat-1")
    case = orjson.loads(message.value)
    assert case["session_block"]["trigger"] == "resumed"
    assert "turn_verdicts" not in case["session_block"]
    results, _, judged = await _judged(settings, message)
    assert len(results) == 1 and results[0]["session"]["turns"] == 2
    assert judged > 0 and judge_server.calls > 0


def test_a_turn_from_an_older_release_without_verdicts_is_judged_as_before(make_settings):
    s = _Sessions(make_settings(session_idle_seconds=60))
    s.turn("old-1", 1, {})
    s.age("old-1", 61)
    assert "turn_verdicts" not in orjson.loads(s.send(b"tick", "old-1").value)["session_block"]


def test_a_newer_releases_turn_fields_are_left_out_not_refused():
    raw = orjson.dumps({"turn_id": "t1", "started_ms": T0, "answer": "hi", "from_2027": 1})
    assert Turn.from_bytes(raw) == Turn(turn_id="t1", started_ms=T0, answer="hi")
