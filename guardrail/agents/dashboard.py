"""The worker's ``/dashboard`` page: windowed unsafe rates per metric and
group, versions side by side, alerts where they fired, coverage, judge
errors and spend, rendered on the server (:mod:`guardrail.stream.dashboard`)::

    open http://127.0.0.1:6066/dashboard            # reloads itself every 5 s
    curl '127.0.0.1:6066/dashboard?refresh=0'       # no reload (screenshots)

Where the data comes from is pluggable: ``rows`` returns ``/rates`` rows
(this worker's window table by default; a fleet-wide source returning the
same row shape plugs in unchanged) and ``alerts`` returns alert dicts (by
default the recent alerts of this worker's dispatcher). Either may be a plain
function or a coroutine function::

    dashboard.register(runtime)                                  # this worker
    dashboard.register(runtime, rows=fleet_rows, rates_scope="all workers")

In gate mode the page shows where this worker placed its records (approved,
held by reason, parked, waiting; :mod:`guardrail.stream.dashboard.gate`). With
the review queue on, the page also shows the judge's agreement with its
reviewers (the tracker of :mod:`.agreement`, ``runtime.state["agreement"]``);
partitions this worker holds with lag and no progress show at the top
(:mod:`.liveness`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..stream.dashboard import PageContext, build_dashboard, render_page, spend_of
from ..stream.dashboard.agreement import build_agreement
from ..stream.dashboard.gate import gate_of
from .liveness import stalled_now
from .web import current_rates

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["register", "render", "parse_refresh", "Source", "DEFAULT_REFRESH_SECONDS"]

log = logging.getLogger("guardrail.dashboard")

#: A data source: returns a list of dicts, or an awaitable of one.
Source = Callable[[], Any]

DEFAULT_REFRESH_SECONDS = 5
MAX_REFRESH_SECONDS = 3600


class BadRequest(ValueError):
    """A query parameter the page cannot use; the message says which and why."""


def parse_refresh(value: str | None) -> int:
    """``?refresh=N``: seconds between reloads, 0 for none."""
    if value is None or value == "":
        return DEFAULT_REFRESH_SECONDS
    try:
        seconds = int(value)
    except ValueError:
        seconds = -1
    if not 0 <= seconds <= MAX_REFRESH_SECONDS:
        raise BadRequest(f"refresh must be a whole number of seconds from 0 to "
                         f"{MAX_REFRESH_SECONDS} (0: no reload), not {value!r}")
    return seconds


async def _read(source: Source, what: str, problems: list[str]) -> list[Any]:
    """Call a source; a failure or a non-list becomes a problem shown on the page."""
    try:
        value = source()
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:  # the page still renders, with what is known
        log.exception("dashboard: reading %s failed", what)
        problems.append(f"could not read {what}: {type(exc).__name__}: {exc}")
        return []
    if not isinstance(value, (list, tuple)):
        problems.append(f"could not read {what}: expected a list, got {type(value).__name__}")
        return []
    return list(value)


async def render(runtime: WorkerRuntime, *, rows: Source, alerts: Source,
                 context: PageContext, agreement: Source | None = None) -> tuple[int, str]:
    """``(status, html)``: 200, or 503 when the window rates could not be read.
    ``agreement`` returns ``/agreement`` rows (None: no agreement panel)."""
    problems: list[str] = []
    rate_rows = await _read(rows, "the window rates", problems)
    rates_failed = bool(problems)
    recent = await _read(alerts, "the alerts", problems)
    windows = runtime.settings.windows
    panel = None
    if agreement is not None:
        agreement_rows = await _read(agreement, "the agreement figures", problems)
        panel = build_agreement(agreement_rows, version_label=windows.version_label,
                                problems=problems)
    data = build_dashboard(rate_rows, recent, window_seconds=windows.window_seconds,
                           version_label=windows.version_label,
                           spend=spend_of(runtime.telemetry), rules=windows.alert_rules,
                           problems=problems, agreement=panel, stalled=stalled_now(runtime),
                           gate=gate_of(runtime.telemetry, on=runtime.settings.gate.gate))
    return (503 if rates_failed else 200), render_page(data, context)


def register(runtime: WorkerRuntime, *, rows: Source | None = None,
             alerts: Source | None = None, rates_scope: str = "this worker",
             alerts_scope: str = "this worker") -> None:
    """Add ``/dashboard`` to the worker's web server."""
    app, settings = runtime.app, runtime.settings
    rows = rows or (lambda: current_rates(runtime.state["table"]))
    alerts = alerts or runtime.dispatcher.recent_alerts

    @app.page("/dashboard")
    async def dashboard(web: Any, request: Any) -> Any:
        try:
            refresh = parse_refresh(request.query.get("refresh"))
        except BadRequest as exc:
            return web.text(f"{exc}\n", status=400)
        context = PageContext(app_id=settings.kafka.app_id,
                              input_topic=settings.kafka.input_topic, refresh_seconds=refresh,
                              rates_scope=rates_scope, alerts_scope=alerts_scope)
        tracker = runtime.state.get("agreement")  # review on (guardrail.agents.agreement)
        status, page = await render(runtime, rows=rows, alerts=alerts, context=context,
                                    agreement=getattr(tracker, "rows", None))
        return web.html(page, status=status)
