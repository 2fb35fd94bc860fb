"""Things judged as a whole: items gathered by a key until the whole is due, then
judged as one case. Pure bookkeeping and rendering, no Kafka (the Faust wiring is
:mod:`guardrail.agents.assembly`)::

    book = Book()
    header = gathering.new_header("4bf9…", now_ms=1000)
    gathering.add(header, item, now_ms=1000, size=120)   # "added" | "duplicate" | ...
    gathering.due(header, now_ms=7000)                     # a status, or None

- :mod:`.base` — the generic assembler's state: :class:`Book` (headers and item
  indexes) and the :class:`Gathering` protocol one kind of whole implements.
- :mod:`.runs` — AI agents' runs, gathered from their OTLP spans by trace id.
- :mod:`.sessions` — conversations, gathered from their turns by conversation id,
  judged while they go on and when they go quiet.

It imports the judging core (a whole becomes a case) and the input formats (spans
are read as they decode), never the stream, Kafka or Faust.
"""

from __future__ import annotations

from .base import (RUN_SPAN_HEADERS, RUN_SPAN_KIND, SESSION_TURN_KIND, TURN_HEADERS,
                   AddOutcome, Book, Gathering, Header, State)

__all__ = ["Header", "Book", "Gathering", "AddOutcome", "State", "RUN_SPAN_KIND",
           "RUN_SPAN_HEADERS", "SESSION_TURN_KIND", "TURN_HEADERS"]
