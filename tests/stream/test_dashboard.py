"""The /dashboard page without a browser: judgment events counted by the real
WindowCounter into a stand-in window table, read back through ``current_rates``
(the /rates rows) and the dispatcher's recent alerts, then checked and drawn
(guardrail.stream.dashboard) and served (guardrail.agents.dashboard)."""

from __future__ import annotations

import math
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from guardrail.agents.dashboard import BadRequest, parse_refresh, render
from guardrail.agents.web import current_rates
from guardrail.agents.windows import WindowCounter
from guardrail.config.settings import load_settings
from guardrail.stream.alerts import AlertDispatcher
from guardrail.stream.dashboard import PageContext, build_dashboard, render_page, spend_of
from guardrail.stream.dashboard.charts import Frame
from guardrail._event_time import utc_iso
from guardrail.stream.envelope import Source
from guardrail.stream.events import JudgmentEvent, window_key
from guardrail.stream.telemetry import Telemetry

WINDOW = 300.0
T0 = 1_800_000_000 - 1_800_000_000 % 300  # a window start


class Elements(HTMLParser):
    """Every element with its attributes and its own text, in document order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[list[str]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        text: list[str] = []
        self.found.append((tag, dict(attrs), text))
        if tag not in ("meta", "rect", "path", "line", "polyline", "br", "input"):
            self._open.append(text)

    def handle_endtag(self, tag):
        if self._open and tag not in ("meta", "rect", "path", "line", "polyline", "br"):
            self._open.pop()

    def handle_data(self, data):
        if self._open:
            self._open[-1].append(data)

    def with_class(self, name: str) -> list[tuple[str, dict[str, str], list[str]]]:
        return [e for e in self.found if name in e[1].get("class", "").split()]


class WindowTable:
    """Faust's windowed table as the counter and ``current_rates`` see it: cells
    keyed ``(key, (start, end))``; ``now`` selects the current window."""

    def __init__(self, size: float) -> None:
        self.size, self.now, self.data = size, 0.0, {}

    def _span(self, at: float) -> tuple[float, float]:
        start = math.floor(at / self.size) * self.size
        return (start, start + self.size)

    def __getitem__(self, key):
        def at(seconds_back: float) -> dict:
            return self.data.get((key, self._span(self.now - seconds_back)), {})
        return SimpleNamespace(current=lambda: at(0), delta=at)

    def __setitem__(self, key, value):
        self.data[(key, self._span(self.now))] = value


def _settings(**overrides):
    values = dict(window_seconds=WINDOW, group_labels=["model", "model_version"],
                  alert_rules=[{"metric": "toxicity", "max_unsafe_rate": None,
                                "min_judgments": 20, "baseline_version": "v1",
                                "baseline_windows": 3, "significance": 0.01}])
    values.update(overrides)
    return load_settings(environ={}, **values)


def _traffic(counter: WindowCounter, table: WindowTable) -> None:
    """Four windows of v1 (5 % toxic); v2 from the third window on, 50 % toxic."""
    offsets = {"v1": 0, "v2": 0}
    for w in range(4):
        for version in ("v1", "v2"):
            if version == "v2" and w < 2:
                continue
            for k in range(40):
                toxic = k < (2 if version == "v1" else 20)
                table.now = T0 + w * WINDOW + 1 + k
                for metric in ("toxicity", "bias"):
                    status = "unsafe" if toxic and metric == "toxicity" else "safe"
                    offsets[version] += 1
                    counter.apply(JudgmentEvent(
                        metric=metric, group={"model": "bot", "model_version": version},
                        status=status, case_id=f"{version}-{w}-{k}",
                        event_time_ms=int(table.now * 1000), evidence_spans=("idiot",),
                        source=Source("in", 0 if version == "v1" else 1, offsets[version])),
                        table.now)


@pytest.fixture
async def scenario():
    """The rows and alerts a worker holds after the traffic above."""
    settings = _settings()
    table = WindowTable(WINDOW)
    dispatcher = AlertDispatcher(webhook_url=None, timeout=1)
    telemetry = Telemetry()
    _traffic(WindowCounter(settings.windows, table, telemetry=telemetry, dispatcher=dispatcher),
             table)
    await dispatcher.drain(1)
    return SimpleNamespace(settings=settings, rows=current_rates(table),
                           alerts=dispatcher.recent_alerts(), telemetry=telemetry)


def _page(scenario, **kwargs):
    data = build_dashboard(scenario.rows, scenario.alerts, window_seconds=WINDOW,
                           version_label="model_version", spend=spend_of(scenario.telemetry),
                           rules=scenario.settings.windows.alert_rules, **kwargs)
    return data, render_page(data, PageContext(refresh_seconds=0))


async def test_each_metric_gets_one_line_per_group_and_the_versions_side_by_side(scenario):
    data, html = _page(scenario)
    assert data.metrics == ("bias", "toxicity")
    tox = data.series("toxicity")
    assert [(s.family, s.version, len(s.cells)) for s in tox] == [("model=bot", "v1", 4),
                                                                    ("model=bot", "v2", 2)]
    assert [c.rate for c in tox[1].cells] == [0.5, 0.5]
    [(family, versions)] = data.versions("toxicity").items()
    assert family == "model=bot"
    v1, v2 = versions
    assert (v1.version, v1.judged, v1.unsafe) == ("v1", 160, 8)
    assert (v2.version, v2.judged, v2.unsafe, v2.alerts) == ("v2", 80, 40, 1)
    page = Elements(html)
    charts = {e[1]["data-metric"]: e for e in page.with_class("rate-chart")}
    assert set(charts) == {"bias", "toxicity"}
    lines = [e[1]["data-version"] for e in page.with_class("series")]
    assert lines == ["v1", "v2", "v1", "v2"]  # bias, then toxicity
    labels = ["".join(e[2]) for e in page.with_class("series-label")]
    assert sorted(labels) == ["v1", "v1", "v2", "v2"]  # top to bottom in each chart
    boxes = page.with_class("version")
    assert [b[1]["data-version"] for b in boxes] == ["v1", "v2", "v1", "v2"]
    assert "+45.0 pts vs v1" in html  # toxicity: 50 % against 5 %


async def test_the_alert_is_marked_on_its_window_and_listed_without_evidence(scenario):
    assert len(scenario.alerts) == 1
    data, html = _page(scenario)
    [alert] = data.alerts
    assert (alert.metric, alert.version, alert.start) == ("toxicity", "v2", T0 + 2 * WINDOW)
    page = Elements(html)
    [mark] = page.with_class("alert-mark")
    assert (mark[1]["data-version"], mark[1]["data-alert-id"]) == ("v2", alert.alert_id)
    [band] = page.with_class("alert-band")
    frame = Frame.for_windows(data.window_starts, WINDOW)
    assert float(band[1]["x"]) == pytest.approx(frame.x(T0 + 2 * WINDOW), abs=0.1)
    assert float(band[1]["width"]) == pytest.approx(frame.x(T0 + WINDOW) - frame.x(T0), abs=0.2)
    [ring] = page.with_class("alert-ring")
    assert ring[1]["data-version"] == "v2"
    [row] = page.with_class("alert-row")
    assert row[1]["data-alert-id"] == alert.alert_id
    assert "v2-2-0" in html and "regression vs baseline" in html
    assert "model_version v1" in html  # what it was compared with
    assert "idiot" not in html  # evidence spans are output text: not on the page


async def test_coverage_reads_seen_and_judged_when_rows_carry_them(scenario):
    rows = [dict(r) for r in scenario.rows]
    data, _ = _page(scenario)
    assert sum(c.seen for c in data.cells) == sum(c.judged for c in data.cells) == 480
    # Sampling adds the messages seen and judged per row; the page follows them.
    for row in rows:
        row["seen"] = row["total"] * 4
    sampled = build_dashboard(rows, [], window_seconds=WINDOW, version_label="model_version")
    assert sum(c.seen for c in sampled.cells) == 1920
    assert sum(c.judged for c in sampled.cells) == 480
    page = Elements(render_page(sampled, PageContext()))
    bars = page.with_class("coverage-bar")
    assert len(bars) == 8  # 4 windows x 2 metrics
    seen = [e for e in page.found if e[1].get("class") == "seen"]
    judged = [e for e in page.found if e[1].get("class") == "judged"]
    assert float(seen[0][1]["height"]) == pytest.approx(4 * float(judged[0][1]["height"]))
    assert "of 1,920 seen" in render_page(sampled, PageContext())


def test_judge_errors_are_shown_and_never_drawn_as_a_safe_window():
    key = window_key("toxicity", {"model": "bot", "model_version": "v1"})
    table = SimpleNamespace(data={(key, (T0, T0 + WINDOW)): {"total": 10, "unsafe": 2,
                                                             "errors": 2},
                                  (key, (T0 + WINDOW, T0 + 2 * WINDOW)): {"total": 5,
                                                                          "errors": 5}})
    data = build_dashboard(current_rates(table), [], window_seconds=WINDOW,
                           version_label="model_version")
    first, second = data.series("toxicity")[0].cells
    assert (first.judged, first.errors, first.rate) == (8, 2, 0.25)
    assert (second.judged, second.rate) == (0, None)
    page = Elements(render_page(data, PageContext()))
    assert len(page.with_class("point")) == 1  # no verdict: no point, not 0 %
    tiles = {"".join(t[2]).strip(): t for t in page.with_class("tile-label")}
    assert "Judge errors" in tiles
    values = ["".join(e[2]) for e in page.with_class("tile-value")]
    assert values[:3] == ["8", "2", "7"]  # judged, unsafe, judge errors


def test_a_line_breaks_where_a_window_is_missing():
    key = window_key("bias", {"model": "bot"})
    cells = {(key, (T0 + w * WINDOW, T0 + (w + 1) * WINDOW)): {"total": 4, "unsafe": 1}
             for w in (0, 1, 3)}
    data = build_dashboard(current_rates(SimpleNamespace(data=cells)), [],
                           window_seconds=WINDOW, version_label="model_version")
    page = Elements(render_page(data, PageContext()))
    lines = [e for e in page.found if e[1].get("class") == "series-line"]
    assert [len(line[1]["points"].split()) for line in lines] == [2, 1]


def test_bad_rows_and_alerts_are_named_and_skipped_never_drawn():
    good = {"metric": "toxicity", "group": "model=bot", "window_start": utc_iso(T0 * 1000),
            "window_end": utc_iso((T0 + WINDOW) * 1000), "total": 4, "unsafe": 1, "errors": 0}
    rows = [good, {**good, "total": -1}, {**good, "window_start": "yesterday"},
            {k: v for k, v in good.items() if k != "metric"}, {**good, "unsafe": 9},
            {**good, "total": 2, "unsafe": 0}, "not a row"]
    alerts = [{"metric": "toxicity", "group": {"model": "bot"}}]
    data = build_dashboard(rows, alerts, window_seconds=WINDOW, version_label="model_version")
    assert [(c.seen, c.unsafe) for c in data.cells] == [(4, 1)]  # the larger duplicate
    problems = " | ".join(data.problems)
    for fragment in ("rate row 2 skipped: total", "rate row 3 skipped: window_start",
                     "rate row 4 skipped: metric", "rate row 5 skipped: 9 unsafe",
                     "rate row 7 skipped", "1 rate row(s) repeat a window",
                     "alert 1 skipped: window"):
        assert fragment in problems, problems
    page = Elements(render_page(data, PageContext()))
    [box] = page.with_class("problems")
    assert box[1]["role"] == "alert"
    assert len(page.with_class("point")) == 1


def test_text_from_the_stream_is_escaped_everywhere():
    evil = '<script>alert("x")</script>'
    group = window_key("tox", {"model": evil, "model_version": f'v"{evil}'})
    row = {"metric": "tox", "group": group.partition("|")[2],
           "window_start": utc_iso(T0 * 1000), "window_end": utc_iso((T0 + WINDOW) * 1000),
           "total": 30, "unsafe": 30, "errors": 0}
    alert = {"alert_id": evil, "metric": "tox", "group": {"model": evil},
             "window": {"start": row["window_start"], "end": row["window_end"]},
             "reasons": [evil], "rate": 1.0, "examples": [{"case_id": evil}]}
    data = build_dashboard([row, {**row, "metric": evil}], [alert], window_seconds=WINDOW,
                           version_label="model_version")
    html = render_page(data, PageContext(app_id=evil, input_topic=evil))
    assert "<script" not in html
    assert "&lt;script&gt;" in html
    page = Elements(html)
    assert not [e for e in page.found if e[0] == "script"]
    assert {e[1]["data-metric"] for e in page.with_class("rate-chart")} == {"tox", evil}


def test_an_empty_worker_says_there_is_no_data_yet():
    data = build_dashboard([], [], window_seconds=WINDOW, version_label="model_version")
    html = render_page(data, PageContext(input_topic="model-outputs", refresh_seconds=5))
    page = Elements(html)
    assert page.with_class("empty-state") and not page.with_class("rate-chart")
    assert "No data yet" in html and "model-outputs" in html
    assert "No alert fired" in html
    assert '<meta http-equiv="refresh" content="5">' in html
    assert "http-equiv" not in render_page(data, PageContext(refresh_seconds=0))


def test_spend_and_verdicts_come_from_the_workers_telemetry():
    telemetry = Telemetry()
    telemetry.cost.inc(0.0125)
    telemetry.tokens.labels(direction="input").inc(1200)
    telemetry.tokens.labels(direction="output").inc(80)
    telemetry.unpriced.inc(3)
    group = telemetry.groups.group_of({"model": "bot", "model_version": "v1"})
    for metric in ("toxicity", "toxicity", "bias"):
        telemetry.groups.count(metric, "error", group)
    telemetry.messages.labels(outcome="dlq").inc(4)
    telemetry.paused.set(1)
    telemetry.effective_sample_rate.set(0.25)
    telemetry.budget_alerts.labels(state="throttled").inc(2)
    spend = spend_of(telemetry)
    assert spend.effective_sample_rate == 0.25
    assert spend.budget_alerts == {"throttled": 2, "restored": 0}
    assert (spend.cost_usd, spend.input_tokens, spend.output_tokens) == (0.0125, 1200, 80)
    assert (spend.unpriced_calls, spend.verdicts, spend.messages) == (
        3, {"error": 3}, {"judged": 0, "not_sampled": 0, "dlq": 4})
    assert spend.judge_paused
    html = render_page(build_dashboard([], [], window_seconds=WINDOW, version_label="v",
                                       spend=spend), PageContext())
    assert "$0.0125" in html and "1,200 tokens in" in html and "3 calls without" in html
    assert "judge paused" in html
    assert "Sample rate (this worker)" in html and "25" in html
    assert "budget alerts: 2 lowered · 0 restored" in html


async def test_the_dispatcher_keeps_a_bounded_list_of_recent_alerts():
    dispatcher = AlertDispatcher(webhook_url=None, timeout=1, recent=3)
    for i in range(5):
        dispatcher.dispatch({"alert_id": str(i), "metric": "m", "group": {}})
    await dispatcher.drain(1)
    assert [a["alert_id"] for a in dispatcher.recent_alerts()] == ["4", "3", "2"]


@pytest.mark.parametrize("value,expected", [(None, 5), ("", 5), ("0", 0), ("30", 30)])
def test_refresh_parameter(value, expected):
    assert parse_refresh(value) == expected


@pytest.mark.parametrize("value", ["-1", "abc", "2.5", "3601"])
def test_a_bad_refresh_parameter_is_refused_with_the_reason(value):
    with pytest.raises(BadRequest, match="refresh must be a whole number of seconds"):
        parse_refresh(value)


def _runtime(scenario):
    return SimpleNamespace(settings=scenario.settings, telemetry=scenario.telemetry)


async def test_any_row_source_plugs_in_sync_or_async(scenario):
    async def fleet_rows():
        return scenario.rows

    for rows in (lambda: scenario.rows, fleet_rows):
        status, html = await render(_runtime(scenario), rows=rows,
                                    alerts=lambda: scenario.alerts, context=PageContext())
        assert status == 200
        assert len(Elements(html).with_class("alert-mark")) == 1


async def test_a_failing_source_gives_a_page_that_says_why(scenario):
    def broken():
        raise ConnectionError("peer 10.0.0.7:6066 unreachable")

    status, html = await render(_runtime(scenario), rows=broken, alerts=lambda: "oops",
                                context=PageContext())
    assert status == 503
    assert "could not read the window rates: ConnectionError: peer 10.0.0.7:6066" in html
    assert "could not read the alerts: expected a list, got str" in html
    assert "No data yet" in html


def test_a_budget_alert_is_no_window_alert_and_no_problem(scenario):
    budget = {"alert_id": "b1", "kind": "budget", "state": "throttled", "reasons": ["spend"],
              "effective_sample_rate": 0.5, "fired_at": utc_iso(T0 * 1000)}
    data = build_dashboard(scenario.rows, [*scenario.alerts, budget], window_seconds=WINDOW,
                           version_label="model_version")
    assert not data.problems and "b1" not in {a.alert_id for a in data.alerts}
    assert len(data.alerts) == len(scenario.alerts)


def test_session_cells_are_their_own_lines_and_rows_and_their_alerts_say_session():
    """Cells of session judgments (unit=session) are a family of their own, never
    joined to their turns'; the windows and alerts tables give every row its unit."""
    turns = window_key("toxicity", {"model": "bot", "model_version": "v1"})
    sessions = window_key("toxicity", {"model": "bot", "model_version": "v1", "unit": "session"})
    bounds = (T0, T0 + WINDOW)
    table = SimpleNamespace(data={(turns, bounds): {"total": 40, "unsafe": 2},
                                  (sessions, bounds): {"total": 4, "unsafe": 2}})
    alert = {"alert_id": "b" * 32, "kind": "regression", "metric": "toxicity",
             "group": {"model": "bot", "model_version": "v1", "unit": "session"},
             "unit": "session", "reasons": ["unsafe rate 50.0% above 20.0%"], "rate": 0.5,
             "window": {"start": utc_iso(T0 * 1000), "end": utc_iso((T0 + WINDOW) * 1000)}}
    data = build_dashboard(current_rates(table), [alert], window_seconds=WINDOW,
                           version_label="model_version")
    assert sorted((s.family, s.cells[0].unit, s.cells[0].rate)
                  for s in data.series("toxicity")) == [
        ("model=bot", "turn", 0.05), ("model=bot, unit=session", "session", 0.5)]
    assert set(data.versions("toxicity")) == {"model=bot", "model=bot, unit=session"}
    (shown,) = data.alerts
    assert shown.unit == "session"
    page = Elements(render_page(data, PageContext()))
    assert _column(page, "alerts", "unit") == ["session"]
    assert sorted(_column(page, "windows", "unit")) == ["session", "turn"]


def _column(page: Elements, table: str, name: str) -> list[str]:
    """The cells of one column of the page's table of class ``table``."""
    start = next(i for i, e in enumerate(page.found)
                 if e[0] == "table" and e[1].get("class") == table)
    end = next((i for i, e in enumerate(page.found[start + 1:], start + 1) if e[0] == "table"),
               len(page.found))
    header = ["".join(e[2]) for e in page.found[start:end] if e[0] == "th"]
    rows = [e for e in page.found[start:end] if e[0] == "tr"][1:]
    cells = ["".join(e[2]).strip() for e in page.found[start:end] if e[0] == "td"]
    width = len(cells) // len(rows)
    assert width == len(header)
    return cells[header.index(name)::width]


async def test_stalled_partitions_show_at_the_top_and_not_while_the_judge_is_paused(scenario):
    from guardrail.stream.liveness import LivenessReport, PartitionStatus

    stalled = PartitionStatus("in-<b>", 0, 1234, 50, 130.4, stalled=True)
    busy = PartitionStatus("in-<b>", 1, 900, 77, 0.0, stalled=False)
    runtime = SimpleNamespace(settings=scenario.settings, telemetry=scenario.telemetry,
                              state={"liveness_report": LivenessReport((stalled, busy))})
    status, html = await render(runtime, rows=lambda: scenario.rows,
                                alerts=lambda: scenario.alerts, context=PageContext())
    assert len(Elements(html).with_class("stalled")) == 1
    section = html[html.index('class="problems stalled"'):html.index('class="tiles"')]
    assert status == 200 and "Stalled: 1 partition of this worker" in section
    assert "<code>in-&lt;b&gt;</code> partition 0: lag 1,234, no committed progress for 130 s" \
        in section
    assert "partition 1" not in section
    scenario.telemetry.paused.set(1)  # an outage explains the wait: the judge panel says so
    try:
        _, html = await render(runtime, rows=lambda: scenario.rows,
                               alerts=lambda: scenario.alerts, context=PageContext())
    finally:
        scenario.telemetry.paused.set(0)
    assert not Elements(html).with_class("stalled") and "judge paused" in html
