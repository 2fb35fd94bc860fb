"""The worker's HTTP pages: current rates, health, Prometheus metrics.

    curl 127.0.0.1:6066/rates     # windows held by this worker, newest first
    curl 127.0.0.1:6066/health    # 200 {"status": "ok"}; 503 {"status": "paused"}
    curl 127.0.0.1:6066/metrics   # Prometheus text format

``/health`` answers 503 while the worker holds a batch on a judge outage, so a
load balancer or probe sees that results are not flowing; the body says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..stream.alerts import WindowCounts
from ..stream.envelope import utc_iso
from ..stream.events import parse_window_key
from ..stream.telemetry import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from .runtime import WorkerRuntime as GuardrailApp

__all__ = ["register", "current_rates"]


def current_rates(table: Any) -> list[dict[str, Any]]:
    """Every unexpired window cell of the table, as JSON-ready rows."""
    rows = []
    for (key, (start, end)), value in list(table.data.items()):
        metric, group = parse_window_key(key)
        counts = WindowCounts.from_dict(value)
        rows.append({"metric": metric, "group": group, "window_start": utc_iso(start * 1000),
                     "window_end": utc_iso(round(end) * 1000), "total": counts.total,
                     "unsafe": counts.unsafe, "errors": counts.errors,
                     "unsafe_rate": counts.rate})
    rows.sort(key=lambda r: (r["window_start"], r["metric"], r["group"]), reverse=True)
    return rows


def _update_lag(runtime: GuardrailApp) -> None:
    consumer = runtime.app.consumer
    for tp in consumer.assignment():
        highwater = consumer.highwater(tp)
        committed = consumer._committed_offset.get(tp)  # no public accessor in 0.15.3
        if highwater is not None:
            lag = max(0, highwater - (committed or 0))
            runtime.telemetry.lag.labels(topic=tp.topic, partition=str(tp.partition)).set(lag)


def register(runtime: GuardrailApp) -> None:
    app = runtime.app

    @app.page("/rates")
    async def rates(web: Any, request: Any) -> Any:
        return web.json({"window_seconds": runtime.settings.windows.window_seconds,
                         "rates": current_rates(runtime.state["table"])})

    @app.page("/health")
    async def health(web: Any, request: Any) -> Any:
        paused = runtime.telemetry.paused._value.get() == 1
        return web.json({"status": "paused" if paused else "ok",
                         "judge_paused": paused,
                         "rebalancing": bool(app.rebalancing)},
                        status=503 if paused else 200)

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        try:
            _update_lag(runtime)
        except Exception:  # lag is best effort while partitions move
            pass
        # aiohttp wants the charset apart from the content type.
        return web.bytes(runtime.telemetry.render(),
                         content_type=CONTENT_TYPE_LATEST.split(";")[0])
