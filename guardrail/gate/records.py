"""The records the gate forwards: the input record as it came (key, value bytes,
its own headers, its timestamp, the same partition number) plus ``guardrail.*``
headers that say what was decided::

    out = forwarded(raw, decision, approved_topic="model-outputs-approved",
                    held_topic="model-outputs-held")
    dict(out.headers)["guardrail.verdict"]       # b"SAFE"
    dict(out.headers)["guardrail.source"]        # b"model-outputs/0/42"

Headers on every forwarded record: ``guardrail.case_id`` (the case's id; a record
of many cases: its coordinates), ``guardrail.verdict`` and ``guardrail.source``
(``topic/partition/offset`` of the input, what a downstream consumer drops a
duplicate by). On a held record also ``guardrail.hold_reason`` and
``guardrail.held_by`` (JSON: the metrics and evidence that held it); on one
released by a reviewer ``guardrail.released_by``. A header of the input with one
of these names is replaced, so a producer cannot forge them.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..stream.processing import Outgoing, RawMessage
from .decision import Decision

__all__ = ["forwarded", "GATE_HEADERS", "source_of", "header"]

#: The headers the gate writes (an input's own headers of these names are dropped).
GATE_HEADERS = ("guardrail.case_id", "guardrail.verdict", "guardrail.source",
                "guardrail.hold_reason", "guardrail.held_by", "guardrail.released_by")
#: Most ``held_by`` entries a header carries (the rest are counted, not listed).
HELD_BY_ENTRIES = 20


def source_of(raw: RawMessage) -> str:
    """``topic/partition/offset`` of the input record."""
    s = raw.source
    return f"{s.topic}/{s.partition}/{s.offset}"


def forwarded(raw: RawMessage, decision: Decision, *, approved_topic: str, held_topic: str,
              released_by: str | None = None) -> Outgoing:
    """The record ``raw`` forwarded where ``decision`` (or a reviewer's release) sends it."""
    approved = decision.approved or released_by is not None
    case_id = decision.case_ids[0] if len(decision.case_ids) == 1 else source_of(raw)
    added: list[tuple[str, bytes]] = [("guardrail.case_id", case_id.encode()),
                                      ("guardrail.verdict", decision.verdict.encode()),
                                      ("guardrail.source", source_of(raw).encode())]
    if not approved:
        added += [("guardrail.hold_reason", (decision.reason or "").encode()),
                  ("guardrail.held_by", _held_by(decision.held_by))]
    if released_by is not None:
        added += [("guardrail.hold_reason", (decision.reason or "").encode()),
                  ("guardrail.released_by", released_by.encode())]
    own = tuple((name, value) for name, value in raw.source.headers
                if name not in GATE_HEADERS)
    return Outgoing(approved_topic if approved else held_topic, raw.source.key,
                    raw.value if raw.value is not None else b"",
                    timestamp_ms=raw.source.timestamp_ms, headers=own + tuple(added),
                    partition=raw.source.partition)


def _held_by(entries: tuple[dict[str, Any], ...]) -> bytes:
    listed = list(entries[:HELD_BY_ENTRIES])
    if len(entries) > HELD_BY_ENTRIES:
        listed.append({"more": len(entries) - HELD_BY_ENTRIES})
    return orjson.dumps(listed)


def header(headers: Any, name: str) -> bytes | None:
    """The last value of header ``name`` in ``(name, value)`` pairs (None: absent)."""
    found = None
    for key, value in headers or ():
        if key == name:
            found = value
    return found
