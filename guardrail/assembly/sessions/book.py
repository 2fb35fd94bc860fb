"""A session's bookkeeping while its turns arrive: pure state, no Kafka.

A session is judged while it goes on and when it ends, so unlike an agent run
it keeps its turns after a judgment. Its header says when it is due::

    header = SessionHeader.new("conv-7", now_ms=1000)
    book = SessionBook(limits=SessionLimits(judge_every=3))
    book.add(header, turn, now_ms=1000, size=300)       # "added" | "duplicate"
    due(header, now_ms=2000, limits=book.limits)         # "every_n", "turn_flagged", ...

Triggers, in this order: ``resumed`` (a turn came after the session closed),
``turn_flagged`` (a new turn's own verdict was UNSAFE or unsure), ``every_n``
(``judge_every`` new turns since the last judgment), ``idle`` (no turn for
``idle_seconds``: judged once more and closed). A session is judged as a session
from its second turn: a conversation of one turn (Pydantic AI makes up an id for
every run without history) closes on ``idle`` with its turn's verdict standing
for it (:func:`stands_in`), and no judge call. Times are the worker's wall
clock when a turn was applied (quiet on the stream); the turns' own start
times order the transcript and fill the session block.

Memory is bounded per session: past ``max_turns`` or ``max_bytes`` the oldest
turns after the first are evicted (the transcript keeps the first turn and the
latest ones anyway) and the session is marked ``truncated``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import orjson

from ..base import AddOutcome, Book, State
from .turns import Turn

__all__ = ["SessionHeader", "SessionLimits", "SessionBook", "Trigger", "due", "recount",
           "stands_in",
           "FORGET_AFTER_MIN_SECONDS"]

Trigger = Literal["every_n", "turn_flagged", "idle", "resumed"]
#: A closed session is remembered at least this long (a later turn resumes it,
#: numbered on from its turns), and at least twice the idle time.
FORGET_AFTER_MIN_SECONDS = 6 * 3600.0


@dataclass(frozen=True)
class SessionLimits:
    """The session settings the bookkeeping needs (see :class:`~.settings.SessionSettings`)."""

    judge_every: int = 3
    idle_seconds: float = 1800.0
    max_turns: int = 200
    max_bytes: int = 2_000_000
    #: A session of one flagged turn is judged as a session at once, its turn's
    #: verdict not standing for it (the gate's session holds: an UNSAFE session
    #: judgment is what holds the session's later turns and what a reviewer releases).
    judge_flagged_first_turn: bool = False

    @property
    def forget_after_ms(self) -> int:
        return int(max(FORGET_AFTER_MIN_SECONDS, 2 * self.idle_seconds) * 1000)


@dataclass
class SessionHeader:
    """What the session table keeps about a session besides its turns."""

    session_id: str
    state: State = "open"
    #: Arrival (wall clock) of the first and the latest turn.
    first_ms: int = 0
    last_ms: int = 0
    #: Turns ever added (evicted ones included): the session's turn count.
    turns: int = 0
    bytes: int = 0
    #: Turns evicted past the caps: the session is ``truncated``.
    dropped: int = 0
    #: Turns the last published judgment covered, and the one in progress.
    judged_turns: int = 0
    judging_turns: int = 0
    judgments: int = 0
    #: A flagged turn came since the judgment in progress started.
    flagged: bool = False
    #: A turn came after the session closed: judged again as ``resumed``.
    resumed: bool = False
    #: ``[partition, offset]`` of the tick naming the judgment in progress.
    tick: list[int] | None = None
    #: The trigger of the judgment in progress (or the last one).
    status: Trigger | None = None
    closed_ms: int | None = None

    @classmethod
    def new(cls, session_id: str, *, now_ms: int) -> SessionHeader:
        return cls(session_id=session_id, first_ms=now_ms, last_ms=now_ms)

    def to_bytes(self) -> bytes:
        return orjson.dumps({k: v for k, v in asdict(self).items()
                             if v not in (None, 0, False) or k in ("session_id", "state")})

    @classmethod
    def from_bytes(cls, raw: bytes) -> SessionHeader:
        try:
            return cls(**orjson.loads(raw))
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"not a session header: {exc}") from None


def stands_in(header: SessionHeader) -> bool:
    """A session of one turn: its turn's own verdict stands for it."""
    return header.turns < 2


def due(header: SessionHeader, *, now_ms: int, limits: SessionLimits) -> Trigger | None:
    """Whether an open session is to be judged now, and why (a session of one turn
    only on ``idle``: its turn was judged already)."""
    if header.state != "open":
        return None
    if stands_in(header) and not (limits.judge_flagged_first_turn and header.flagged):
        return "idle" if now_ms - header.last_ms >= limits.idle_seconds * 1000 else None
    new_turns = header.turns - header.judged_turns
    if new_turns > 0 and header.resumed:
        return "resumed"
    if new_turns > 0 and header.flagged:
        return "turn_flagged"
    if new_turns >= limits.judge_every:
        return "every_n"
    if now_ms - header.last_ms >= limits.idle_seconds * 1000:
        return "idle"
    return None


class SessionBook(Book[SessionHeader]):
    """The worker's open sessions: headers and turn ids (with sizes) per session,
    in arrival order."""

    def __init__(self, limits: SessionLimits) -> None:
        super().__init__()
        self.limits = limits

    def add(self, header: SessionHeader, turn: Turn, *, now_ms: int, size: int) -> AddOutcome:
        """Apply one turn (the caller writes the table when ``added`` and deletes
        the ids left in :attr:`evicted`)."""
        ids = self.item_ids.setdefault(header.session_id, {})
        if turn.turn_id in ids:
            return "duplicate"
        if header.state == "closed":  # a new turn after closing: the session resumes
            header.state, header.resumed, header.closed_ms = "open", True, None
        ids[turn.turn_id] = size
        header.turns += 1
        header.bytes += size
        header.last_ms = now_ms
        header.flagged = header.flagged or turn.flagged
        self._evict_past_caps(header, ids)
        return "added"

    def _evict_past_caps(self, header: SessionHeader, ids: dict[str, int]) -> None:
        limits = self.limits
        while len(ids) > 2 and (len(ids) > limits.max_turns or header.bytes > limits.max_bytes):
            oldest_after_first = list(ids)[1]
            header.bytes -= ids.pop(oldest_after_first)
            header.dropped += 1
            self.evicted.append(oldest_after_first)


def recount(header: SessionHeader, ids: dict[str, int]) -> None:
    """An open session's counts from the turns the recovered table holds."""
    header.turns = max(header.turns, len(ids) + header.dropped)
    header.bytes = sum(ids.values())
