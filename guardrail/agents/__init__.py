"""Faust wiring of the streaming guardrail (the judging core lives in ``guardrail``).

    runtime = build_app(load_settings())   # a WorkerRuntime
    run_worker(runtime)            # blocks until SIGTERM / SIGINT; then runtime.close()
"""

from .app import build_app, faust_options
from .runner import run_worker
from .runtime import GuardrailApp, WorkerRuntime

__all__ = ["WorkerRuntime", "GuardrailApp", "build_app", "faust_options", "run_worker"]
