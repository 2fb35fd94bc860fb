"""AI agents' runs, assembled from their OTLP spans and judged as one case each:
pure reading, assembly and rendering, no Kafka (the Faust wiring is in
:mod:`guardrail.agents.run_assembly`)::

    from guardrail.assembly.runs import run_case, run_spans_of

    spans = [s for record in records for s in run_spans_of(request_from_bytes(record, {}))]
    case = run_case([s for s in spans if s.trace_id == trace_id], status="complete")
    print(case["trajectory"])

- :mod:`.spans`: one span as a :class:`RunSpan` (``read_run_span``), and whether a
  span belongs to a run by itself (``run_signal``);
- :mod:`.steps` and :mod:`.trajectory`: the run's steps and the judged
  ``trajectory`` text, also from raw chat messages;
- :mod:`.case`: the run's case JSON (``run_case``) and its root span.

The names are imported on first use: :mod:`guardrail.config.settings` imports this
package's settings, and plain configuration should not load protobuf.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .case import root_span, run_case
    from .spans import AGENT_SCOPES, RunSpan, SpanKind, read_run_span, run_signal, run_spans_of
    from .steps import Step, has_tool_activity, steps_from_messages, steps_from_spans
    from ...judging.trajectory import render_trajectory

__all__ = ["RunSpan", "SpanKind", "AGENT_SCOPES", "run_signal", "read_run_span", "run_spans_of",
           "Step", "steps_from_spans", "steps_from_messages", "has_tool_activity",
           "render_trajectory", "run_case", "root_span"]

_HOMES = {"RunSpan": "spans", "SpanKind": "spans", "AGENT_SCOPES": "spans",
          "run_signal": "spans", "read_run_span": "spans", "run_spans_of": "spans",
          "Step": "steps", "steps_from_spans": "steps", "steps_from_messages": "steps",
          "has_tool_activity": "steps", "render_trajectory": "trajectory",
          "run_case": "case", "root_span": "case"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
