"""The run assembler: spans of AI agents' runs in, one judged case per run out.

The judging agent sends every span of an agent run (see
:mod:`guardrail.assembly.runs.routing`) to the internal topic ``<app_id>-run-spans``,
keyed by trace id; the generic assembler (:mod:`.assembly`) keeps each open
run in the table ``agent-runs`` (``h/<trace>`` its header, ``s/<trace>/<span>``
each span) with the run rules of :class:`guardrail.assembly.runs.gathering.RunGathering`:
a span is added once, a span for a run already judged is counted as late, a
run is judged once when complete, idle or truncated (records marked by the
header ``guardrail-run``: ``span``, ``tick``, ``done``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..formats import CaseDecoder
from ..assembly.runs.gathering import RunGathering
from ..stream.processing import MessageJudge
from .assembly import Assembler, register_assembly

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "run_spans_topic", "RUN_TABLE", "RunAssembler", "assembled_judge"]

RUN_TABLE = "agent-runs"


def run_spans_topic(app_id: str) -> str:
    """The internal topic of runs' spans, ticks and done records."""
    return f"{app_id}-run-spans"


class RunAssembler(Assembler):
    """The assembler with the run rules (what the tests and the runtime hold)."""

    def __init__(self, runtime: WorkerRuntime, table: Any, topic: str) -> None:
        super().__init__(RunGathering(runtime.settings.runs, runtime.telemetry), table, topic)
        self.telemetry = runtime.telemetry
        self.limits = self.gathering.limits  # type: ignore[attr-defined]


def assembled_judge(runtime: WorkerRuntime, *, session_turns: bool = True) -> MessageJudge:
    """A message judge for the cases an assembler makes (runs, sessions): the
    worker's evaluator, sampling, budget, review and exporter, reading case JSON;
    a run is a turn of its session too (``session_turns``), a session is not."""
    main, s = runtime.message_judge, runtime.settings
    return MessageJudge(main.evaluator, worker=s.worker, kafka=s.kafka, windows=s.windows,
                        telemetry=main.telemetry, sampler=main.sampler, budget=main.budget,
                        decoder=CaseDecoder(),
                        conversation_max_chars=s.inputs.conversation_max_chars,
                        exporter=main.exporter, review=main.review,
                        session_turns_topic=main.session_turns_topic if session_turns else None)


def register(runtime: WorkerRuntime) -> None:
    """Add the run table, the assembling agent and its sweep (``agent_runs`` with
    ``input_format=otlp`` only)."""
    gathering = RunGathering(runtime.settings.runs, runtime.telemetry)
    runtime.state["run_assembler"] = register_assembly(
        runtime, gathering, topic_name=run_spans_topic(runtime.settings.kafka.app_id),
        table_name=RUN_TABLE, agent_name="guardrail.runs", judge=assembled_judge(runtime))
