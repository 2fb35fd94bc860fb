"""The dashboard's stylesheet, inlined into the page (nothing is fetched).

    f"<style>{CSS}</style>"

Sized for a laptop screen: metric cards two abreast from about 1,250 px
wide, one below the other on narrower screens; charts scale with their card.
"""

from __future__ import annotations

__all__ = ["CSS"]

CSS = """
:root { color-scheme: light; --ink: #0f172a; --muted: #64748b; --line: #e2e8f0;
  --bad: #dc2626; --warn: #d97706; --ok: #15803d; --judged: #64748b; --errors: #f59e0b; }
* { box-sizing: border-box; }
body { margin: 0; padding: 18px 24px 28px; background: #f1f5f9; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header h1 { margin: 0; font-size: 21px; }
header h1 span { font-weight: 400; color: var(--muted); }
.subtitle { margin: 2px 0 14px; color: var(--muted); }
code { background: #e2e8f0; padding: 0 4px; border-radius: 3px; font-size: 12.5px; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr));
  gap: 12px; margin-bottom: 14px; }
.tile, .card { background: #fff; border: 1px solid var(--line); border-radius: 8px; }
.tile { padding: 10px 14px; }
.tile-label { color: var(--muted); font-size: 12px; text-transform: uppercase;
  letter-spacing: .04em; }
.tile-value { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
.tile-note { color: var(--muted); font-size: 12.5px; }
.tile.bad .tile-value { color: var(--bad); }
.tile.warn .tile-value { color: var(--warn); }
.metrics { display: grid; grid-template-columns: repeat(auto-fit, minmax(580px, 1fr));
  gap: 14px; margin-bottom: 14px; }
.card { padding: 12px 16px 14px; margin-bottom: 14px; }
.metrics .card { margin-bottom: 0; }
.card h2 { margin: 0 0 6px; font-size: 17px; display: flex; gap: 10px; align-items: baseline; }
.card h3 { margin: 12px 0 6px; font-size: 13.5px; }
.sub { color: var(--muted); font-weight: 400; font-size: 12.5px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px;
  font-weight: 600; color: #fff; }
.badge.bad { background: var(--bad); }
.badge.ok { background: var(--ok); }
.chart { width: 100%; height: auto; display: block; }
.chart .grid { stroke: var(--line); stroke-width: 1; }
.chart .axis { fill: var(--muted); font-size: 11px; }
.chart .threshold { stroke: var(--bad); stroke-width: 1; stroke-dasharray: 5 4; opacity: .6; }
.chart .threshold-label { fill: var(--bad); font-size: 10.5px; opacity: .8; }
.chart .series-line { fill: none; stroke-width: 2.4; stroke-linejoin: round; }
.chart .series-label { font-size: 12px; font-weight: 650; }
.chart .alert-band { fill: var(--bad); opacity: .09; }
.chart .alert-flag { fill: var(--bad); }
.chart .alert-ring { fill: none; stroke: var(--bad); stroke-width: 2.2; }
.coverage-chart .seen { fill: #fff; stroke: #94a3b8; stroke-dasharray: 3 2; }
.coverage-chart .judged { fill: var(--judged); }
.coverage-chart .errors { fill: var(--errors); }
.chart-key { color: var(--muted); font-size: 12px; margin-top: 2px; }
.key { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 10px;
  vertical-align: -1px; }
.key.judged { background: var(--judged); }
.key.errors { background: var(--errors); }
.key.seen { border: 1px dashed #94a3b8; }
.family { margin-bottom: 6px; }
.family-name { color: var(--muted); font-size: 12.5px; margin-bottom: 4px; }
.versions { display: flex; flex-wrap: wrap; gap: 8px; }
.version { flex: 1 1 160px; border: 1px solid var(--line); border-radius: 6px;
  padding: 6px 10px; }
.version.alerted { border-color: var(--bad); box-shadow: inset 3px 0 0 var(--bad); }
.version-name { font-weight: 650; }
.swatch { display: inline-block; width: 14px; height: 4px; border-radius: 2px;
  margin-right: 6px; vertical-align: 3px; }
.version-rate { font-size: 22px; font-weight: 650; font-variant-numeric: tabular-nums; }
.version-counts, .delta { color: var(--muted); font-size: 12.5px; }
.delta { color: var(--ink); }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th { text-align: left; color: var(--muted); font-weight: 500; border-bottom: 1px solid var(--line);
  padding: 4px 8px; }
td { padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.nowrap { white-space: nowrap; }
td.rate { white-space: nowrap; font-variant-numeric: tabular-nums; }
tr.alert-row td:first-child { border-left: 3px solid var(--bad); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; }
details summary { cursor: pointer; font-weight: 600; }
details table { margin-top: 8px; }
.empty { color: var(--muted); }
.empty-state { padding: 28px; text-align: center; font-size: 15px; }
.empty-state h2 { justify-content: center; }
.problems { background: #fffbeb; border: 1px solid #fcd34d; border-radius: 8px;
  padding: 8px 14px; margin-bottom: 14px; }
.problems ul { margin: 4px 0 0; padding-left: 18px; }
footer { color: var(--muted); font-size: 12px; margin-top: 8px; }
footer a { color: var(--muted); }
"""
