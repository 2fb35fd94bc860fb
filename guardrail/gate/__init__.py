"""The gate: forward what was judged safe, hold the rest, in order, fail-closed.

In gate mode (``gate: true``) every input record ends in exactly one place: the
approved topic (as it came, plus ``guardrail.*`` headers), the held topic (with
the reason and the metrics that held it), or, when it cannot be read at all, the
dead-letter topic::

    decision = decide(record_judgment, GatePolicy.from_settings(gate, review, evaluation))
    out = forwarded(raw, decision, approved_topic=..., held_topic=...)
    order = ReleaseOrder("key")      # which decided records may leave now

- :mod:`.settings` — the ``gate`` settings group; :func:`check_gate` — settings that
  would let a record through unjudged stop the worker at start.
- :mod:`.decision` — where a record goes, from what judging made of its cases.
- :mod:`.records` — the forwarded record and its headers.
- :mod:`.order` — the order decided records leave in (``gate_order``), and keys
  blocked by a held record.
- :mod:`.state` — what is kept of a record until its offset is committed, so a
  record read again is decided as before.

Pure decisions and bookkeeping over the stream's records: it imports the stream
contract, the judging core and the review settings, never a Kafka client or
Faust (the worker's wiring is :mod:`guardrail.agents.gate`).
"""

from __future__ import annotations

from .decision import HOLD_REASONS, Decision, GatePolicy, HoldReason, decide
from .order import Release, ReleaseOrder, Ticket
from .records import GATE_HEADERS, forwarded, header, source_of
from .settings import GateSettings, check_gate, gate_topics
from .state import Entry, entry_key, parse_entry_key

__all__ = ["GateSettings", "check_gate", "gate_topics", "Decision", "GatePolicy",
           "HoldReason", "HOLD_REASONS", "decide", "forwarded", "GATE_HEADERS", "header",
           "source_of", "Release", "ReleaseOrder", "Ticket", "Entry", "entry_key",
           "parse_entry_key"]
