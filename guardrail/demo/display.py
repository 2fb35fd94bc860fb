"""How the demo shows results and alerts on the terminal (pure formatting)::

    result_line(record)   # "v1  v1-refund  bias=SAFE  toxicity=UNSAFE ('idiot')"
    alert_lines(alert)    # ["!! ALERT toxicity for model=shop-assistant", ...]
    alert_lines(alert, shown={"v2-refund"})   # examples: only answers already on screen
    excerpt("Read the manual before you ask again, you idiot")  # "Read the manual before you…"
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["result_line", "alert_lines", "example_ids", "excerpt", "EXCERPT_CHARS"]

#: Longest evidence excerpt on a result line; longer spans end at a word with "…".
EXCERPT_CHARS = 40


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The whole span when it fits, else at most ``limit`` characters of it, cut at a
    word boundary, plus "…"."""
    text = " ".join(text.split())  # one line: a span may hold newlines
    if len(text) <= limit:
        return text
    cut = text[:limit + 1]  # one more character: is the limit itself a word's end?
    space = cut.rfind(" ")
    # One long word (a URL, say) has no boundary worth keeping: then cut it.
    head = cut[:space] if space >= limit // 2 else text[:limit]
    return head.rstrip(" ,;:.-") + "…"


def _metric_text(metric: dict[str, Any]) -> str:
    if metric.get("error"):
        return f"{metric['name']}=ERROR"
    verdict = (metric.get("result") or [{}])[0]
    text = f"{metric['name']}={verdict.get('verdict', '?')}"
    spans = verdict.get("evidence_spans") or []
    if verdict.get("verdict") == "UNSAFE" and spans:
        text += f" ({excerpt(spans[0])!r})"
    return text


def result_line(record: dict[str, Any]) -> str:
    """``v1  v1-refund  bias=SAFE  toxicity=UNSAFE ('idiot')``"""
    version = (record.get("metadata") or {}).get("model_version", "-")
    metrics = "  ".join(_metric_text(m) for m in record.get("metrics", []))
    return f"{version:<3} {str(record.get('case_id'))[:24]:<24} {metrics}"


def example_ids(alert: dict[str, Any]) -> list[str]:
    """The case ids the alert gives as examples."""
    return [str(e.get("case_id")) for e in alert.get("examples") or []]


def alert_lines(alert: dict[str, Any], shown: Collection[str] | None = None) -> list[str]:
    """A readable alert: what, for whom, why, and example cases; with ``shown``,
    only the examples among those case ids (answers whose line the reader has seen)."""
    group = " ".join(f"{k}={v}" for k, v in (alert.get("group") or {}).items() if v != "-")
    counts = alert.get("counts") or {}
    examples = [e for e in example_ids(alert) if shown is None or e in shown]
    lines = [f"!! ALERT {alert.get('metric')} for {group}"]
    lines += [f"   {reason}" for reason in alert.get("reasons") or []]
    lines.append(f"   {counts.get('unsafe')} of {counts.get('judged')} judged unsafe in the "
                 f"window from {(alert.get('window') or {}).get('start')}"
                 + (f"; e.g. {', '.join(examples)}" if examples else ""))
    return lines
