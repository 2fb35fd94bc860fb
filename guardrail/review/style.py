"""The review page's stylesheet, inlined (the page fetches nothing)::

    f"<style>{CSS}</style>"

The judged text sits left in a scrolling box (100 KB stays usable), the
rubric and the choices right; one column below ~1,000 px. An agent run's steps
are blocks indented by depth, tool calls tinted, tool results foldable; a
session's turns are boxes, a flagged one edged in red with a badge.
"""

from __future__ import annotations

__all__ = ["CSS"]

CSS = """
:root { color-scheme: light; --ink: #0f172a; --muted: #64748b; --line: #e2e8f0;
  --bad: #dc2626; --ok: #15803d; --warn: #b45309; --accent: #2563eb; }
* { box-sizing: border-box; }
body { margin: 0; padding: 14px 22px 24px; background: #f1f5f9; color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header { display: flex; flex-wrap: wrap; gap: 6px 18px; align-items: baseline;
  margin-bottom: 10px; }
header h1 { margin: 0; font-size: 20px; }
header h1 span { font-weight: 400; color: var(--muted); }
.count { font-size: 15px; font-weight: 650; }
.count .sub, .sub { color: var(--muted); font-weight: 400; font-size: 12.5px; }
.who { margin-left: auto; color: var(--muted); display: flex; gap: 8px; align-items: center; }
.who form { margin: 0; }
.flash, .error { border-radius: 8px; padding: 7px 12px; margin-bottom: 10px; }
.flash { background: #f0fdf4; border: 1px solid #86efac; }
.error { background: #fef2f2; border: 1px solid #fca5a5; }
.review { display: grid; grid-template-columns: minmax(0, 1.55fr) minmax(340px, 1fr);
  gap: 14px; align-items: start; }
@media (max-width: 1000px) { .review { grid-template-columns: minmax(0, 1fr); } }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 10px 14px 12px; }
.card h2 { margin: 0 0 6px; font-size: 16px; }
.field h3, .run h3 { margin: 10px 0 4px; font-size: 13px; color: var(--muted);
  font-weight: 600; }
.judged { unicode-bidi: isolate; white-space: pre-wrap; overflow-wrap: anywhere;
  max-height: 68vh; overflow: auto; border: 1px solid var(--line); border-radius: 6px;
  padding: 8px 10px; background: #f8fafc; font: 13.5px/1.5 ui-monospace, "SFMono-Regular",
  Menlo, Consolas, monospace; }
.judged mark { background: #fde68a; border-radius: 2px; box-shadow: 0 0 0 1px #f59e0b; }
.ctl { unicode-bidi: isolate; font: 600 10px/1 system-ui, sans-serif; color: #fff;
  background: var(--bad); border-radius: 3px; padding: 0 3px; margin: 0 1px;
  vertical-align: 1px; }
.steps { max-height: 68vh; overflow: auto; border: 1px solid var(--line); border-radius: 6px;
  padding: 6px 8px; background: #f8fafc; font: 13px/1.45 ui-monospace, "SFMono-Regular",
  Menlo, Consolas, monospace; unicode-bidi: isolate; }
.step, details.result { white-space: pre-wrap; overflow-wrap: anywhere; margin: 2px 0;
  padding: 3px 6px; border-left: 3px solid var(--line); }
.step .num { color: var(--muted); margin-right: 6px; }
.step .tag { font: 600 11px/1 system-ui, sans-serif; text-transform: uppercase;
  letter-spacing: .03em; color: var(--muted); margin-right: 8px; white-space: nowrap; }
.step.request, .step.final { border-left-color: var(--accent); background: #eff6ff; }
.step.tool-call { border-left-color: var(--warn); background: #fffbeb; }
.step.agent { border-left-color: #7c3aed; }
.step.cut, .step.text { color: var(--muted); border-left-style: dashed; }
details.result { border-left-color: #94a3b8; background: #fff; }
details.result summary { cursor: pointer; color: var(--muted); font: 12px system-ui,
  sans-serif; white-space: normal; }
.result-text { border-top: 1px dashed var(--line); margin-top: 3px; padding-top: 3px; }
.step mark, details.result mark { background: #fde68a; box-shadow: 0 0 0 1px #f59e0b; }
.turn { border: 1px solid var(--line); border-left: 4px solid #cbd5e1; border-radius: 6px;
  background: #fff; margin: 0 0 8px; padding: 4px 6px 6px; }
.turn.flagged { border-color: #fca5a5; border-left-color: var(--bad); background: #fef2f2; }
.turn-head { display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: baseline;
  font: 600 12px/1.6 system-ui, sans-serif; color: var(--muted); text-transform: uppercase;
  letter-spacing: .03em; }
.turn-head .sub { text-transform: none; letter-spacing: 0; }
.flag { color: #fff; background: var(--bad); border-radius: 3px; padding: 0 6px; }
.step.user { border-left-color: var(--accent); background: #eff6ff; }
.step.answer { border-left-color: var(--ok); background: #f0fdf4; }
.turn-steps { margin: 2px 0; padding: 2px 4px 2px 8px; border-left: 3px solid var(--warn); }
.turn-steps > .tag, .step.user .tag, .step.answer .tag { font: 600 11px/1 system-ui,
  sans-serif; text-transform: uppercase; letter-spacing: .03em; color: var(--muted); }
.turn-steps > .tag { display: block; margin: 2px 0; }
details.as-judged, details.fields { margin-top: 8px; }
details.as-judged summary, details.fields summary { cursor: pointer; color: var(--muted);
  font-size: 12.5px; }
dl.run-block { margin: 0 0 6px; }
dl.run-block dd.ok { color: var(--ok); font-weight: 600; }
dl.run-block dd.warn { color: var(--warn); font-weight: 600; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px;
  margin: 8px 0 0; font-size: 12.5px; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
fieldset.metric { border: 1px solid var(--line); border-radius: 8px; background: #fff;
  margin: 0 0 12px; padding: 8px 14px 12px; }
fieldset.metric legend { font-weight: 700; font-size: 15px; padding: 0 4px; }
.verdict { margin: 2px 0 6px; }
.verdict b.UNSAFE { color: var(--bad); }
.verdict b.SAFE { color: var(--ok); }
.verdict b.ERROR { color: var(--warn); }
.rubric { font-size: 13px; margin: 4px 0 8px; }
.rubric p { margin: 2px 0; }
.rubric ul { margin: 2px 0 4px; padding-left: 18px; }
.rubric h4 { margin: 6px 0 0; font-size: 12px; color: var(--muted); text-transform: uppercase;
  letter-spacing: .04em; }
.missing { color: var(--warn); font-size: 12.5px; }
.choices { display: grid; grid-template-columns: 1fr 1fr; gap: 6px; margin: 6px 0; }
.choices label { display: flex; gap: 6px; align-items: center; border: 1px solid var(--line);
  border-radius: 6px; padding: 6px 8px; cursor: pointer; }
.choices label:has(input:checked) { border-color: var(--accent); background: #eff6ff; }
.choices label:has(input:disabled) { opacity: .45; cursor: not-allowed; }
.choices label:focus-within { outline: 2px solid var(--accent); outline-offset: 1px; }
kbd { margin-left: auto; font: 11px/1 ui-monospace, monospace; color: var(--muted);
  border: 1px solid #cbd5e1; border-bottom-width: 2px; border-radius: 4px; padding: 2px 4px; }
.note { display: flex; gap: 8px; align-items: center; font-size: 13px; }
.note input { flex: 1; padding: 5px 8px; border: 1px solid #cbd5e1; border-radius: 6px;
  font: inherit; }
.actions { display: flex; gap: 10px; align-items: center; }
button { font: inherit; font-weight: 600; border-radius: 6px; padding: 7px 16px;
  border: 1px solid #cbd5e1; background: #fff; cursor: pointer; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button kbd { color: inherit; border-color: currentColor; opacity: .8; margin-left: 6px; }
.login { max-width: 360px; margin: 60px auto; }
.login label { display: block; margin: 10px 0 4px; font-weight: 600; }
.login input { width: 100%; padding: 7px 9px; border: 1px solid #cbd5e1; border-radius: 6px;
  font: inherit; }
.login button { margin-top: 14px; width: 100%; }
.empty { text-align: center; padding: 40px 20px; font-size: 15px; }
footer { color: var(--muted); font-size: 12px; margin-top: 10px; }
"""
