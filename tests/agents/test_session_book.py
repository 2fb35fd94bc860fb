"""Session bookkeeping on the one assembler: turns added once, the triggers
(every n turns, a flagged turn, idle, resumed), caps that evict the oldest
turns but the first, and recovery from the table (no Kafka: a dict table)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from support.assembly_records import Message

from guardrail.agents.assembly import Assembler
from guardrail.assembly.sessions.book import SessionHeader, SessionLimits, due
from guardrail.assembly.sessions.gathering import SessionGathering
from guardrail.assembly.sessions.turns import Turn
from guardrail.config.settings import Settings
from guardrail.stream.telemetry import Telemetry

T0 = 1_700_000_000_000


@dataclass
class Sessions:
    """An Assembler with the session rules over a dict table."""

    assembler: Assembler
    table: dict = field(default_factory=dict)
    offset: int = 0

    def send(self, kind: bytes, session: str, value: bytes = b"") -> Any:
        self.offset += 1
        message = Message(session.encode(), value, [("guardrail-session", kind)],
                          offset=self.offset)
        return self.assembler.apply(SimpleNamespace(message=message))

    def turn(self, session: str, n: int, *, flagged: bool = False, text: str = "") -> None:
        turn = Turn(turn_id=f"{session}-{n}", started_ms=T0 + n * 1000, user=f"question {n}",
                    answer=text or f"answer {n}", flagged=flagged,
                    flagged_metrics=("toxicity",) if flagged else (),
                    trace_id=f"{n:032x}", span_id=f"{n:016x}", metadata={"model_version": "v1"})
        self.send(b"turn", session, turn.to_bytes())

    def header(self, session: str) -> SessionHeader:
        return self.assembler.book.headers[session]

    def judge(self, session: str) -> dict[str, Any]:
        """Tick the session; it must be due. Returns the case to judge, then done."""
        message = self.send(b"tick", session)
        assert message is not None, f"{session} was not due"
        self.send(b"done", session)
        return orjson.loads(message.value)


def _sessions(table: dict | None = None, **options: Any) -> Sessions:
    settings = Settings(**{"session_judge_every": 3, "session_idle_seconds": 60, **options})
    gathering = SessionGathering(settings.sessions, Telemetry())
    table = {} if table is None else table
    return Sessions(Assembler(gathering, table, "app-session-turns"), table)


def _age(sessions: Sessions, session: str, seconds: float) -> None:
    header = sessions.header(session)
    header.last_ms -= int(seconds * 1000)
    if header.closed_ms:
        header.closed_ms -= int(seconds * 1000)


def test_a_session_is_due_every_n_turns_and_a_redelivered_turn_changes_nothing():
    s = _sessions()
    for n in (1, 2):
        s.turn("c1", n)
    s.turn("c1", 2)  # redelivered
    assert s.header("c1").turns == 2 and s.send(b"tick", "c1") is None
    s.turn("c1", 3)
    case = s.judge("c1")
    assert case["case_id"] == "c1#3"
    assert case["session_block"]["trigger"] == "every_n"
    assert case["session_block"]["status"] == "open" and case["session_block"]["turns"] == 3
    assert case["metadata"] == {"model_version": "v1"}
    assert case["trace"] == {"trace_id": f"{3:032x}", "span_id": f"{3:016x}"}
    header = s.header("c1")
    assert (header.state, header.judged_turns, header.judgments) == ("open", 3, 1)
    assert len([k for k in s.table if k.startswith("t/c1/")]) == 3  # turns are kept


def test_a_flagged_turn_makes_the_session_due_at_once():
    s = _sessions()
    s.turn("c1", 1)
    s.turn("c1", 2, flagged=True)
    case = s.judge("c1")
    assert (case["case_id"], case["session_block"]["trigger"]) == ("c1#2", "turn_flagged")
    assert case["session_block"]["flagged_turns"] == [2]
    assert s.send(b"tick", "c1") is None  # the flag was judged


def test_the_sweep_ticks_a_session_again_as_soon_as_its_judgment_is_done():
    # A whole the sweep ticked is held back for TICK_AGAIN_MS while its tick is on its
    # way; once that tick's judgment is done the hold ends, or a session due again
    # (a flagged turn, n more turns) waited up to 5 s for its next judgment.
    s = _sessions(session_judge_every=1)
    s.turn("c1", 1)
    s.turn("c1", 2)
    now = int(time.time() * 1000)
    assert s.assembler.ticks_to_send(now) == [("c1", b"")]
    assert s.assembler.ticks_to_send(now + 1000) == []  # the tick is on its way
    s.judge("c1")
    s.turn("c1", 3, flagged=True)
    assert s.assembler.ticks_to_send(now + 2000) == [("c1", b"")]
    assert s.judge("c1")["session_block"]["trigger"] == "turn_flagged"


def test_a_turn_during_the_idle_judgment_resumes_the_closed_session():
    # The idle judgment's result says "closed" and counts the session in the windows;
    # a turn that came while it was judged must make the next judgment "resumed", as a
    # turn after it would, not a second "idle" one counted in the windows again.
    s = _sessions()
    s.turn("c1", 1)
    _age(s, "c1", 61)
    message = s.send(b"tick", "c1")
    assert orjson.loads(message.value)["session_block"]["status"] == "closed"
    s.turn("c1", 2)  # while the closing judgment is on its way
    s.send(b"done", "c1")
    _age(s, "c1", 61)
    block = s.judge("c1")["session_block"]
    assert (block["turns"], block["trigger"], block["status"]) == (2, "resumed", "open")


def test_an_idle_session_is_judged_once_more_closed_and_judged_again_when_it_resumes():
    s = _sessions()
    for n in (1, 2, 3):
        s.turn("c1", n)
    s.judge("c1")
    _age(s, "c1", 61)
    case = s.judge("c1")
    assert case["session_block"] | {"first_turn_at": None, "last_turn_at": None} == {
        "id": "c1", "turns": 3, "traces": 3, "status": "closed", "trigger": "idle",
        "first_turn_at": None, "last_turn_at": None}
    assert s.header("c1").state == "closed"
    s.turn("c1", 4)  # resumed: judged again at once, as a new judgment of the session
    case = s.judge("c1")
    assert (case["case_id"], case["session_block"]["trigger"]) == ("c1#4", "resumed")
    assert case["session_block"]["status"] == "open"


def test_the_caps_evict_the_oldest_turns_but_the_first_and_mark_the_session_truncated():
    s = _sessions(session_max_turns=4, session_judge_every=100)
    for n in range(1, 8):
        s.turn("c1", n)
    kept = sorted(k for k in s.table if k.startswith("t/c1/"))
    assert kept == ["t/c1/c1-1", "t/c1/c1-5", "t/c1/c1-6", "t/c1/c1-7"]
    header = s.header("c1")
    assert (header.turns, header.dropped) == (7, 3)
    _age(s, "c1", 61)
    case = s.judge("c1")
    assert case["case_id"] == "c1#7" and case["session_block"]["status"] == "truncated"


def test_memory_pressure_judges_the_quietest_sessions_early_and_closes_them():
    s = _sessions(session_memory_bytes=1_000_000)
    big = "x" * 300_000
    for session in ("quiet", "busy"):
        for n in (1, 2):
            s.turn(session, n, text=big)
    _age(s, "quiet", 10)
    ticks = s.assembler.due_ticks(now_ms=s.header("busy").last_ms)
    assert ticks == [("quiet", b"force")]
    assert s.send(b"tick", "quiet") is None  # not due by itself
    message = s.send(b"tick", "quiet", b"force")
    assert orjson.loads(message.value)["session_block"]["trigger"] == "idle"
    s.send(b"done", "quiet")
    assert s.header("quiet").state == "closed"


def test_recovery_rebuilds_sessions_from_the_table_and_a_redelivered_tick_names_the_same_judgment():
    s = _sessions()
    for n in (1, 2, 3):
        s.turn("c1", n)
    s.assembler.write_headers(SimpleNamespace(_set_current_event=lambda event: None))
    tick = s.send(b"tick", "c1")  # judging, not done: the worker dies here
    restarted = _sessions(table=s.table)
    restarted.assembler.rebuild()
    header = restarted.header("c1")
    assert (header.state, header.turns, header.judging_turns) == ("closing", 3, 3)
    again = restarted.assembler.apply(SimpleNamespace(message=Message(
        b"c1", b"", [("guardrail-session", b"tick")], offset=s.offset)))
    assert again is not None and again.source == tick.source
    assert orjson.loads(again.value)["case_id"] == "c1#3"


@pytest.mark.parametrize("turns, judged, flagged, resumed, quiet_s, expected", [
    (2, 0, False, False, 0, None), (3, 0, False, False, 0, "every_n"),
    (4, 3, True, False, 0, "turn_flagged"), (3, 3, True, False, 0, None),
    (4, 3, True, True, 0, "resumed"), (1, 0, False, False, 60, "idle")])
def test_due(turns, judged, flagged, resumed, quiet_s, expected):
    header = SessionHeader(session_id="c", turns=turns, judged_turns=judged, flagged=flagged,
                           resumed=resumed, last_ms=0)
    limits = SessionLimits(judge_every=3, idle_seconds=60)
    assert due(header, now_ms=int(quiet_s * 1000), limits=limits) == expected


def test_header_round_trip_and_garbage():
    header = SessionHeader(session_id="c", state="closing", tick=[1, 42], status="idle",
                           turns=3, flagged=True)
    assert SessionHeader.from_bytes(header.to_bytes()) == header
    with pytest.raises(ValueError, match="not a session header"):
        SessionHeader.from_bytes(b"[1]")


def test_every_judgment_of_a_session_is_sampled_by_the_session_id():
    from guardrail.judging.models import Case
    from guardrail.stream.envelope import InputMessage, Source
    from guardrail.stream.sampling import Sampler, sample_id

    def judgment(turns: int) -> InputMessage:
        return InputMessage(case=Case(case_id=f"chat-3#{turns}", output="o"),
                            session={"id": "chat-3", "turns": turns})

    source = Source("app-session-turns", 0, 7)
    assert {sample_id(judgment(n), source) for n in (3, 6, 9)} == {"chat-3"}
    settings = Settings(sample_rate=0.5)
    sampler = Sampler(settings.sampling, group_labels=settings.windows.group_labels,
                      version_label=settings.windows.version_label, partitions=2)
    decisions = {sampler.decide(judgment(n), source.at(n)) for n in range(1, 40)}
    assert len(decisions) == 1  # the whole session in, or the whole session out
