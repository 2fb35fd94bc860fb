"""Run the Faust worker: create topics first, then serve until a signal."""

from __future__ import annotations

import asyncio
import logging

from faust import Worker

from ..kafka.topics import ensure_topics
from .app import GuardrailApp

__all__ = ["run_worker"]

log = logging.getLogger("guardrail.worker")


def run_worker(runtime: GuardrailApp, *, loglevel: str = "info") -> None:
    """Create/verify topics, then run the worker in the foreground."""
    settings = runtime.settings
    asyncio.run(ensure_topics(settings))
    log.info("guardrail worker: %s -> %s (dlq %s, alerts %s), judge %s",
             settings.input_topic, settings.results_topic, settings.dlq_topic,
             settings.alerts_topic, settings.judge_model)
    # A fresh loop: asyncio.run() above closed its own.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = Worker(runtime.app, loglevel=loglevel, loop=loop, redirect_stdouts=False)
    worker.execute_from_commandline()
