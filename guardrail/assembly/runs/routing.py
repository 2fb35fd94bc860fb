"""Which spans belong to an agent run: decided per span, from what it and its
trace have shown so far, without waiting.

A plain chat span must be judged as fast as before, yet nothing tells in
advance whether an agent span of its trace will follow (or whether the trace's
root is exported at all). So a span goes to run assembly when it says so itself
(:func:`~.spans.run_signal`: an agent or tool span, agent attributes, an agent
framework's instrumentation scope) or when its trace already did, here or
earlier in the same record; every other span is judged on its own as before::

    router = RunRouter()
    for trace_id, attrs, scope in spans_of_record:
        router.see(trace_id, attrs, scope)          # first pass: the record's signals
    router.claims(trace_id)                         # second pass: route each span

The memory of agent traces is bounded (least recently seen forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from .spans import RunSpan, read_run_span, run_signal

__all__ = ["RunRouter", "DEFAULT_REMEMBERED_TRACES"]

#: Agent traces remembered per worker: ~100 bytes each.
DEFAULT_REMEMBERED_TRACES = 100_000


class RunRouter:
    """Remembers the traces known to be agent runs and routes their spans."""

    def __init__(self, *, remembered: int = DEFAULT_REMEMBERED_TRACES) -> None:
        self._traces: OrderedDict[str, None] = OrderedDict()
        self._remembered = remembered

    def see(self, trace_id: str, attrs: Mapping[str, Any], scope_name: str) -> None:
        """Note a span's signal: its trace becomes an agent run when it has one."""
        if trace_id in self._traces:
            self._traces.move_to_end(trace_id)
        elif run_signal(attrs, scope_name):
            self._traces[trace_id] = None
            if len(self._traces) > self._remembered:
                self._traces.popitem(last=False)

    def claims(self, trace_id: str) -> bool:
        """Does this trace's span go to run assembly?"""
        return trace_id in self._traces

    @staticmethod
    def read(span: Any, attrs: Mapping[str, Any], resource: Mapping[str, Any],
             scope_name: str, labels: Mapping[str, Sequence[str]], *,
             conversation_id: str | None = None) -> RunSpan | None:
        """A claimed span as a :class:`~.spans.RunSpan` (None: its ids are invalid)."""
        return read_run_span(span, dict(attrs), dict(resource), scope_name, labels,
                             conversation_id=conversation_id)
