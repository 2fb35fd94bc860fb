"""The dashboard's gate panel, from a worker's telemetry: where records went, why
they were held, what waits; nothing when gate mode is off."""

from __future__ import annotations

from guardrail.stream.dashboard import build_dashboard, render_page
from guardrail.stream.dashboard.gate import gate_of
from guardrail.stream.dashboard.page import PageContext
from guardrail.stream.telemetry import Telemetry


def _telemetry() -> Telemetry:
    t = Telemetry()
    t.gate_records.labels(to="approved", reason="-").inc(40)
    t.gate_records.labels(to="held", reason="unsafe").inc(3)
    t.gate_records.labels(to="held", reason="judge_error").inc(2)
    t.gate_records.labels(to="dlq", reason="invalid").inc(1)
    t.gate_records.labels(to="approved", reason="released").inc(1)
    t.gate_unjudged.inc(0)
    t.gate_waiting.set(7)
    t.gate_parked.set(2)
    t.gate_held_open.set(4)
    return t


def test_the_panel_counts_each_place_and_each_reason():
    panel = gate_of(_telemetry(), on=True)
    assert (panel.approved, panel.held, panel.dlq, panel.released) == (40, 5, 1, 1)
    assert panel.held_by_reason == {"unsafe": 3, "judge_error": 2}
    assert (panel.waiting, panel.parked, panel.held_open) == (7, 2, 4)
    assert gate_of(_telemetry(), on=False) is None


def test_the_page_shows_the_panel_only_in_gate_mode():
    for on in (True, False):
        data = build_dashboard([], [], window_seconds=300, version_label="model_version",
                               gate=gate_of(_telemetry(), on=on))
        html = render_page(data, PageContext(refresh_seconds=0))
        assert ('id="gate"' in html) is on
    data = build_dashboard([], [], window_seconds=300, version_label="model_version",
                           gate=gate_of(_telemetry(), on=True))
    html = render_page(data, PageContext(refresh_seconds=0))
    assert "judge_error 2, unsafe 3" in html and ">40<" in html
