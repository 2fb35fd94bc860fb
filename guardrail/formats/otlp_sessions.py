"""Which conversation each span of an OTLP record is a turn of, also when only
some spans of its trace say so.

Instrumentations put the conversation id on some spans of a trace only: Langfuse
and OpenInference users tag the parent span of a turn, Pydantic AI its
``invoke_agent`` span, while the judged span is the model call beneath. So a span
without an id of its own takes the one its trace carries elsewhere in the same
record, else the one its trace carried in an earlier record (an earlier sibling
that said it, or a parent that ended before its children did)::

    conversations = TraceConversations(association_keys=("session_id",))
    conversations.resolve([("4bf9…", {"session.id": "chat-7"}),   # a parent span
                           ("4bf9…", {"gen_ai.operation.name": "chat"})])
    # ['chat-7', 'chat-7']
    conversations.resolve([("4bf9…", {})])                    # a later record
    # ['chat-7']

A child exported *before* the span that carries its trace's id (spans are
exported as they end, children first) cannot know it yet: it is judged as a
turn of no conversation. Agent runs do not have that gap: a run's case is made
once all its spans are in (:func:`guardrail.assembly.runs.run_case`).

The memory of traces is bounded, the least recently seen forgotten first (as
:class:`guardrail.assembly.runs.routing.RunRouter`'s).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from .otlp_conventions import (DEFAULT_ASSOCIATION_KEYS, conversation_id_attributes,
                               span_conversation_id)

__all__ = ["TraceConversations", "DEFAULT_REMEMBERED_CONVERSATIONS"]

#: Traces whose conversation id is remembered per decoder: a trace id and an
#: id of at most 200 characters, ~300 bytes each at most.
DEFAULT_REMEMBERED_CONVERSATIONS = 100_000


class TraceConversations:
    """Each span's conversation id, from its own attributes or its trace's."""

    def __init__(self, association_keys: Sequence[str] | None = None, *,
                 remembered: int = DEFAULT_REMEMBERED_CONVERSATIONS) -> None:
        keys = DEFAULT_ASSOCIATION_KEYS if association_keys is None else association_keys
        #: The attributes read, in order (see :mod:`.otlp_conventions`).
        self.names = conversation_id_attributes(tuple(keys))
        self._traces: OrderedDict[str, str] = OrderedDict()
        self._remembered = remembered

    def resolve(self, spans: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str | None]:
        """The conversation id of each ``(trace id, attributes)`` of one record, in
        order: the span's own; else the first one a span of its trace carries in
        this record; else the one remembered for its trace; else None."""
        own = [span_conversation_id(attrs, self.names) for _, attrs in spans]
        in_record: dict[str, str] = {}
        for (trace_id, _), found in zip(spans, own):
            if found is not None:
                in_record.setdefault(trace_id, found)
        for trace_id, found in in_record.items():
            self._remember(trace_id, found)
        return [found or in_record.get(trace_id) or self._recall(trace_id)
                for (trace_id, _), found in zip(spans, own)]

    def _remember(self, trace_id: str, conversation_id: str) -> None:
        self._traces[trace_id] = conversation_id
        self._traces.move_to_end(trace_id)
        if len(self._traces) > self._remembered:
            self._traces.popitem(last=False)

    def _recall(self, trace_id: str) -> str | None:
        found = self._traces.get(trace_id)
        if found is not None:
            self._traces.move_to_end(trace_id)
        return found
