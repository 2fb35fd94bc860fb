"""The dashboard's gate panel (gate mode): where this worker placed the records it
read, why it held them, and what waits, read from its telemetry::

    panel = gate_of(telemetry)       # None when the worker never gated a record
    panel.approved, panel.held_by_reason["unsafe"], panel.waiting, panel.held_open
    html = gate_panel(panel)
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from .spend import _samples

__all__ = ["GatePanel", "gate_of", "gate_panel"]


@dataclass(frozen=True)
class GatePanel:
    """This worker's gate counters since it started, and its gauges now."""

    approved: int
    held_by_reason: dict[str, int]
    dlq: int
    released: int
    unjudged: int
    waiting: int
    parked: int
    held_open: int

    @property
    def held(self) -> int:
        return sum(self.held_by_reason.values())


def gate_of(telemetry: Any, *, on: bool) -> GatePanel | None:
    """Read the gate's series of a :class:`~guardrail.stream.telemetry.Telemetry`
    (None when gate mode is off)."""
    if not on:
        return None
    registry = telemetry.registry
    placed = _samples(registry, "guardrail_gate_records_total")
    held: dict[str, int] = {}
    approved = dlq = released = 0
    for labels, value in placed:
        to, reason = labels.get("to"), labels.get("reason", "-")
        if to == "held":
            held[reason] = held.get(reason, 0) + int(value)
        elif to == "dlq":
            dlq += int(value)
        elif reason == "released":
            released += int(value)
        else:
            approved += int(value)

    def gauge(name: str) -> int:
        return int(sum(v for _, v in _samples(registry, name)))

    return GatePanel(approved=approved, held_by_reason=held, dlq=dlq, released=released,
                     unjudged=int(sum(v for _, v in _samples(
                         registry, "guardrail_gate_unjudged_total"))),
                     waiting=gauge("guardrail_gate_waiting"),
                     parked=gauge("guardrail_gate_parked"),
                     held_open=gauge("guardrail_gate_held_open"))


def _tile(label: str, value: int, note: str, css: str = "") -> str:
    return (f'<div class="tile {css}"><div class="tile-label">{escape(label)}</div>'
            f'<div class="tile-value">{value:,}</div><div class="tile-note">{note}</div></div>')


def gate_panel(panel: GatePanel | None) -> str:
    """The panel's HTML (nothing when gate mode is off)."""
    if panel is None:
        return ""
    reasons = ", ".join(f"{escape(r)} {n:,}" for r, n in sorted(panel.held_by_reason.items()))
    unjudged = (f" · {panel.unjudged:,} unjudged (gate_on_error: pass)" if panel.unjudged
                else "")
    tiles = [
        _tile("Approved", panel.approved, f"forwarded as judged safe{unjudged}",
              "warn" if panel.unjudged else ""),
        _tile("Held", panel.held, reasons or "none", "bad" if panel.held else ""),
        _tile("Released", panel.released, "held, then released by a reviewer"),
        _tile("DLQ", panel.dlq, "could not be read: counted as held",
              "warn" if panel.dlq else ""),
        _tile("Waiting", panel.waiting, "read, not yet placed (being judged, or behind an "
              "earlier record of their key)"),
        _tile("Parked", panel.parked, "behind a held record of their key",
              "warn" if panel.parked else ""),
        _tile("Held, to review", panel.held_open, "waiting for a reviewer's answer",
              "warn" if panel.held_open else ""),
    ]
    return ('<section class="card gate" id="gate"><h2>Gate <span class="sub">this worker, '
            'since it started</span></h2><div class="tiles">' + "".join(tiles)
            + "</div></section>")
