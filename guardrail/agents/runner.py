"""Run the Faust worker: create topics first, then serve until a signal, or
until the runtime asks to stop (a judge configuration error: exit code 78).

    run_worker(build_app(load_settings()))   # raises SystemExit with the exit code
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from faust import Worker
from mode.utils.futures import maybe_cancel

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

    def stop_soon(self, exit_code: int = 1) -> None:
        """Stop as a SIGTERM would, started from inside (e.g. a configuration
        error); past the deadline the process exits with ``exit_code``."""
        if self._signal_stop_time:  # already stopping
            return
        self._arm_stop_deadline(exit_code)
        self._signal_stop_time = self.loop.time()
        self._signal_stop_future = asyncio.ensure_future(self._stop_from_inside())

    async def _stop_from_inside(self) -> None:
        await self.stop()
        maybe_cancel(self._starting_fut)  # as mode's own signal stop does

    def _arm_stop_deadline(self, exit_code: int = 1) -> None:
        def expire() -> None:
            log.error("shutdown exceeded %.0fs; exiting now (unfinished messages are "
                      "redelivered)", self.stop_deadline)
            logging.shutdown()
            os._exit(exit_code)

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
    runtime.request_stop = lambda: worker.stop_soon(runtime.exit_code or 1)
    try:
        worker.execute_from_commandline()
    except SystemExit:
        if runtime.exit_code is not None:  # stopped on its own: say why in the code
            raise SystemExit(runtime.exit_code) from None
        raise
