"""Sessions held by the gate (``gate_session_hold``): a conversation judged UNSAFE
as a whole holds its later turns (reason ``session_unsafe``) until a reviewer
releases the session's judgment.

The session assembler writes each UNSAFE session judgment to the compacted topic
``<app_id>-gate-sessions`` (:func:`hold_record`, key: the session id, the latest
judgment wins); every worker follows it into a :class:`SessionHolds`, with the
reviewers' answers from the labels topic::

    holds = SessionHolds()
    holds.apply(key, value)                 # a record of the gate-sessions topic
    "conv-42" in holds                      # True: its later turns are held
    holds.answered(answer)                  # a GateAnswer releasing the session
    "conv-42" in holds                      # False: its turns are gated one by one again

A release is for the session: its later judgments (which read the same
transcript) do not hold it again; each turn is still judged and gated on its
own. Turns already judged when the session's judgment came are not recalled: the
hold applies to the turns decided after it is known.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..review.records import GateAnswer

__all__ = ["SessionHolds", "hold_record", "held_sessions_topic"]


def held_sessions_topic(app_id: str) -> str:
    """The compacted topic of the sessions whose later turns are held."""
    return f"{app_id}-gate-sessions"


def hold_record(session_id: str, case_id: str, held_by: Any) -> tuple[bytes, bytes]:
    """``(key, value)`` of the hold a session judgment UNSAFE puts on its session."""
    return session_id.encode(), orjson.dumps({"session_id": session_id, "case_id": case_id,
                                              "held_by": list(held_by)})


class SessionHolds:
    """The sessions held now (a :class:`~guardrail.kafka.changelog.RecordSink` of the
    gate-sessions topic; answers added by :meth:`answered`)."""

    def __init__(self) -> None:
        #: session id -> the case id of the session judgment that holds it.
        self.holds: dict[str, str] = {}
        #: Sessions a reviewer released.
        self.released: set[str] = set()
        self.skipped = 0

    def apply(self, key: bytes | None, value: bytes | None, *, where: str = "") -> None:
        if value is None:
            if key is not None:
                self.holds.pop(key.decode("utf-8", "replace"), None)
            return
        try:
            data = orjson.loads(value)
            self.holds[str(data["session_id"])] = str(data["case_id"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.skipped += 1

    def answered(self, answer: GateAnswer) -> None:
        """A reviewer's answer on a held session's judgment."""
        session_id = answer.gate.session_id
        if answer.gate.kind == "session" and answer.answer == "release" and session_id:
            self.released.add(session_id)

    def __contains__(self, session_id: object) -> bool:
        return str(session_id) in self.holds and str(session_id) not in self.released

    def __len__(self) -> int:
        return sum(1 for session_id in self.holds if session_id not in self.released)
