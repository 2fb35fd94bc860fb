"""The streaming worker: Faust's agents wired around the stream contract
(:mod:`guardrail.stream`), with everything a production consumer needs around them::

    runtime = build_app(load_settings())   # a WorkerRuntime
    run_worker(runtime)            # blocks until SIGTERM / SIGINT; then runtime.close()

(Faust calls its stream consumers agents; an AI agent's run is data, judged in
:mod:`guardrail.assembly.runs`.)

- :mod:`.app` — the application: the judging agent, the counting agent, the
  assemblers, the pages; :mod:`.runtime` — what they share and the one stop;
  :mod:`.runner` — topics created first, then served until a signal.
- :mod:`.judging` — the judging agent: at-least-once, bounded, acked in order.
- :mod:`.windows` — the window table counted from judgment events;
  :mod:`.window_cells` and :mod:`.rates_view` — its cells as the changelog records
  them, read back for the whole group (``/rates``, ``guardrail rates``).
- :mod:`.assembly`, :mod:`.run_assembly` and :mod:`.session_assembly` — agent runs
  and sessions gathered across partitions and workers, judged as wholes.
- :mod:`.sampling` — the sample and the judge budget, with the worker's tables.
- :mod:`.consumer`, :mod:`.lost_records` and :mod:`.transport` — Faust's consumer
  and transport, corrected to commit only what was processed.
- :mod:`.web`, :mod:`.dashboard`, :mod:`.review`, :mod:`.agreement`,
  :mod:`.liveness` and :mod:`.kafka_trouble` — the worker's pages and health.

It imports the wings below it to compose them, and the settings; nothing imports
it but the command line (the demo starts it as a process).
"""

from .app import build_app, faust_options
from .runner import run_worker
from .runtime import GuardrailApp, WorkerRuntime

__all__ = ["WorkerRuntime", "GuardrailApp", "build_app", "faust_options", "run_worker"]
