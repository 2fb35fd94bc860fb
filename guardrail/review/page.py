"""The review page, rendered on the server: one item, the judged text with the
evidence marked in place, the rubric and the choices beside it. No script at
all; keyboard shortcuts are ``accesskey``\\ s (Alt+key in Chromium, Alt+Shift+key
in Firefox), and Tab / arrow keys / Enter work as in any form::

    html = render_item(offer, viewer, remaining, flash="Saved 2 labels.")
    html = render_empty(viewer, remaining)
    html = render_login(token, next_path="/review", error="wrong name or password")
    response.headers.update(SECURITY_HEADERS)

Every judged string is HTML-escaped piece by piece, with the evidence marked
in place and control characters made visible (:mod:`.marks`). An agent run's
item (one with a ``trajectory``) shows the run as its steps (:mod:`.run_view`), a
session judgment's (one with a ``session``) the conversation as its turns, the
flagged ones marked (:mod:`.session_view`). An item the gate held (gate mode)
first asks release or keep, with why it was held.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from .marks import MAX_MARKS, highlight, show as _show
from .queue import Offer, Remaining
from .records import GateHold, ReviewItem, ReviewMetric
from .run_view import render_run
from .session_view import render_session
from .style import CSS

__all__ = ["Viewer", "render_item", "render_empty", "render_login", "render_message",
           "highlight", "SECURITY_HEADERS", "KEYS", "MAX_MARKS"]

#: No script, nothing fetched, no framing; forms post only here.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",  # judged text stays out of shared and disk caches
}

#: accesskeys of the first four metrics' choices: agree, disagree-safe,
#: disagree-unsafe, skip. Metrics after the fourth are reached with Tab.
KEYS = ("1234", "5678", "qwer", "asdf")
SAVE_KEY, SKIP_ITEM_KEY = "0", "9"
CHOICE_TEXT = {"agree": "Agree", "disagree_safe": "Disagree: it is safe",
               "disagree_unsafe": "Disagree: it is unsafe", "skip": "Skip"}
GATE_KEYS = {"release": "g", "keep": "h", "skip": "j"}
GATE_TEXT = {"release": "Release: forward it to the approved topic",
             "keep": "Keep it held", "skip": "Skip"}
HOLD_TEXT = {"unsafe": "the judge said UNSAFE", "unsure": "P(UNSAFE) was close to the "
             "threshold", "judge_error": "the judge could not judge it",
             "invalid": "part of it could not be read", "budget": "the judge budget left it "
             "unjudged", "session_unsafe": "its conversation was judged UNSAFE"}
SLICE_TEXT = {"error": "the judge failed on it", "unsafe": "the judge said UNSAFE",
              "band": "P(UNSAFE) was close to the threshold",
              "safe": "a random sample of SAFE verdicts"}


@dataclass(frozen=True)
class Viewer:
    """Who is looking, and the CSRF token their forms carry."""

    name: str
    csrf: str
    #: "session" (signed in with the form) or "basic" (HTTP basic auth).
    via: str = "session"


def _count(remaining: Remaining) -> str:
    left = f"{remaining.left:,} left" if remaining.left != 1 else "1 left"
    held = (f' <span class="sub">({remaining.held_by_others:,} held by other reviewers)</span>'
            if remaining.held_by_others else "")
    return f'<span class="count" id="remaining">{left}{held}</span>'


def _header(viewer: Viewer | None, remaining: Remaining | None) -> str:
    count = _count(remaining) if remaining is not None else ""
    who = ""
    if viewer is not None and viewer.via == "session":
        who = (f'<div class="who">signed in as <b>{escape(viewer.name)}</b>'
               f'<form method="post" action="/review/logout">'
               f'<input type="hidden" name="csrf" value="{escape(viewer.csrf)}">'
               f'<button type="submit">Sign out</button></form></div>')
    elif viewer is not None:
        who = (f'<div class="who">signed in as <b>{escape(viewer.name)}</b> '
               '(HTTP basic auth: close the browser to sign out)</div>')
    return (f'<header><h1>guardrail <span>review</span></h1>{count}{who}</header>')


def _document(title: str, body: str, *, refresh: int = 0) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'{meta}<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{escape(title)}</title><style>{CSS}</style></head><body>{body}'
            '</body></html>')


def _notices(flash: str | None, error: str | None) -> str:
    out = f'<p class="flash" role="status">{escape(flash)}</p>' if flash else ""
    return out + (f'<p class="error" role="alert">{escape(error)}</p>' if error else "")


def _whole(item: ReviewItem,
           spans: list[tuple[str, str]]) -> tuple[str, str, set[str]] | None:
    """``(field, html, found)`` of the field shown as its parts: a session's
    transcript as its turns, else an agent run's trajectory as its steps."""
    for name, render in (("session", render_session), ("trajectory", render_run)):
        view = render(item, spans)
        if view is not None:
            return name, *view
    return None


def _fields(item: ReviewItem, metrics: tuple[ReviewMetric, ...]) -> tuple[str, set[str]]:
    spans = [(m.name, s) for m in metrics for s in m.evidence_spans]
    whole = _whole(item, spans)
    parts, found = [], set()
    for name, text in item.fields.items():
        if whole is not None and name == whole[0]:
            continue
        body, seen = highlight(text, spans)
        found |= seen
        parts.append(f'<section class="field" data-field="{escape(name)}"><h3>{escape(name)} '
                     f'<span class="sub">{len(text):,} characters</span></h3>'
                     f'<div class="judged" dir="auto">{body}</div></section>')
    if whole is None:
        return "".join(parts), found
    # A session or an agent run: its turns or steps first. Its other fields (the
    # latest answer, the request, the conversation: the message rubrics' reading)
    # follow folded, and open only when they hold evidence the whole does not.
    shown, html, in_whole = whole
    names = ", ".join(escape(name) for name in item.fields if name != shown)
    others = (f'<details class="fields"{" open" if found - in_whole else ""}><summary>'
              f'Also judged: {names}</summary>{"".join(parts)}</details>') if parts else ""
    return html + others, found | in_whole


def _meta(item: ReviewItem) -> str:
    rows = [("case", item.case_id), ("judge", item.judge_model), ("judged at", item.judged_at)]
    rows += sorted(item.labels.items())
    return '<dl class="meta">' + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>"
                                         for k, v in rows) + "</dl>"


def _verdict(metric: ReviewMetric) -> str:
    verdict = metric.verdict or "ERROR"
    p = (f" · P(UNSAFE) {metric.probability_unsafe:.2f} (threshold {metric.threshold:.2f})"
         if metric.probability_unsafe is not None else "")
    error = f" · {escape(metric.error)}" if metric.error else ""
    why = SLICE_TEXT.get(metric.slice, metric.slice)
    if metric.slice == "safe" and metric.rate < 1:
        why += f" (1 in {1 / metric.rate:,.0f})"
    found = ""
    if metric.judge_violations:
        found = ("<br>violations named: "
                 + "; ".join(escape(v) for v in metric.judge_violations))
    return (f'<p class="verdict">Judge: <b class="{verdict}">{verdict}</b>{p}{error}'
            f'<br><span class="sub">here because {escape(why)}</span>{found}</p>')


def _list(title: str, entries: tuple[str, ...]) -> str:
    if not entries:
        return ""
    return f"<h4>{title}</h4><ul>" + "".join(f"<li>{escape(e)}</li>" for e in entries) + "</ul>"


def _rubric(metric: ReviewMetric, found: set[str]) -> str:
    missing = [s for s in metric.evidence_spans if s.strip() and s not in found]
    note = ('<p class="missing">evidence not found in the text: '
            + "; ".join(f"“{_show(s)}”" for s in missing) + "</p>") if missing else ""
    return (f'<div class="rubric"><p>{escape(metric.goal)}</p>'
            f'{_list("Violations", metric.violations)}'
            f'{_list("Not violations", metric.non_violations)}{note}</div>')


def _choice(index: int, metric: ReviewMetric, choice: str, key: str | None) -> str:
    # The choice that only repeats the judge's verdict (or agrees with no verdict) is off.
    same = {"SAFE": "disagree_safe", "UNSAFE": "disagree_unsafe", None: "agree"}
    disabled = " disabled" if same[metric.verdict] == choice else ""
    required = " required" if choice == "skip" else ""  # one per group makes it required
    access = f' accesskey="{key}"' if key else ""
    hint = f"<kbd>Alt+{key.upper()}</kbd>" if key else ""
    return (f'<label><input type="radio" name="c{index}" value="{choice}"{access}{required}'
            f'{disabled}> {CHOICE_TEXT[choice]}{hint}</label>')


def _metric_form(index: int, metric: ReviewMetric, found: set[str]) -> str:
    keys = KEYS[index] if index < len(KEYS) else None
    choices = "".join(_choice(index, metric, c, keys[k] if keys else None)
                      for k, c in enumerate(CHOICE_TEXT))
    return (f'<fieldset class="metric" data-metric="{escape(metric.name)}">'
            f'<legend>{escape(metric.name)}</legend>{_verdict(metric)}{_rubric(metric, found)}'
            f'<input type="hidden" name="m{index}" value="{escape(metric.name)}">'
            f'<div class="choices" role="radiogroup">{choices}</div>'
            f'<label class="note">Note <input type="text" name="n{index}" maxlength="2000" '
            f'autocomplete="off"></label></fieldset>')


def _held_by(gate: GateHold) -> str:
    rows = []
    for entry in gate.held_by[:20]:
        what = entry.get("metric") or ("unreadable" if "invalid" in entry else "unjudged")
        said = entry.get("verdict") or entry.get("error") or entry.get("invalid") \
            or entry.get("unjudged") or entry.get("session_id") or ""
        rows.append(f"<li>{escape(str(entry.get('case_id', '')))} · {escape(str(what))}: "
                    f"{escape(str(said))}</li>")
    return f'<ul class="held-by">{"".join(rows)}</ul>' if rows else ""


def _gate_form(gate: GateHold) -> str:
    """Release or keep: the question on a held record (or a held session)."""
    what = ("this conversation's later turns are held" if gate.kind == "session"
            else f"held from {escape(gate.source or '')}")
    blocks = ("<br><b>Later records of its key wait for your answer.</b>"
              if gate.blocks_key else "")
    choices = "".join(
        f'<label><input type="radio" name="gate" value="{choice}" accesskey="{key}"'
        f'{" required" if choice == "skip" else ""}> {GATE_TEXT[choice]}'
        f'<kbd>Alt+{key.upper()}</kbd></label>' for choice, key in GATE_KEYS.items())
    reason = HOLD_TEXT.get(gate.reason, gate.reason)
    return (f'<fieldset class="metric gate" data-gate="{escape(gate.reason)}">'
            f'<legend>Held by the gate</legend><p class="verdict">{what}: '
            f'<b class="UNSAFE">{escape(gate.reason)}</b><br><span class="sub">because '
            f'{escape(reason)}</span>{blocks}</p>{_held_by(gate)}'
            f'<div class="choices" role="radiogroup">{choices}</div>'
            '<label class="note">Note <input type="text" name="gate_note" maxlength="2000" '
            'autocomplete="off"></label></fieldset>')


def render_item(offer: Offer, viewer: Viewer, remaining: Remaining, *,
                flash: str | None = None, error: str | None = None) -> str:
    """The page for the item ``viewer`` holds."""
    item = offer.item
    fields, found = _fields(item, offer.metrics)
    metrics = "".join(_metric_form(i, m, found) for i, m in enumerate(offer.metrics))
    if offer.gate_open and item.gate is not None:
        metrics = _gate_form(item.gate) + metrics
    form = (f'<form method="post" action="/review" class="labels">'
            f'<input type="hidden" name="csrf" value="{escape(viewer.csrf)}">'
            f'<input type="hidden" name="case_id" value="{escape(item.case_id)}">{metrics}'
            f'<div class="actions"><button class="primary" type="submit" name="action" '
            f'value="save" accesskey="{SAVE_KEY}">Save<kbd>Alt+{SAVE_KEY}</kbd></button>'
            f'<button type="submit" name="action" value="skip" formnovalidate '
            f'accesskey="{SKIP_ITEM_KEY}">Skip item<kbd>Alt+{SKIP_ITEM_KEY}</kbd></button>'
            '</div></form>')
    body = (f'{_header(viewer, remaining)}{_notices(flash, error)}<main class="review">'
            f'<section class="card text"><h2>Judged text</h2>{fields}{_meta(item)}</section>'
            f'<section class="side">{form}</section></main>'
            '<footer>Held for you until you save or skip it, or for a while after you '
            'leave it. Keys: Alt+1…4 the first metric, Alt+5…8 the second, Alt+Q/W/E/R and '
            'Alt+A/S/D/F the next, Alt+G/H/J release, keep or skip a held record '
            '(Firefox: Alt+Shift+key; Safari: Ctrl+Option+key); Tab '
            'and arrows; Enter in a note saves. '
            'No script runs on this page.</footer>')
    return _document(f"review · {remaining.left:,} left", body)


def render_empty(viewer: Viewer, remaining: Remaining | None, *, flash: str | None = None,
                 loading: str | None = None) -> str:
    """Nothing to show: the queue is done for ``viewer``, or (``loading``) still
    being read from Kafka. Reloads itself."""
    if loading:
        text = f"Reading the review queue from Kafka ({escape(loading)}). One moment…"
    elif remaining is not None and remaining.held_by_others:
        text = ("Nothing left for you right now: the rest is held by other reviewers. "
                "Items come back if they leave them.")
    else:
        text = "Nothing left to review. New items appear here as the worker judges."
    body = (f'{_header(viewer, None if loading else remaining)}{_notices(flash, None)}'
            f'<section class="card empty">{text}</section>')
    return _document("review · nothing left" if not loading else "review · loading", body,
                     refresh=3 if loading else 30)


def render_login(token: str, *, next_path: str = "/review", error: str | None = None,
                 name: str = "") -> str:
    """The sign-in form (its ``token`` is bound to the browser's sign-in cookie)."""
    body = (f'{_header(None, None)}<section class="card login"><h2>Sign in to review</h2>'
            f'{_notices(None, error)}<form method="post" action="/review/login">'
            f'<input type="hidden" name="csrf" value="{escape(token)}">'
            f'<input type="hidden" name="next" value="{escape(next_path)}">'
            f'<label for="name">Name</label><input id="name" name="name" '
            f'autocomplete="username" required autofocus value="{escape(name)}">'
            '<label for="password">Password</label><input id="password" name="password" '
            'type="password" autocomplete="current-password" required>'
            '<button class="primary" type="submit">Sign in</button></form>'
            '<p class="sub">Scripts: HTTP basic auth works on every page.</p></section>')
    return _document("review · sign in", body)


def render_message(title: str, text: str, *, viewer: Viewer | None = None) -> str:
    """A short page saying what went wrong (refused, conflict, not saved)."""
    body = (f'{_header(viewer, None)}<section class="card empty"><h2>{escape(title)}</h2>'
            f'<p>{escape(text)}</p><p><a href="/review">Back to the review queue</a></p>'
            '</section>')
    return _document(f"review · {title}", body)
