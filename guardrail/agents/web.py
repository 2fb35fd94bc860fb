"""The worker's HTTP pages: current rates, health, Prometheus metrics.

    curl 127.0.0.1:6066/rates     # windows of the whole consumer group, newest first
    curl '127.0.0.1:6066/rates?scope=local'   # only those this worker's table holds
    curl 127.0.0.1:6066/health    # 200 {"status": "ok"}; 503 {"status": "paused"}
                                  # 200 {"status": "stalled", "stalled_partitions": [...]}
    curl 127.0.0.1:6066/metrics   # Prometheus text format

``/health`` answers 503 while the worker holds a batch on a judge outage, so a
load balancer or probe sees that results are not flowing; the body says why.
It answers 200 ``"stalled"`` while partitions the worker holds keep lag with
no committed progress for ``stall_seconds`` (:mod:`.liveness`), and lists them
under ``stalled_partitions``: the worker is up, so a readiness probe keeps it,
and whoever reads the body learns it makes no progress. ``kafka_trouble``
holds the last Kafka trouble report's summary while the client fails
(brokers out of reach, produce errors: :mod:`.kafka_trouble`), else null.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .window_cells import sort_rows, window_row
from ..stream.alerts import WindowCounts
from ..stream.telemetry import CONTENT_TYPE_LATEST
from .kafka_trouble import trouble_now
from .liveness import check, stalled_now

if TYPE_CHECKING:
    from .runtime import WorkerRuntime as GuardrailApp

__all__ = ["register", "current_rates"]


def current_rates(table: Any) -> list[dict[str, Any]]:
    """Every window cell this worker's table holds, as JSON-ready rows (the
    group's cells: ``runtime.rates_view.rows()``, same row shape)."""
    return sort_rows([window_row(key, start, end, WindowCounts.from_dict(value))
                      for (key, (start, end)), value in list(table.data.items())])


def register(runtime: GuardrailApp) -> None:
    app = runtime.app

    @app.page("/rates")
    async def rates(web: Any, request: Any) -> Any:
        scope = request.query.get("scope", "group")
        window_seconds = runtime.settings.windows.window_seconds
        if scope == "local":
            return web.json({"scope": "local", "window_seconds": window_seconds,
                             "rates": current_rates(runtime.state["table"])})
        if scope != "group":
            return web.json({"error": f"scope must be 'group' or 'local', not {scope[:40]!r}"},
                            status=400)
        view = runtime.rates_view
        if view is None:  # a runtime built without one (embedding, tests)
            return web.json({"error": "no group view in this worker; use ?scope=local"},
                            status=503)
        # From memory: the view follows the changelog in the background.
        return web.json({"scope": "group", "window_seconds": window_seconds,
                         **view.status(), "rates": view.rows()})

    @app.page("/health")
    async def health(web: Any, request: Any) -> Any:
        paused = runtime.telemetry.paused._value.get() == 1
        stalled = [s.as_dict() for s in stalled_now(runtime)]  # none while paused
        status = "paused" if paused else "stalled" if stalled else "ok"
        return web.json({"status": status, "judge_paused": paused,
                         "kafka_trouble": trouble_now(runtime),
                         "rebalancing": bool(app.rebalancing),
                         "stalled_partitions": stalled},
                        status=503 if paused else 200)

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        try:
            check(runtime)  # the lag as of this scrape (a timer checks in between)
        except Exception:  # lag is best effort while partitions move
            pass
        # aiohttp wants the charset apart from the content type.
        return web.bytes(runtime.telemetry.render(),
                         content_type=CONTENT_TYPE_LATEST.split(";")[0])
