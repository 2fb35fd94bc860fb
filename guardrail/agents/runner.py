"""Run the Faust worker: create topics first, then serve until a signal."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from faust import Worker

from ..kafka.topics import ensure_topics
from .runtime import WorkerRuntime

__all__ = ["run_worker", "GuardrailWorker"]

log = logging.getLogger("guardrail.worker")

class GuardrailWorker(Worker):
    """Faust's worker with a deadline on shutdown: with the broker gone, Faust
    would wait on it forever; past ``stop_deadline_seconds`` the process exits."""

    stop_deadline: float = 45.0

    def _on_sigterm(self) -> None:
        self._arm_stop_deadline()
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._arm_stop_deadline()
        super()._on_sigint()

    def _arm_stop_deadline(self) -> None:
        def expire() -> None:
            log.error("shutdown exceeded %.0fs; exiting now (unfinished messages are "
                      "redelivered)", self.stop_deadline)
            logging.shutdown()
            os._exit(1)

        timer = threading.Timer(self.stop_deadline, expire)
        timer.daemon = True
        timer.start()


def run_worker(runtime: WorkerRuntime, *, loglevel: str = "info") -> None:
    """Create/verify topics, then run the worker in the foreground."""
    settings = runtime.settings
    asyncio.run(ensure_topics(settings.kafka))
    log.info("guardrail worker: %s -> %s (dlq %s, alerts %s), judge %s",
             settings.kafka.input_topic, settings.kafka.results_topic, settings.kafka.dlq_topic,
             settings.kafka.alerts_topic, settings.judge.model)
    # A fresh loop: asyncio.run() above closed its own.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = GuardrailWorker(runtime.app, loglevel=loglevel, loop=loop, redirect_stdouts=False)
    worker.stop_deadline = settings.worker.stop_deadline_seconds
    worker.execute_from_commandline()
