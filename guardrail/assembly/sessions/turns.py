"""One turn of a session as the session assembler keeps it: pure data, no Kafka.

A turn is what one judged case (a chat turn, or an agent run) contributes to its
conversation: the user's message, the answer, an agent run's steps, and whether
its own verdict was flagged. Adding a turn is idempotent on ``turn_id`` (the
case id, span id or run id), and turns are ordered by their own start time, not
by arrival::

    turn = Turn(turn_id="c7", started_ms=1_700_000_000_000, user="Hi", answer="Hello!")
    Turn.from_bytes(turn.to_bytes()) == turn
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import orjson

__all__ = ["Turn"]


@dataclass(frozen=True)
class Turn:
    """One turn of a conversation."""

    #: The case id (span id, run id) of the turn: a redelivered turn changes nothing.
    turn_id: str
    #: The turn's own start time (event time), epoch ms: turns are ordered by it.
    started_ms: int
    #: The user's message of this turn ("" when the turn carried none).
    user: str = ""
    #: The assistant's answer.
    answer: str = ""
    #: An agent run's steps (its rendered trajectory: tool calls and fenced results).
    steps: str | None = None
    #: The turn's own verdict was UNSAFE (or unsure) on some metric.
    flagged: bool = False
    #: The metrics whose verdict flagged the turn (shown on the review page).
    flagged_metrics: tuple[str, ...] = ()
    #: Each metric's verdict on the turn (``safe``, ``unsafe``, ``error``): what a
    #: session of this one turn counts in the windows (its verdict stands for it).
    verdicts: dict[str, str] = field(default_factory=dict)
    trace_id: str | None = None
    span_id: str | None = None
    #: The turn's labels (model, model version, agent …).
    metadata: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if v not in (None, "", (), {}, False)}
        return orjson.dumps({"turn_id": self.turn_id, "started_ms": self.started_ms, **data})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Turn:
        try:
            data: Any = orjson.loads(raw)
            if not isinstance(data, dict):
                raise TypeError("not an object")
            if "flagged_metrics" in data:
                data["flagged_metrics"] = tuple(data["flagged_metrics"])
            # A newer release's fields are left out: the turn is still this one.
            return cls(**{k: v for k, v in data.items() if k in _FIELDS})
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"not a session turn: {exc}") from None


_FIELDS = frozenset(f.name for f in fields(Turn))
