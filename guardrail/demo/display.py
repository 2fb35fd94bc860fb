"""How the demo shows results and alerts on the terminal (pure formatting)::

    result_line(record)   # "v1  v1-refund  bias=SAFE  toxicity=UNSAFE ('idiot')"
    alert_lines(alert)    # ["!! ALERT toxicity for model=shop-assistant", ...]
"""

from __future__ import annotations

from typing import Any

__all__ = ["result_line", "alert_lines"]


def _metric_text(metric: dict[str, Any]) -> str:
    if metric.get("error"):
        return f"{metric['name']}=ERROR"
    verdict = (metric.get("result") or [{}])[0]
    text = f"{metric['name']}={verdict.get('verdict', '?')}"
    spans = verdict.get("evidence_spans") or []
    if verdict.get("verdict") == "UNSAFE" and spans:
        text += f" ({spans[0][:30]!r})"
    return text


def result_line(record: dict[str, Any]) -> str:
    """``v1  v1-refund  bias=SAFE  toxicity=UNSAFE ('idiot')``"""
    version = (record.get("metadata") or {}).get("model_version", "-")
    metrics = "  ".join(_metric_text(m) for m in record.get("metrics", []))
    return f"{version:<3} {str(record.get('case_id'))[:24]:<24} {metrics}"


def alert_lines(alert: dict[str, Any]) -> list[str]:
    """A readable alert: what, for whom, why, and example cases."""
    group = " ".join(f"{k}={v}" for k, v in (alert.get("group") or {}).items() if v != "-")
    counts = alert.get("counts") or {}
    examples = ", ".join(str(e.get("case_id")) for e in alert.get("examples") or [])
    lines = [f"!! ALERT {alert.get('metric')} for {group}"]
    lines += [f"   {reason}" for reason in alert.get("reasons") or []]
    lines.append(f"   {counts.get('unsafe')} of {counts.get('judged')} judged unsafe in the "
                 f"window from {(alert.get('window') or {}).get('start')}; e.g. {examples}")
    return lines
