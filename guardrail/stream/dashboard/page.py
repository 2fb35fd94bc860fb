"""The dashboard page: one self-contained HTML document (inline CSS and SVG,
no script, nothing fetched), which reloads itself every few seconds::

    html = render_page(build_dashboard(rows, alerts, window_seconds=300,
                                       version_label="model_version"),
                       PageContext(app_id="guardrail", input_topic="model-outputs"))

Every value that came from the stream (metric names, group labels, case ids,
alert reasons) is HTML-escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from .agreement import agreement_panel
from .charts import Frame, coverage_chart, rate_chart
from .data import Alert, Cell, Dashboard, VersionTotals, utc_clock
from .gate import gate_panel
from .spend import Spend
from .style import CSS

__all__ = ["PageContext", "render_page"]


@dataclass(frozen=True)
class PageContext:
    """What the page says about where its data comes from."""

    app_id: str = "guardrail"
    input_topic: str = "model-outputs"
    #: Seconds between reloads; 0: no reload (screenshots, reading a table).
    refresh_seconds: int = 5
    #: Whose windows and alerts these are, e.g. "this worker" or "all workers".
    rates_scope: str = "this worker"
    alerts_scope: str = "this worker"


def _pct(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.1%}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _tile(label: str, value: str, note: str, css: str = "") -> str:
    return (f'<div class="tile {css}"><div class="tile-label">{escape(label)}</div>'
            f'<div class="tile-value">{value}</div>'
            f'<div class="tile-note">{note}</div></div>')


def _tiles(data: Dashboard, context: PageContext) -> str:
    cells = data.cells
    seen = sum(c.seen for c in cells)
    judged = sum(c.judged for c in cells)
    errors = sum(c.errors for c in cells)
    unsafe = sum(c.unsafe for c in cells)
    tiles = [
        _tile("Judged", f"{judged:,}", f"of {seen:,} seen · coverage "
              f"{_pct(_ratio(judged, seen))}"),
        _tile("Unsafe", f"{unsafe:,}", f"{_pct(_ratio(unsafe, judged))} of judged",
              "bad" if unsafe else ""),
        _tile("Judge errors", f"{errors:,}", f"{_pct(_ratio(errors, judged + errors))} of "
              "judgments, never counted as safe", "warn" if errors else ""),
        _tile("Alerts", f"{len(data.alerts):,}", f"recent, fired by {escape(context.alerts_scope)}",
              "bad" if data.alerts else ""),
    ]
    spend = data.spend
    if spend is not None:
        unpriced = (f" · {spend.unpriced_calls:,} calls without a price"
                    if spend.unpriced_calls else "")
        tiles.append(_tile("Spend (this worker)", f"${spend.cost_usd:,.4f}",
                           f"{spend.input_tokens:,} tokens in · {spend.output_tokens:,} out"
                           f"{unpriced}"))
        tiles.append(_sampling_tile(spend))
    return '<section class="tiles">' + "".join(tiles) + "</section>"


def _sampling_tile(spend: Spend) -> str:
    """The share judged now, and whether the judge budget lowered it."""
    throttled = (spend.budget_alerts or {}).get("throttled", 0)
    restored = (spend.budget_alerts or {}).get("restored", 0)
    note = (f"budget alerts: {throttled:,} lowered · {restored:,} restored" if throttled
            else "no budget alert")
    return _tile("Sample rate (this worker)", _pct(spend.effective_sample_rate), note,
                 "warn" if throttled > restored else "")


def _version_box(v: VersionTotals, first: VersionTotals | None) -> str:
    delta = ""
    if first is not None and v.rate is not None and first.rate is not None:
        points = (v.rate - first.rate) * 100
        delta = f'<div class="delta">{points:+.1f} pts vs {escape(first.version)}</div>'
    alert = f'<div class="badge bad">{_count(v.alerts, "alert")}</div>' if v.alerts else ""
    return (f'<div class="version{" alerted" if v.alerts else ""}" '
            f'data-version="{escape(v.version)}">'
            f'<div class="version-name"><span class="swatch" style="background:{v.color}">'
            f'</span>{escape(v.version)}</div>'
            f'<div class="version-rate">{_pct(v.rate)}</div>'
            f'<div class="version-counts">{v.unsafe:,} unsafe of {v.judged:,} judged · '
            f'{_count(v.errors, "error")} · {v.seen:,} seen</div>'
            f'<div class="version-counts">latest window {utc_clock(v.latest.start)}: '
            f'{_pct(v.latest.rate)}</div>{delta}{alert}</div>')


def _versions(data: Dashboard, metric: str) -> str:
    rows = []
    for family, versions in data.versions(metric).items():
        boxes = "".join(_version_box(v, versions[0] if i else None)
                        for i, v in enumerate(versions))
        rows.append(f'<div class="family"><div class="family-name">{escape(family)}</div>'
                    f'<div class="versions">{boxes}</div></div>')
    return '<div class="side-by-side">' + "".join(rows) + "</div>"


def _metric_card(data: Dashboard, metric: str, frame: Frame) -> str:
    series = data.series(metric)
    alerts = data.alerts_for(metric)
    threshold = data.thresholds.get(metric)
    cells = [c for c in data.cells if c.metric == metric]
    body = (rate_chart(series, alerts, frame, metric=metric, threshold=threshold)
            if series else '<p class="empty">No window holds this metric any more.</p>')
    coverage = coverage_chart(cells, frame, metric=metric) if cells else ""
    key = ('<div class="chart-key"><span class="key judged"></span>judged '
           '<span class="key errors"></span>judge errors '
           '<span class="key seen"></span>seen, not judged</div>') if cells else ""
    fired = f'<span class="badge bad">{_count(len(alerts), "alert")}</span>' if alerts else ""
    return (f'<article class="card metric" data-metric="{escape(metric)}">'
            f'<h2>{escape(metric)} <span class="sub">unsafe rate per window (UTC)</span>'
            f'{fired}</h2>'
            f'{body}<h3>Versions side by side <span class="sub">all windows shown</span></h3>'
            f'{_versions(data, metric)}'
            f'<h3>Coverage <span class="sub">per window, all groups</span></h3>'
            f'{coverage}{key}</article>')


def _alert_row(alert: Alert) -> str:
    fired = utc_clock(alert.fired_at, seconds=True) if alert.fired_at else "–"
    against = (f'<br><span class="sub">vs {_pct(alert.baseline_rate)} '
               f'({escape(alert.baseline_text)})</span>') if alert.baseline_text else ""
    cases = ", ".join(escape(c) for c in alert.case_ids) or "–"
    return (f'<tr class="alert-row" data-alert-id="{escape(alert.alert_id)}">'
            f'<td>{fired}</td><td>{escape(alert.metric)}</td>'
            f'<td>{escape(alert.family)}</td><td>{escape(alert.unit)}</td>'
            f'<td><b>{escape(alert.version)}</b></td>'
            f'<td class="nowrap">{utc_clock(alert.start)}–{utc_clock(alert.end)}</td>'
            f'<td class="rate">{_pct(alert.rate)}{against}</td>'
            f'<td>{"<br>".join(escape(r) for r in alert.reasons)}</td><td>{cases}</td></tr>')


def _alerts(data: Dashboard, context: PageContext) -> str:
    scope = escape(context.alerts_scope)
    if not data.alerts:
        return ('<section class="card"><h2>Alerts</h2><p class="empty">No alert fired on '
                f'{scope} yet (the list keeps the most recent ones).</p></section>')
    rows = "".join(_alert_row(a) for a in data.alerts)
    return (f'<section class="card"><h2>Alerts <span class="sub">fired by {scope}, '
            'newest first (UTC)</span></h2><table class="alerts"><thead><tr><th>fired</th>'
            '<th>metric</th><th>group</th><th>unit</th><th>version</th><th>window</th>'
            f'<th>rate</th><th>why</th><th>examples</th></tr></thead><tbody>{rows}</tbody></table></section>')


def _judge_panel(data: Dashboard) -> str:
    spend = data.spend
    if spend is None:
        return ""
    verdicts = (f"{spend.verdicts.get('safe', 0):,} safe · {spend.verdicts.get('unsafe', 0):,} "
                f"unsafe · {_count(spend.verdicts.get('error', 0), 'error')}")
    messages = " · ".join(f"{v:,} {escape(k)}" for k, v in sorted(spend.messages.items()))
    state = ('<span class="badge bad">judge paused: waiting out an outage</span>'
             if spend.judge_paused else '<span class="badge ok">judging</span>')
    return (f'<section class="card"><h2>Judge <span class="sub">this worker since it started'
            f'</span>{state}</h2><dl class="facts">'
            f'<dt>Verdicts</dt><dd>{verdicts}</dd>'
            f'<dt>Messages</dt><dd>{messages or "none yet"}</dd>'
            f'<dt>Spend</dt><dd>${spend.cost_usd:,.4f} · {spend.input_tokens:,} tokens in · '
            f'{spend.output_tokens:,} tokens out · {spend.unpriced_calls:,} calls without '
            'a known price</dd></dl></section>')


def _cell_row(cell: Cell) -> str:
    return (f"<tr><td>{utc_clock(cell.start)}</td><td>{escape(cell.metric)}</td>"
            f"<td>{escape(cell.family)}</td><td>{escape(cell.unit)}</td>"
            f"<td>{escape(cell.version)}</td>"
            f'<td class="num">{cell.seen:,}</td><td class="num">{cell.judged:,}</td>'
            f'<td class="num">{cell.errors:,}</td><td class="num">{cell.unsafe:,}</td>'
            f'<td class="num">{_pct(cell.rate)}</td></tr>')


def _windows_table(data: Dashboard) -> str:
    cells = sorted(data.cells, key=lambda c: (-c.start, c.metric, c.family, c.version))
    rows = "".join(_cell_row(c) for c in cells)
    return (f'<details class="card"><summary>Every window ({len(cells)} rows)</summary>'
            '<table class="windows"><thead><tr><th>window (UTC)</th><th>metric</th>'
            '<th>group</th><th>unit</th><th>version</th><th>seen</th><th>judged</th>'
            '<th>errors</th><th>unsafe</th><th>rate</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></details>')


def _problems(data: Dashboard) -> str:
    if not data.problems:
        return ""
    items = "".join(f"<li>{escape(p)}</li>" for p in data.problems[:20])
    more = f"<li>… and {len(data.problems) - 20} more</li>" if len(data.problems) > 20 else ""
    return (f'<section class="problems" role="alert"><b>Some data could not be shown</b>'
            f'<ul>{items}{more}</ul></section>')


def _stalled(data: Dashboard) -> str:
    """Partitions with lag whose committed offset stands: the worker is up, not moving."""
    if not data.stalled:
        return ""
    items = "".join(f"<li><code>{escape(s.topic)}</code> partition {s.partition}: lag "
                    f"{s.lag:,}, no committed progress for {s.seconds_since_progress:,.0f} s"
                    "</li>" for s in data.stalled)
    return (f'<section class="problems stalled" role="alert"><b>Stalled: '
            f'{_count(len(data.stalled), "partition")} of this worker with lag and no '
            f'progress</b> (not a judge outage; see <a href="/health">/health</a>)'
            f"<ul>{items}</ul></section>")


def _empty(context: PageContext) -> str:
    return ('<section class="card empty-state"><h2>No data yet</h2><p>No judgment has been '
            f'counted in any window ({escape(context.rates_scope)}). Charts appear here once '
            f'the worker has judged messages from <code>{escape(context.input_topic)}</code>.'
            '</p></section>')


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def render_page(data: Dashboard, context: PageContext) -> str:
    """The whole dashboard as one HTML document."""
    refresh = (f'<meta http-equiv="refresh" content="{context.refresh_seconds}">'
               if context.refresh_seconds > 0 else "")
    updated = utc_clock(data.generated_at, seconds=True)
    reload = (f"reloads every {context.refresh_seconds} s" if context.refresh_seconds > 0
              else "reload off")
    subtitle = (f"{escape(context.app_id)} · windows of {_minutes(data.window_seconds)} "
                f"({escape(context.rates_scope)}) · versions by "
                f"<code>{escape(data.version_label)}</code> · updated {updated} UTC · {reload}")
    frame = Frame.for_windows(data.window_starts, data.window_seconds)
    if data.cells:
        cards = "".join(_metric_card(data, m, frame) for m in data.metrics)
        main = f'<section class="metrics">{cards}</section>'
    else:
        main = _empty(context)
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"{refresh}<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>guardrail dashboard</title><style>{CSS}</style></head><body>"
            f"<header><h1>guardrail <span>live safety dashboard</span></h1>"
            f"<p class=\"subtitle\">{subtitle}</p></header>"
            f"{_stalled(data)}{_problems(data)}{_tiles(data, context)}{gate_panel(data.gate)}"
            f"{main}{agreement_panel(data.agreement)}"
            f"{_alerts(data, context)}"
            f"{_judge_panel(data)}"
            f"{_windows_table(data) if data.cells else ''}"
            "<footer>Rendered on the worker: inline SVG, no scripts, nothing fetched. "
            "Raw data: <a href=\"/rates\">/rates</a> · "
            + ("<a href=\"/agreement\">/agreement</a> · " if data.agreement is not None else "")
            + "<a href=\"/metrics\">/metrics</a> · "
            "<a href=\"/health\">/health</a></footer></body></html>")
