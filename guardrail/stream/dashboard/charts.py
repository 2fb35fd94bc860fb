"""Server-rendered SVG charts for the dashboard: no script, no external file,
so the page works offline and in any browser::

    frame = Frame.for_windows(data.window_starts, data.window_seconds)
    rate_chart(data.series("toxicity"), data.alerts_for("toxicity"), frame, threshold=0.2)
    coverage_chart([c for c in data.cells if c.metric == "toxicity"], frame)

Both charts share one time axis (``Frame``): a window is a column from its
start to its end, points sit at its middle, and an alert shades the column of
the window it fired in. Every text that came from the stream is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from html import escape

from .data import Alert, Cell, Series, utc_clock

__all__ = ["Frame", "rate_chart", "coverage_chart", "ALERT_COLOR"]

ALERT_COLOR = "#dc2626"
#: (top of the axis, gridline step): the smallest that fits the data is used.
_RATE_SCALES = ((0.05, 0.01), (0.1, 0.02), (0.2, 0.05), (0.25, 0.05), (0.5, 0.1),
                (0.75, 0.25), (1.0, 0.25))
_MAX_X_LABELS = 8


@dataclass(frozen=True)
class Frame:
    """The plot area and its scales (SVG user units; the SVG scales to its box)."""

    t0: float
    t1: float
    window_seconds: float
    width: int = 640
    height: int = 230
    left: int = 46
    right: int = 44  # room for the line labels
    top: int = 18
    bottom: int = 24
    ymax: float = 1.0

    @classmethod
    def for_windows(cls, starts: Sequence[float], window_seconds: float) -> Frame:
        first = min(starts) if starts else 0.0
        last = max(starts) if starts else 0.0
        return cls(t0=first, t1=last + window_seconds, window_seconds=window_seconds)

    def x(self, t: float) -> float:
        span = max(self.t1 - self.t0, 1e-9)
        return self.left + (t - self.t0) / span * (self.width - self.left - self.right)

    def y(self, value: float) -> float:
        plot = self.height - self.top - self.bottom
        return self.top + plot * (1 - min(value, self.ymax) / self.ymax)

    @property
    def floor(self) -> float:
        return float(self.height - self.bottom)


def _n(value: float) -> str:
    return f"{value:.1f}"


def _pct(rate: float | None) -> str:
    return "no verdict" if rate is None else f"{rate:.1%}"


def _open_svg(frame: Frame, label: str, css_class: str, extra: str = "") -> str:
    return (f'<svg class="{css_class}" viewBox="0 0 {frame.width} {frame.height}" '
            f'role="img" aria-label="{escape(label)}" preserveAspectRatio="xMidYMid meet"'
            f'{extra}><title>{escape(label)}</title>')


def _x_labels(frame: Frame, starts: Sequence[float]) -> list[str]:
    step = max(1, math.ceil(len(starts) / _MAX_X_LABELS))
    out = []
    for start in list(starts)[::step]:
        x = frame.x(start + frame.window_seconds / 2)
        out.append(f'<text class="axis" x="{_n(x)}" y="{_n(frame.floor + 16)}" '
                   f'text-anchor="middle">{utc_clock(start)}</text>')
    return out


def _rate_scale(rates: Iterable[float]) -> tuple[float, float]:
    top = max(rates, default=0.0)
    for ymax, step in _RATE_SCALES:
        if top * 1.08 <= ymax:
            return ymax, step
    return _RATE_SCALES[-1]


def _grid(frame: Frame, step: float) -> list[str]:
    out = []
    ticks = round(frame.ymax / step)
    for i in range(ticks + 1):
        value = i * step
        y = frame.y(value)
        out.append(f'<line class="grid" x1="{frame.left}" x2="{frame.width - frame.right}" '
                   f'y1="{_n(y)}" y2="{_n(y)}"/>'
                   f'<text class="axis" x="{frame.left - 6}" y="{_n(y + 4)}" '
                   f'text-anchor="end">{value * 100:g}%</text>')
    return out


def _threshold(frame: Frame, threshold: float | None) -> list[str]:
    if threshold is None or threshold > frame.ymax:
        return []
    y = frame.y(threshold)
    return [f'<line class="threshold" x1="{frame.left}" x2="{frame.width - frame.right}" '
            f'y1="{_n(y)}" y2="{_n(y)}"/>'
            f'<text class="threshold-label" x="{frame.width - frame.right - 4}" '
            f'y="{_n(y - 4)}" text-anchor="end">alert above {threshold:.0%}</text>']


def _runs(cells: Sequence[Cell], window_seconds: float) -> list[list[Cell]]:
    """Consecutive windows with a rate; a missing window or one without any
    verdict breaks the line rather than being drawn as 0 %."""
    runs: list[list[Cell]] = []
    for cell in cells:
        if cell.rate is None:
            runs.append([])
            continue
        previous = runs[-1][-1] if runs and runs[-1] else None
        if previous is None or cell.start - previous.start > window_seconds * 1.5:
            runs.append([])
        runs[-1].append(cell)
    return [r for r in runs if r]


def _cell_title(series: Series, cell: Cell) -> str:
    return (f"{series.family} · {series.version} · {utc_clock(cell.start)}–"
            f"{utc_clock(cell.end)} UTC: {_pct(cell.rate)} unsafe ({cell.unsafe} of "
            f"{cell.judged} judged, {cell.errors} errors)")


def _series(frame: Frame, series: Series) -> list[str]:
    attrs = (f'data-group="{escape(series.group)}" data-version="{escape(series.version)}" '
             f'stroke="{series.color}"')
    out = [f'<g class="series" {attrs}>']
    mid = frame.window_seconds / 2
    for run in _runs(series.cells, frame.window_seconds):
        points = " ".join(f"{_n(frame.x(c.start + mid))},{_n(frame.y(c.rate or 0))}"
                          for c in run)
        out.append(f'<polyline class="series-line" points="{points}"/>')
        for c in run:
            out.append(f'<circle class="point" cx="{_n(frame.x(c.start + mid))}" '
                       f'cy="{_n(frame.y(c.rate or 0))}" r="3.2" fill="{series.color}">'
                       f'<title>{escape(_cell_title(series, c))}</title></circle>')
    out.append("</g>")
    return out


def _end_labels(frame: Frame, series: Sequence[Series]) -> list[str]:
    """Each line's version at its newest point, nudged apart where they would overlap."""
    mid = frame.window_seconds / 2
    ends = []
    for s in series:
        last = [c for c in s.cells if c.rate is not None]
        if last:
            ends.append([frame.y(last[-1].rate or 0) + 4, frame.x(last[-1].start + mid), s])
    ends.sort(key=lambda e: e[0])
    for previous, current in zip(ends, ends[1:]):
        current[0] = max(current[0], previous[0] + 12)
    out = []
    for y, x, s in ends:
        text = s.version if len(s.version) <= 8 else s.version[:7] + "…"
        out.append(f'<g><title>{escape(s.family)} · {escape(s.version)}</title>'
                   f'<text class="series-label" x="{_n(x + 8)}" y="{_n(y)}" fill="{s.color}" '
                   f'data-version="{escape(s.version)}">{escape(text)}</text></g>')
    return out


def _alert_title(alert: Alert) -> str:
    against = f" vs {_pct(alert.baseline_rate)} ({alert.baseline_text})" \
        if alert.baseline_text else ""
    return (f"ALERT {alert.metric} · {alert.family} · {alert.version} · window "
            f"{utc_clock(alert.start)}–{utc_clock(alert.end)} UTC: {_pct(alert.rate)}"
            f"{against}. " + "; ".join(alert.reasons))


def _alert_marks(frame: Frame, alerts: Sequence[Alert], series: Sequence[Series],
                 ) -> tuple[list[str], list[str]]:
    """Per alert: a shaded column for its window with a flag above it (drawn
    under the lines), and a ring on the group's point in that window (drawn
    over them; at the alert's own rate when the window has no point)."""
    bands, rings = [], []
    cells = {(s.group, c.start): c for s in series for c in s.cells}
    for alert in alerts:
        if alert.end <= frame.t0 or alert.start >= frame.t1:
            continue  # its window is no longer shown; the list below still has it
        x0, x1 = frame.x(max(alert.start, frame.t0)), frame.x(min(alert.end, frame.t1))
        mid = (x0 + x1) / 2
        title = f"<title>{escape(_alert_title(alert))}</title>"
        data = (f'data-group="{escape(alert.group)}" data-version="{escape(alert.version)}" '
                f'data-alert-id="{escape(alert.alert_id)}"')
        bands.append(
            f'<g class="alert-mark" {data}>{title}'
            f'<rect class="alert-band" x="{_n(x0)}" y="{frame.top}" width="{_n(x1 - x0)}" '
            f'height="{_n(frame.floor - frame.top)}"/>'
            f'<path class="alert-flag" d="M{_n(mid - 6)},{frame.top - 12} h12 l-6,10 z"/></g>')
        cell = cells.get((alert.group, alert.start))
        rate = cell.rate if cell is not None and cell.rate is not None else alert.rate
        if rate is not None:
            rings.append(f'<circle class="alert-ring" {data} cx="{_n(mid)}" '
                         f'cy="{_n(frame.y(rate))}" r="7">{title}</circle>')
    return bands, rings


def rate_chart(series: Sequence[Series], alerts: Sequence[Alert], frame: Frame, *,
               metric: str, threshold: float | None = None) -> str:
    """Unsafe rate per window, one line per group, alerts marked on their window."""
    rates = [c.rate for s in series for c in s.cells if c.rate is not None]
    rates += [a.rate for a in alerts if a.rate is not None]
    ymax, step = _rate_scale(rates + ([threshold] if threshold is not None else []))
    frame = replace(frame, ymax=ymax)
    starts = sorted({c.start for s in series for c in s.cells})
    label = f"Unsafe rate of {metric} per window, one line per group"
    parts = [_open_svg(frame, label, "chart rate-chart", f' data-metric="{escape(metric)}"')]
    parts += _grid(frame, step)
    parts += _threshold(frame, threshold)
    bands, rings = _alert_marks(frame, alerts, series)
    parts += bands
    for s in series:
        parts += _series(frame, s)
    parts += rings
    parts += _end_labels(frame, series)
    parts += _x_labels(frame, starts)
    parts.append("</svg>")
    return "".join(parts)


def coverage_chart(cells: Sequence[Cell], frame: Frame, *, metric: str) -> str:
    """Per window, summed over groups: seen (outline), judged and judge errors (bars)."""
    frame = replace(frame, height=96, top=10, bottom=22)
    windows: dict[float, list[int]] = {}
    for cell in cells:
        seen, judged, errors = windows.setdefault(cell.start, [0, 0, 0])
        windows[cell.start] = [seen + cell.seen, judged + cell.judged, errors + cell.errors]
    top = max((max(v[0], v[1] + v[2]) for v in windows.values()), default=0) or 1
    plot = frame.floor - frame.top
    label = f"Coverage of {metric} per window: seen, judged, judge errors"
    parts = [_open_svg(frame, label, "chart coverage-chart", f' data-metric="{escape(metric)}"'),
             f'<text class="axis" x="{frame.left - 6}" y="{frame.top + 8}" '
             f'text-anchor="end">{top:,}</text>',
             f'<line class="grid" x1="{frame.left}" x2="{frame.width - frame.right}" '
             f'y1="{_n(frame.floor)}" y2="{_n(frame.floor)}"/>']
    for start, (seen, judged, errors) in sorted(windows.items()):
        x0 = frame.x(start + frame.window_seconds * 0.15)
        width = frame.x(start + frame.window_seconds * 0.85) - x0
        title = (f"{utc_clock(start)} UTC: {seen:,} seen, {judged:,} judged, "
                 f"{errors:,} judge errors")
        h_seen, h_judged, h_err = (plot * v / top for v in (seen, judged, errors))
        parts.append(
            f'<g class="coverage-bar"><title>{escape(title)}</title>'
            f'<rect class="seen" x="{_n(x0)}" y="{_n(frame.floor - h_seen)}" '
            f'width="{_n(width)}" height="{_n(h_seen)}"/>'
            f'<rect class="judged" x="{_n(x0)}" y="{_n(frame.floor - h_judged)}" '
            f'width="{_n(width)}" height="{_n(h_judged)}"/>'
            f'<rect class="errors" x="{_n(x0)}" y="{_n(frame.floor - h_judged - h_err)}" '
            f'width="{_n(width)}" height="{_n(h_err)}"/></g>')
    parts += _x_labels(frame, sorted(windows))
    parts.append("</svg>")
    return "".join(parts)
