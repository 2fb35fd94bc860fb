"""``curves.html``: precision, recall and accuracy against the threshold, per metric.

One self-contained page (inline SVG, no script, nothing fetched), readable in
any browser and attachable to a review::

    html = render_curves([Panel("toxicity", points, judged, configured=0.5,
                                recommended=0.71, caption="precision=0.9: 0.71 …",
                                rows=display_rows(points, recommended=0.71, configured=0.5))],
                         title="guardrail calibrate", lines=["judge openai/gpt-4o-mini"])
    Path("curves.html").write_text(html)

Curves are steps: the figures at threshold t hold on (previous cut, t], since
no case's probability lies in between. Under each plot, a rug shows where
the labelled cases' probabilities fall (UNSAFE-labelled above, SAFE below).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from .thresholds import Judged, Point

__all__ = ["Panel", "render_curves"]

WIDTH, HEIGHT = 660, 372
LEFT, RIGHT, TOP, BOTTOM = 64, 20, 40, 290  # the plot area's edges
#: (figure, colour, dash): dashes too, so that the page survives greyscale print.
CURVES = (("precision", "#1f5fa8", ""), ("recall", "#c0392b", "7 4"),
          ("accuracy", "#2e8b3a", "2 3"))
COLOURS = {"unsafe": "#c0392b", "safe": "#1f5fa8"}


@dataclass(frozen=True)
class Panel:
    """One metric's plot and table."""

    metric: str
    points: Sequence[Point]
    judged: Sequence[Judged]
    configured: float
    recommended: float | None
    caption: str
    rows: Sequence[tuple[Point, str]] = field(default_factory=tuple)


def _x(threshold: float) -> float:
    return round(LEFT + threshold * (WIDTH - RIGHT - LEFT), 1)


def _y(value: float) -> float:
    return round(BOTTOM - value * (BOTTOM - TOP), 1)


def _step_path(points: Sequence[Point], figure: Callable[[Point], float | None]) -> str:
    """A step line: a point's value holds from the previous cut (or 0) up to its
    own threshold. Undefined stretches (precision with nothing flagged) are gaps."""
    parts: list[str] = []
    start, drawing = 0.0, False
    for point in points:
        value = figure(point)
        if value is not None:
            parts.append(f"{'L' if drawing else 'M'}{_x(start)} {_y(value)}"
                         f"L{_x(point.threshold)} {_y(value)}")
        drawing, start = value is not None, point.threshold
    return "".join(parts)


def _axes() -> list[str]:
    out = [f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - RIGHT - LEFT}" '
           f'height="{BOTTOM - TOP}" fill="none" stroke="#888"/>']
    for k in range(11):
        x, label = _x(k / 10), f"{k / 10:g}"
        out.append(f'<line x1="{x}" y1="{BOTTOM}" x2="{x}" y2="{BOTTOM + 4}" stroke="#888"/>'
                   f'<text x="{x}" y="{BOTTOM + 16}" text-anchor="middle">{label}</text>')
    for k in range(6):
        y = _y(k / 5)
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - RIGHT}" y2="{y}" stroke="#eee"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4}" text-anchor="end">{k / 5:g}</text>')
    out.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{BOTTOM + 34}" text-anchor="middle">'
               "threshold (a verdict is UNSAFE when P(UNSAFE) ≥ threshold)</text>")
    out.append(f'<text transform="translate(16 {(TOP + BOTTOM) / 2}) rotate(-90)" '
               'text-anchor="middle">share of labelled cases</text>')
    return out


def _legend() -> list[str]:
    out = []
    for i, (name, colour, dash) in enumerate(CURVES):
        x = LEFT + 8 + i * 120
        out.append(f'<line x1="{x}" y1="20" x2="{x + 28}" y2="20" stroke="{colour}" '
                   f'stroke-width="2.5" stroke-dasharray="{dash}"/>'
                   f'<text x="{x + 34}" y="24">{name}</text>')
    return out


def _marker(threshold: float, label: str, colour: str, dash: str, row: int) -> str:
    x = _x(threshold)
    anchor = "end" if threshold > 0.75 else "start"
    shift = -4 if anchor == "end" else 4
    return (f'<line x1="{x}" y1="{TOP}" x2="{x}" y2="{BOTTOM}" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>'
            f'<text x="{x + shift}" y="{TOP + 14 + 14 * row}" text-anchor="{anchor}" '
            f'fill="{colour}">{escape(label)}</text>')


def _rug(judged: Sequence[Judged]) -> list[str]:
    out = []
    for row, label in enumerate(("unsafe", "safe")):
        y = BOTTOM + 48 + 12 * row
        out.append(f'<text x="{LEFT - 6}" y="{y + 8}" text-anchor="end" '
                   f'fill="{COLOURS[label]}">{label}</text>')
        for case in judged:
            if case.label == label and case.probability is not None:
                x = _x(case.probability)
                out.append(f'<line x1="{x}" y1="{y}" x2="{x}" y2="{y + 9}" '
                           f'stroke="{COLOURS[label]}" stroke-opacity="0.6"/>')
    return out


def _svg(panel: Panel) -> str:
    body = _axes() + _legend()
    for name, colour, dash in CURVES:
        path = _step_path(panel.points, lambda p, n=name: getattr(p, n))
        if path:
            body.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2.5" '
                        f'stroke-dasharray="{dash}"><title>{name}</title></path>')
    if panel.recommended is not None and panel.recommended == panel.configured:
        body.append(_marker(panel.recommended, f"recommended = configured {panel.recommended:g}",
                            "#222", "", 0))
    else:
        if panel.recommended is not None:
            body.append(_marker(panel.recommended, f"recommended {panel.recommended:g}",
                                "#222", "", 0))
        body.append(_marker(panel.configured, f"configured {panel.configured:g}",
                            "#777", "3 3", 1))
    body += _rug(panel.judged)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="t-{panel.metric}">'
            f'<title id="t-{panel.metric}">{escape(panel.metric)}: precision, recall and '
            "accuracy against the verdict threshold</title>" + "".join(body) + "</svg>")


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _table(rows: Sequence[tuple[Point, str]]) -> str:
    head = ("<tr><th>threshold</th><th>precision</th><th>recall</th><th>accuracy</th>"
            "<th>F1</th><th>flagged</th><th></th></tr>")
    body = "".join(
        f'<tr{" class=mark" if mark else ""}><td>{p.threshold:g}</td>'
        f"<td>{_figure(p.precision)}</td><td>{_figure(p.recall)}</td>"
        f"<td>{_figure(p.accuracy)}</td><td>{_figure(p.f1)}</td><td>{p.tp + p.fp}</td>"
        f"<td>{escape(mark)}</td></tr>" for p, mark in rows)
    return f"<table>{head}{body}</table>"


_STYLE = ("body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}"
          "svg text{font:12px system-ui,sans-serif}table{border-collapse:collapse;margin:8px 0 "
          "32px}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}"
          "tr.mark{font-weight:bold}figure{margin:0}")


def render_curves(panels: Sequence[Panel], *, title: str, lines: Sequence[str] = ()) -> str:
    """The whole page: a heading, ``lines`` of context, then one plot and table per metric."""
    parts = [f"<!doctype html><html lang=en><meta charset=utf-8><title>{escape(title)}</title>",
             f"<style>{_STYLE}</style><h1>{escape(title)}</h1>"]
    parts += [f"<p>{escape(line)}</p>" for line in lines]
    for panel in panels:
        parts.append(f"<h2>{escape(panel.metric)}</h2><figure>{_svg(panel)}"
                     f"<figcaption>{escape(panel.caption)}</figcaption></figure>")
        if panel.rows:
            parts.append(_table(panel.rows))
    parts.append("</html>")
    return "\n".join(parts)
