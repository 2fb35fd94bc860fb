"""AI agents' runs, assembled from their OTLP spans and judged as one case each:
pure reading, assembly and rendering, no Kafka (the Faust wiring is in
:mod:`guardrail.agents.run_assembly`)::

    from guardrail.assembly.runs import run_case, run_spans_of

    spans = [s for record in records for s in run_spans_of(request_from_bytes(record, {}))]
    case = run_case([s for s in spans if s.trace_id == trace_id], status="complete")
    print(case["trajectory"])

- :mod:`.spans`: one span as a :class:`RunSpan` (``read_run_span``), and whether a
  span belongs to a run by itself (``run_signal``);
- :mod:`.steps`: the run's steps from its spans (the judged ``trajectory`` text
  and the steps of raw chat messages are the judging core's,
  :mod:`guardrail.judging.trajectory`);
- :mod:`.routing`: which spans belong to a run; :mod:`.assembly` and
  :mod:`.gathering`: a run's bookkeeping while its spans arrive, as one kind of whole;
- :mod:`.case`: the run's case JSON (``run_case``) and its root span.

The names are imported on first use: :mod:`guardrail.config.settings` imports this
package's settings, and plain configuration should not load protobuf.
It reads spans as the input formats decode them (:mod:`guardrail.formats`), never
the stream or Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .case import root_span, run_case
    from .settings import RunSettings
    from .spans import AGENT_SCOPES, RunSpan, SpanKind, read_run_span, run_signal, run_spans_of
    from .steps import Step, has_tool_activity, steps_from_messages, steps_from_spans
    from ...judging.trajectory import render_trajectory

__all__ = ["RunSpan", "SpanKind", "AGENT_SCOPES", "run_signal", "read_run_span", "run_spans_of",
           "Step", "steps_from_spans", "steps_from_messages", "has_tool_activity",
           "render_trajectory", "run_case", "root_span", "RunSettings"]

_HOMES = {"RunSpan": ".spans", "SpanKind": ".spans", "AGENT_SCOPES": ".spans",
          "run_signal": ".spans", "read_run_span": ".spans", "run_spans_of": ".spans",
          "Step": ".steps", "steps_from_spans": ".steps", "steps_from_messages": ".steps",
          "has_tool_activity": ".steps", "render_trajectory": "guardrail.judging.trajectory",
          "run_case": ".case", "root_span": ".case", "RunSettings": ".settings"}

__getattr__ = lazy_exports(__name__, _HOMES)
