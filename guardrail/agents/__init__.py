"""Faust wiring of the streaming guardrail (the judging core lives in ``guardrail``).

    runtime = build_app(load_settings())
    run_worker(runtime)            # blocks until SIGTERM / SIGINT
"""

from .app import GuardrailApp, build_app, faust_options
from .runner import run_worker

__all__ = ["GuardrailApp", "build_app", "faust_options", "run_worker"]
