"""The dashboard's agreement panel: the judge against its reviewers, per metric
and group, from ``/agreement`` rows (:mod:`guardrail.agents.agreement`)::

    panel = build_agreement(rows, version_label="model_version", problems=problems)
    html = agreement_panel(panel)       # "" without a panel (review off)

For each metric and group, its newest window with reviews: the reviews,
precision and recall with their 95 % intervals, the observed unsafe rate
beside the corrected one (or why there is none), or "not enough reviews:
N of M" while fewer than ``min_reviews`` verdicts are reviewed; every
window below. Rows that do not fit are skipped and named in ``problems``.
Every value from the stream is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from .data import labels_of, utc_clock

__all__ = ["AgreementRow", "AgreementPanel", "build_agreement", "agreement_panel"]

#: Rows of the every-window table shown at most.
MAX_ROWS = 200


class _Figure(BaseModel):
    model_config = ConfigDict(extra="ignore")

    value: float = Field(ge=0, le=1)
    low: float = Field(ge=0, le=1)
    high: float = Field(ge=0, le=1)


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore")

    metric: str = Field(min_length=1)
    group: str
    window_start: AwareDatetime
    window_end: AwareDatetime
    reviewed: int = Field(ge=0)
    reviewed_verdicts: dict[str, int] = {}
    enough_reviews: bool = True
    min_reviews: int = Field(default=0, ge=0)
    precision: _Figure | None = None
    recall: _Figure | None = None
    observed_unsafe_rate: float | None = None
    corrected_unsafe_rate: _Figure | None = None
    corrected_note: str | None = None


@dataclass(frozen=True)
class AgreementRow:
    """One metric, group and window, as the panel shows it."""

    metric: str
    group: str
    family: str
    version: str
    start: float
    end: float
    reviewed: int
    judged_reviews: int
    enough: bool
    min_reviews: int
    precision: _Figure | None
    recall: _Figure | None
    observed: float | None
    corrected: _Figure | None
    corrected_note: str | None


@dataclass(frozen=True)
class AgreementPanel:
    """Every row, newest window first; ``latest`` one per metric and group."""

    rows: tuple[AgreementRow, ...]

    @property
    def latest(self) -> list[AgreementRow]:
        seen: dict[tuple[str, str], AgreementRow] = {}
        for row in self.rows:
            seen.setdefault((row.metric, row.group), row)
        return sorted(seen.values(), key=lambda r: (r.metric, r.family, r.version))


def _row(row: _Row, version_label: str) -> AgreementRow:
    labels = labels_of(row.group)
    family = ", ".join(f"{k}={v}" for k, v in labels.items()
                       if k != version_label and v != "-") or "all traffic"
    verdicts = row.reviewed_verdicts
    return AgreementRow(
        metric=row.metric, group=row.group, family=family,
        version=labels.get(version_label, "-"), start=row.window_start.timestamp(),
        end=row.window_end.timestamp(), reviewed=row.reviewed,
        judged_reviews=verdicts.get("unsafe", 0) + verdicts.get("safe", 0),
        enough=row.enough_reviews, min_reviews=row.min_reviews, precision=row.precision,
        recall=row.recall, observed=row.observed_unsafe_rate,
        corrected=row.corrected_unsafe_rate, corrected_note=row.corrected_note)


def build_agreement(rows: Iterable[Any], *, version_label: str,
                    problems: list[str]) -> AgreementPanel:
    """Check ``/agreement`` rows; bad ones become problems."""
    parsed = []
    for i, raw in enumerate(rows):
        try:
            parsed.append(_row(_Row.model_validate(raw), version_label))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "value"
            problems.append(f"agreement row {i + 1} skipped: {where}: {first['msg']}")
    parsed.sort(key=lambda r: (-r.start, r.metric, r.family, r.version))
    return AgreementPanel(rows=tuple(parsed))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _figure(figure: _Figure | None) -> str:
    if figure is None:
        return '<span class="sub">–</span>'
    return (f'{_pct(figure.value)} <span class="sub">({_pct(figure.low)}–'
            f'{_pct(figure.high)})</span>')


def _cells(row: AgreementRow) -> str:
    if row.enough:
        figures = (f'<td class="rate">{_figure(row.precision)}</td>'
                   f'<td class="rate">{_figure(row.recall)}</td>')
    else:
        figures = (f'<td colspan="2" class="sub">not enough reviews: {row.judged_reviews:,} '
                   f'of {row.min_reviews:,}</td>')
    corrected = (_figure(row.corrected) if row.corrected is not None
                 else f'<span class="sub">{escape(row.corrected_note or "–")}</span>')
    return (f'<td>{escape(row.metric)}</td><td>{escape(row.family)}</td>'
            f'<td><b>{escape(row.version)}</b></td>'
            f'<td class="nowrap">{utc_clock(row.start)}–{utc_clock(row.end)}</td>'
            f'<td class="num">{row.reviewed:,}</td>{figures}'
            f'<td class="rate">{_pct(row.observed)}</td>'
            # A note (no corrected rate) must wrap: the rate cells do not.
            f'<td class="{"rate" if row.corrected is not None else "note"}">{corrected}</td>')


_HEAD = ('<thead><tr><th>metric</th><th>group</th><th>version</th><th>window (UTC)</th>'
         '<th>reviewed</th><th>precision (95%)</th><th>recall (95%)</th>'
         '<th>observed unsafe</th><th>corrected unsafe (95%)</th></tr></thead>')


def agreement_panel(panel: AgreementPanel | None) -> str:
    """The panel's HTML section; "" when there is no panel (review off)."""
    if panel is None:
        return ""
    if not panel.rows:
        return ('<section class="card agreement"><h2>Judge vs reviewers</h2><p class="empty">'
                'No reviewed label in any unexpired window yet.</p></section>')
    latest = "".join(f'<tr class="agreement-row" data-metric="{escape(r.metric)}" '
                     f'data-group="{escape(r.group)}">{_cells(r)}</tr>' for r in panel.latest)
    every = "".join(f"<tr>{_cells(r)}</tr>" for r in panel.rows[:MAX_ROWS])
    more = (f'<p class="sub">… and {len(panel.rows) - MAX_ROWS} more</p>'
            if len(panel.rows) > MAX_ROWS else "")
    return ('<section class="card agreement"><h2><span style="white-space: nowrap">'
            'Judge vs reviewers</span> <span class="sub">newest reviewed window per metric and group · reviews '
            'weighted by their sampling rate · corrected for the judge\'s sensitivity and '
            f'specificity</span></h2><table class="agreement">{_HEAD}<tbody>{latest}</tbody>'
            f'</table><details><summary>Every reviewed window ({len(panel.rows)} rows)'
            f'</summary><table class="agreement">{_HEAD}<tbody>{every}</tbody></table>{more}'
            '</details></section>')
