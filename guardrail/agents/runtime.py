"""The worker's runtime: the Faust app, what its agents share, and the one
place that releases it all on stop.

    runtime = build_app(load_settings())   # agents/app.py wires a WorkerRuntime
    run_worker(runtime)                    # Faust calls runtime.close() while stopping
    await runtime.close()                  # or by hand (tests, embedding); idempotent

This module imports none of the agent modules (``judging``, ``windows``,
``web``): they import :class:`WorkerRuntime` from here, and ``app`` imports
them, so there is no import circle.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .rates_view import RatesView
from ..config.settings import Settings
from ..stream.alerts import AlertDispatcher
from ..stream.processing import MessageJudge
from ..stream.telemetry import Telemetry

__all__ = ["WorkerRuntime", "GuardrailApp", "ALERT_DRAIN_SECONDS", "EXIT_CONFIG_ERROR"]

log = logging.getLogger("guardrail.worker")

#: Longest wait for alert deliveries in flight on stop; never more than a
#: quarter of ``stop_deadline_seconds``, which also has to cover the judging
#: agent's drain and Faust's own stop (commits, leaving the group).
ALERT_DRAIN_SECONDS = 10.0

#: The worker's exit code after a judge configuration error (``EX_CONFIG`` of
#: sysexits.h): a supervisor should not restart it in a loop, someone must fix
#: the setting the log line names.
EXIT_CONFIG_ERROR = 78


#: How long a stop waits for the OTLP exporter to send what it holds.
EXPORT_FLUSH_SECONDS = 1.0

#: How long a stop during start-up waits for the start of the rates view and
#: the services (each only creates its background task) before stopping them.
START_WAIT_SECONDS = 2.0


@dataclass(eq=False)
class WorkerRuntime:
    """The Faust app plus the objects its agents share, started and stopped as one.

    **Start.** :func:`~guardrail.agents.app.build_app` creates everything
    with no network I/O: the Faust app, the evaluator (the judge opens its
    HTTP sessions on first use; the judgment cache, SQLite when ``cache_path``
    is set, is opened here), the alert dispatcher and the telemetry, then
    registers the agents and pages. The
    Faust worker then starts the app's services in this order: sensors,
    producer, *the runtime's stop hook*, web server, consumer, agents,
    conductor, tables.

    **Stop** (SIGTERM/SIGINT; the worker's ``stop_deadline_seconds`` bounds it
    all). Faust first stops fetching and stops the tables, then stops the
    services in reverse start order:

    1. agents — the judging agent drains its in-flight batches, which still
       need the judge and the producer, and acks them;
    2. consumer — commits the acked offsets, leaves the group; web server;
    3. the stop hook → :meth:`close`: nothing judges or counts any more, so no
       new alert can appear and the judge is no longer needed, while the
       producer is still up for the alerts topic;
    4. producer — stops (flushing), then the sensors.

    The runtime's own :meth:`start` is a Faust task: it runs once the worker
    is up (tables recovered) and starts the group's rates view
    (:class:`~guardrail.agents.rates_view.RatesView`, behind ``/rates``), a
    changelog follower that runs beside the agents until :meth:`close`.

    :meth:`close` therefore, in this order: stops the rates view (nothing
    after it needs the view) and closes its consumer; waits (bounded) for alert
    deliveries in flight — topic write and webhook POST with its retries — and
    logs each alert still unfinished as lost (id, metric, group; never output
    text); closes the evaluator (judge HTTP sessions and the cache); flushes
    the producer buffer. A failing step is logged and does not skip the rest.

    **Stop on a configuration error.** :meth:`stop_on_config_error` (called
    by the judging agent once it has cancelled every unacked batch) logs the
    one-line error, records :data:`EXIT_CONFIG_ERROR` in :attr:`exit_code` and
    calls :attr:`request_stop`, which the runner sets to the same stop a
    SIGTERM starts; the process then exits with that code.
    """

    app: Any  # GuardrailFaustApp; Any keeps stand-ins usable in unit tests
    settings: Settings
    telemetry: Telemetry
    message_judge: MessageJudge
    dispatcher: AlertDispatcher
    state: dict[str, object] = field(default_factory=dict)
    #: The whole group's window counts (``/rates``); None: only the local table.
    rates_view: RatesView | None = None
    #: More background services (async ``start()`` / ``stop()``), started after
    #: the rates view and stopped right after it, in reverse: the review
    #: page's topic followers (:mod:`.review`).
    services: list[Any] = field(default_factory=list)
    #: Starts the worker's stop from inside (set by ``run_worker``).
    request_stop: Callable[[], None] | None = None
    #: Why the worker stops on its own (None: it runs until a signal).
    exit_code: int | None = None
    _closing: asyncio.Future[None] | None = field(default=None, init=False, repr=False)
    _starting: asyncio.Future[None] | None = field(default=None, init=False, repr=False)

    def stop_on_config_error(self, exc: Exception) -> None:
        """Log ``exc`` (one line naming the setting) and stop the worker, once."""
        self._stop_with(EXIT_CONFIG_ERROR, f"{exc}. Stopping with exit code "
                        f"{EXIT_CONFIG_ERROR}; nothing of the batch was acked, it is judged "
                        "again once the setting is fixed")

    def stop_on_fatal(self, why: str, exit_code: int) -> None:
        """Log ``why`` and stop the worker with ``exit_code``, once: what was not acked
        is read again when it starts again."""
        self._stop_with(exit_code, f"{why}. Stopping with exit code {exit_code}; what was "
                        "not acked is read again on the next start")

    def _stop_with(self, exit_code: int, line: str) -> None:
        if self.exit_code is not None:
            return
        self.exit_code = exit_code
        log.error("%s", line)
        # Faust's stop waits until every message handed to a stream is acked
        # (stream_wait_empty), and the cancelled batches never will be: without
        # the wait the consumer commits what was acked, and no more.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Faust warns on any late reconfiguration
            self.app.conf.stream_wait_empty = False
        if self.request_stop is not None:
            self.request_stop()

    def judge_paused(self) -> bool:
        """True while the judging side waits out a judge outage (``/health`` 503)."""
        return bool(self.telemetry.paused._value.get() == 1)

    @property
    def alert_drain_seconds(self) -> float:
        """How long :meth:`close` waits for alert deliveries in flight."""
        return min(ALERT_DRAIN_SECONDS, self.settings.worker.stop_deadline_seconds / 4)

    async def start(self) -> None:
        """Start the rates view and the services (Faust runs this as a task once
        the worker is up). A stop during start-up (SIGTERM as the app starts)
        can begin before this runs: nothing more is started once it has."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        first = [self.rates_view] if self.rates_view is not None else []
        for service in [*first, *self.services]:
            if self._closing is not None:
                return  # not started: nothing to stop
            await service.start()

    async def close(self) -> None:
        """Deliver or report the alerts in flight, close the evaluator, flush the
        producer. Idempotent: later and concurrent calls wait for the first."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        # Shielded: a caller cancelled while waiting must not cut the close short.
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        log.info("runtime closing: %d alert deliveries in flight (waiting up to %.1fs)",
                 self.dispatcher.in_flight, self.alert_drain_seconds)
        if self._starting is not None and not self._starting.done():
            # Stopped while starting: what the start began is stopped below, once
            # it is started (a follower started after its stop ran for good).
            await asyncio.wait({self._starting}, timeout=START_WAIT_SECONDS)
        if self.rates_view is not None:
            await self._step("stopping the rates view", self.rates_view.stop)
        for service in reversed(self.services):
            await self._step(f"stopping {type(service).__name__}", service.stop)
        await self._step("delivering alerts", self._drain_alerts)
        await self._step("closing the evaluator", self.message_judge.evaluator.aclose)
        await self._step("closing the schema registry client", self.message_judge.close_registry)
        exporter = self.message_judge.exporter
        if exporter is not None:  # what it still holds is sent, within a bound
            # Briefly: a stop must fit in a few seconds even with the endpoint down.
            await self._step("flushing the OTLP evaluation exporter",
                             lambda: exporter.aclose(timeout_s=EXPORT_FLUSH_SECONDS))
        await self._step("flushing the producer", self.app.flush_producer)
        log.info("runtime closed")

    async def _step(self, what: str, step: Any) -> None:
        try:
            await step()
        except Exception:  # the later steps still matter
            log.exception("runtime close: %s failed", what)

    async def _drain_alerts(self) -> None:
        await self.dispatcher.drain(self.alert_drain_seconds)
        # Stop what is left: retrying on while the producer stops would only fail later.
        lost = self.dispatcher.cancel()
        if not lost:
            return
        log.error("%d alert(s) not delivered within %.1fs of stopping; lost:", len(lost),
                  self.alert_drain_seconds)
        for alert in lost:  # examples carry output excerpts: never logged
            log.error("lost alert %s: metric=%s group=%s window=%s", alert.get("alert_id"),
                      alert.get("metric"), alert.get("group"), alert.get("window"))


#: Deprecated name of :class:`WorkerRuntime`, kept for one release.
GuardrailApp = WorkerRuntime
