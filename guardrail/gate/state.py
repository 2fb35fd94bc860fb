"""What the gate keeps of each input record until its offset is committed: the
decision, the records judging it made, and where it stands. Kept durably (the
worker's gate table, :mod:`guardrail.agents.gate`), so a record read again after a
crash or a rebalance is decided from what was decided, never judged again::

    entry = Entry("decided", decision, outgoing=records)
    value = entry.to_dict()              # JSON-ready: bytes as base64
    Entry.from_dict(value).state         # "decided"

States, in the order a record goes through them:

- ``decided``: judged; its decision and records kept before anything is forwarded.
- ``forwarded``: on the approved topic, or on the held topic with nobody to review it.
- ``parked``: its key is blocked by a held record (``gate_hold_blocks_key``): it
  waits, with the record itself (``record``), for a reviewer.
- ``held``: on the held topic, waiting for a reviewer's answer (review on);
  ``held_at`` is the held copy's partition and offset, which a release reads it
  back from, and ``key`` its key.
- ``blocking``: ``held``, and blocking its key until a reviewer releases or keeps it.
- ``released`` / ``confirmed``: a reviewer's answer on a held record, kept so that a
  repeated answer changes nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..stream.envelope import Source
from ..stream.processing import Outgoing, RawMessage
from .decision import Decision

__all__ = ["Entry", "State", "entry_key", "parse_entry_key", "encode_outgoing",
           "decode_outgoing", "encode_raw", "decode_raw"]

State = Literal["decided", "forwarded", "parked", "held", "blocking", "released", "confirmed"]


def entry_key(partition: int, offset: int) -> str:
    """The table key of the input record at ``partition``/``offset``."""
    return f"{partition}/{offset}"


def parse_entry_key(key: str) -> tuple[int, int]:
    partition, _, offset = key.partition("/")
    return int(partition), int(offset)


@dataclass(frozen=True)
class Entry:
    state: State
    decision: Decision
    outgoing: tuple[Outgoing, ...] = ()
    record: RawMessage | None = None
    held_at: tuple[int, int] | None = None
    by: str | None = field(default=None)
    key: bytes | None = None
    #: The DLQ records of a record decided in a transaction (``gate_transactional``),
    #: written with its place, not with its results.
    dlq: tuple[Outgoing, ...] = ()

    def slim(self) -> Entry:
        """What a held entry keeps once its offset is committed: no records to
        publish, no evidence (the held copy carries it)."""
        d = self.decision
        return replace(self, outgoing=(), record=None, dlq=(),
                       decision=replace(d, held_by=()))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"state": self.state, "decision": self.decision.to_dict(),
                                "outgoing": [encode_outgoing(o) for o in self.outgoing]}
        if self.record is not None:
            data["record"] = encode_raw(self.record)
        if self.held_at is not None:
            data["held_at"] = list(self.held_at)
        if self.by is not None:
            data["by"] = self.by
        if self.key is not None:
            data["key"] = _b64(self.key)
        if self.dlq:
            data["dlq"] = [encode_outgoing(o) for o in self.dlq]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        record = data.get("record")
        held_at = data.get("held_at")
        return cls(state=data["state"], decision=Decision.from_dict(data["decision"]),
                   outgoing=tuple(decode_outgoing(o) for o in data.get("outgoing", ())),
                   record=decode_raw(record) if record else None,
                   held_at=(int(held_at[0]), int(held_at[1])) if held_at else None,
                   by=data.get("by"), key=_unb64(data.get("key")),
                   dlq=tuple(decode_outgoing(o) for o in data.get("dlq", ())))


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _headers(pairs: Any) -> list[list[str | None]]:
    return [[name, _b64(value)] for name, value in pairs]


def _unheaders(pairs: Any) -> tuple[tuple[str, bytes | None], ...]:
    return tuple((name, _unb64(value)) for name, value in pairs)


def encode_outgoing(out: Outgoing) -> dict[str, Any]:
    return {"topic": out.topic, "key": _b64(out.key), "value": _b64(out.value),
            "timestamp_ms": out.timestamp_ms, "headers": _headers(out.headers),
            "partition": out.partition}


def decode_outgoing(data: Mapping[str, Any]) -> Outgoing:
    return Outgoing(data["topic"], _unb64(data["key"]), _unb64(data["value"]) or b"",
                    timestamp_ms=data.get("timestamp_ms"),
                    headers=_unheaders(data.get("headers", ())),
                    partition=data.get("partition"))


def encode_raw(raw: RawMessage) -> dict[str, Any]:
    s = raw.source
    return {"value": _b64(raw.value), "topic": s.topic, "partition": s.partition,
            "offset": s.offset, "timestamp_ms": s.timestamp_ms, "key": _b64(s.key),
            "headers": _headers(s.headers)}


def decode_raw(data: Mapping[str, Any]) -> RawMessage:
    source = Source(data["topic"], int(data["partition"]), int(data["offset"]),
                    timestamp_ms=data.get("timestamp_ms"), key=_unb64(data.get("key")),
                    headers=_unheaders(data.get("headers", ())))
    return RawMessage(value=_unb64(data.get("value")), source=source)
