"""/dashboard in a real headless browser, and the monitoring files against a
live worker's /metrics.

One worker on the embedded broker, judged by the stand-in rule judge, gets
six one-minute windows of a support bot's answers: ``v1`` throughout (a rude
slip now and then, and one answer the judge fails on), then ``v2`` from the
fourth window on, a half to three quarters of its answers rude (the demo's
sample answers), so the regression rule against ``v1`` fires. Chromium
(the Debian package, driven by Playwright) then opens the page.

Skipped, saying why, without Playwright or without Chromium
(``apt-get install chromium``; or ``GUARDRAIL_CHROMIUM=/path/to/chrome``).
``GUARDRAIL_DASHBOARD_SCREENSHOT=docs/img/dashboard.png`` also saves a
screenshot of the page (how docs/img/dashboard.png is made).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
import urllib.request
from types import SimpleNamespace

import pytest
from support.harness import StreamEnv, consume, produce
from support.monitoring import unknown_references

from guardrail.demo.runner import load_samples
from guardrail.local.rule_judge import ContentReply

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

WINDOW = 60
WINDOWS = 6
V2_FROM = 3
PER_WINDOW = 24
RULE = {"metric": "toxicity", "max_unsafe_rate": None, "min_judgments": 20,
        "baseline_version": "v1", "baseline_windows": 3, "significance": 0.01}


def _message(case_id: str, output: str, version: str, ts: float) -> tuple:
    value = {"case_id": case_id, "output": output,
             "metadata": {"model": "support-bot", "model_version": version}}
    return case_id.encode(), json.dumps(value).encode(), int(ts * 1000)


#: v2's rude answers per window (a release that gets worse), by position in the window.
V2_RUDE = {3: lambda k: k % 2 == 1, 4: lambda k: k % 3 != 0, 5: lambda k: k % 4 != 0}
#: The stand-in judge answers nonsense for outputs holding this: a judge error.
GARBLE = "GARBLE-ME"


def _traffic(base: float) -> tuple[list[tuple], list[tuple]]:
    samples = load_samples()
    polite = [s for s in samples if s["version"] == "v1"]
    rude = [s for s in samples if s["version"] == "v2"]
    v1, v2 = [], []
    for w in range(WINDOWS):
        for k in range(PER_WINDOW):
            ts = base + w * WINDOW + 1 + k * 2
            slip = k == 7 or (k == 17 and w in (1, 4))  # "idiot": v1 is rarely rude
            sample = rude[0] if slip else polite[k % len(polite)]
            output = f"{GARBLE} {sample['output']}" if (w, k) == (2, 11) else sample["output"]
            v1.append(_message(f"{sample['case_id']}-{w}-{k}", output, "v1", ts))
            if w >= V2_FROM:
                sample = rude[k // 2 % len(rude)] if V2_RUDE[w](k) else polite[k % len(polite)]
                v2.append(_message(f"v2-{sample['case_id'][3:]}-{w}-{k}", sample["output"],
                                   "v2", ts + 0.5))
    return v1, v2


async def _garble(body, fields, metric, mode):
    """Nonsense for the marked output (also on the repair retry), the rules otherwise."""
    return ContentReply("no idea, sorry") if GARBLE in fields.get("output", "") else None


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _counted(url: str) -> int:
    return sum(r["total"] for r in json.loads(_get(url + "/rates"))["rates"])


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def live(kafka_bootstrap, thread_judge, tmp_path_factory):
    thread_judge.reset()
    thread_judge.responder = _garble
    env = StreamEnv(kafka_bootstrap, thread_judge.api_base, tmp_path_factory.mktemp("dash"),
                    window_seconds=WINDOW, alert_rules=json.dumps([RULE]),
                    judge_input_cost_per_token="1.5e-7", judge_output_cost_per_token="6e-7")
    try:
        assert env.cli("produce", "--input", "/dev/null").returncode == 0
        base = (math.floor(time.time() / WINDOW) - WINDOWS) * WINDOW
        v1, v2 = _traffic(base)
        # v1 first, so the baseline is counted before v2 is compared with it.
        asyncio.run(produce(env.bootstrap, env.topic("input"),
                            v1 + [(b"bad", b"{not json", None)]))
        worker = env.start_worker()
        asyncio.run(consume(env.bootstrap, env.topic("results"), expect=len(v1), timeout=120))
        asyncio.run(produce(env.bootstrap, env.topic("input"), v2))
        alerts = asyncio.run(consume(env.bootstrap, env.topic("alerts"), expect=1, timeout=120,
                                     settle=2))
        assert len(alerts) == 1, env.logs()[-3000:]
        url = f"http://127.0.0.1:{worker.web_port}"
        judgments = 2 * (len(v1) + len(v2))  # bias and toxicity
        _wait(lambda: _counted(url) == judgments, 60, f"{judgments} judgments in the windows")
        yield SimpleNamespace(env=env, url=url, alert=alerts[0], base=base, v1=len(v1),
                              v2=len(v2), judgments=judgments)
    finally:
        env.stop_workers()
        thread_judge.responder = None


def _rate(text: str) -> float:
    return float(re.fullmatch(r"([\d.]+)%", text.strip())[1])


@pytest.fixture
def page(chromium, live, browser):
    """The dashboard as a laptop shows it, without reloading."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(live.url + "/dashboard?refresh=0")
    yield page
    page.close()


def test_both_versions_are_drawn_and_labelled(page):
    from playwright.sync_api import expect

    expect(page).to_have_title("guardrail dashboard")
    chart = page.locator('svg.rate-chart[data-metric="toxicity"]')
    expect(chart).to_be_visible()
    for version, windows in (("v1", WINDOWS), ("v2", WINDOWS - V2_FROM)):
        series = chart.locator(f'g.series[data-version="{version}"]')
        expect(series.locator("polyline")).to_have_count(1)
        points = series.locator("circle.point")
        expect(points).to_have_count(windows)
        expect(points.first).to_be_visible()  # a flat line has no height: its points show it
    assert sorted(chart.locator("text.series-label").all_text_contents()) == ["v1", "v2"]
    expect(page.locator('svg.rate-chart[data-metric="bias"]')).to_be_visible()


def test_the_alert_is_marked_where_it_fired_and_listed(page, live):
    from playwright.sync_api import expect

    chart = page.locator('svg.rate-chart[data-metric="toxicity"]')
    mark = chart.locator("g.alert-mark")
    expect(mark).to_have_count(1)
    assert mark.get_attribute("data-version") == "v2"
    assert mark.get_attribute("data-alert-id") == live.alert["alert_id"]
    expect(chart.locator("path.alert-flag")).to_be_visible()
    # The shaded window holds exactly one v2 point: the window the alert names.
    band = chart.locator("rect.alert-band").bounding_box()
    points = chart.locator('g.series[data-version="v2"] circle.point').all()
    centres = [box["x"] + box["width"] / 2 for box in (p.bounding_box() for p in points)]
    assert sum(band["x"] <= x <= band["x"] + band["width"] for x in centres) == 1
    expect(chart.locator('circle.alert-ring[data-version="v2"]')).to_be_visible()
    row = page.locator("tr.alert-row")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("toxicity")
    expect(row).to_contain_text("support-bot")
    expect(row.locator("td").nth(3)).to_have_text("turn")  # the unit: answers
    expect(row.locator("td").nth(4)).to_have_text("v2")
    start = live.alert["window"]["start"][11:16]  # HH:MM, as the page shows it
    expect(row.locator("td").nth(5)).to_contain_text(start)


def test_versions_side_by_side_coverage_errors_and_spend(page, live):
    from playwright.sync_api import expect

    card = page.locator('article.metric[data-metric="toxicity"]')
    v1, v2 = (card.locator(f'.version[data-version="{v}"]') for v in ("v1", "v2"))
    expect(v1).to_contain_text(f"of {live.v1 - 1} judged · 1 error")  # the garbled one
    expect(v2).to_contain_text(f"of {live.v2} judged")
    assert _rate(v2.locator(".version-rate").text_content()) > \
        _rate(v1.locator(".version-rate").text_content()) > 0
    expect(v2.locator(".badge")).to_have_text("1 alert")
    # Every judgment counted; all but the garbled message's two judged.
    tiles = {t.locator(".tile-label").text_content(): t for t in page.locator(".tile").all()}
    expect(tiles["Judged"].locator(".tile-value")).to_have_text(f"{live.judgments - 2:,}")
    expect(tiles["Judged"]).to_contain_text(f"of {live.judgments:,} seen")
    expect(tiles["Judge errors"].locator(".tile-value")).to_have_text("2")
    assert int(tiles["Unsafe"].locator(".tile-value").text_content()) > 0
    spend = float(tiles["Spend (this worker)"].locator(".tile-value").text_content()[1:])
    assert spend > 0
    expect(card.locator("g.coverage-bar")).to_have_count(WINDOWS)
    expect(page.locator("dl.facts")).to_contain_text("1 dlq")
    if os.environ.get("GUARDRAIL_DASHBOARD_SCREENSHOT"):
        page.screenshot(path=os.environ["GUARDRAIL_DASHBOARD_SCREENSHOT"], full_page=True)


def test_the_page_reloads_itself(chromium, live, browser):
    from playwright.sync_api import expect

    page = browser.new_page()
    page.goto(live.url + "/dashboard?refresh=1")
    subtitle = page.locator(".subtitle")
    expect(subtitle).to_contain_text("reloads every 1 s")
    first = subtitle.text_content()  # holds the time it was rendered, to the second
    expect(subtitle).not_to_have_text(first, timeout=15_000)
    expect(page.locator('svg.rate-chart[data-metric="toxicity"]')).to_be_visible()
    page.close()


def test_every_metric_and_label_the_monitoring_files_use_is_on_the_live_worker(live):
    text = _get(live.url + "/metrics").decode()
    assert "guardrail_alerts_total" in text  # the scenario's alert made the series
    assert unknown_references(text) == []
