"""The metrics reference lists what a worker really exports: every family of
its registry with its type and labels, and nothing on ``/metrics`` that the
page does not name; and the alerting rules of the Docker setup, read from
their file."""

from __future__ import annotations

import re

import yaml
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from support.monitoring import RULES

from guardrail.reference.metrics import metric_families, metrics_page
from guardrail.stream.settings import WorkerSettings
from guardrail.stream.telemetry import Telemetry


def _rows(page: str) -> dict[str, list[str]]:
    """The families table: family name → its cells."""
    rows = {}
    for line in page.splitlines():
        match = re.match(r"\| `(guardrail_\w+)` \| (.*) \|$", line)
        if match:
            rows[match[1]] = match[2].split(" | ")
    return rows


def test_every_family_of_the_registry_is_listed_with_its_type_and_labels():
    telemetry = Telemetry()
    rows = _rows(metrics_page(telemetry))
    collected = list(telemetry.registry.collect())
    assert len(collected) > 20 and list(rows) == [f.name for f in collected]
    collectors = {c._name: c for c in vars(telemetry).values()
                  if isinstance(c, MetricWrapperBase)}
    for family in collected:
        kind, series, labels, description = rows[family.name]
        assert kind == family.type
        assert re.findall(r"`(\w+)`", labels) == list(collectors[family.name]._labelnames)
        assert description.startswith(family.documentation.rstrip("."))
        assert f"`{family.name}" in series


def test_what_a_worker_exposes_is_only_what_the_page_names():
    telemetry = Telemetry()
    telemetry.expect_metrics(["toxicity", "bias"])
    group = telemetry.groups.group_of({"model": "m", "model_version": "v2"})
    telemetry.groups.count("toxicity", "unsafe", group)
    telemetry.judge_latency.observe(0.3)
    # Every family with labels gets a series, so each one's names show.
    for collector in vars(telemetry).values():
        if isinstance(collector, MetricWrapperBase) and collector._labelnames:
            child = collector.labels(*["x"] * len(collector._labelnames))
            for update in ("inc", "set", "observe"):
                if hasattr(child, update):
                    getattr(child, update)(1)
                    break
    page = metrics_page(telemetry)
    families = {f.name: f for f in metric_families(telemetry)}
    exposed = list(text_string_to_metric_families(telemetry.render().decode()))
    named = {s.name for f in exposed for s in f.samples}
    listed = set(re.findall(r"`(guardrail_\w+)`", page))
    assert named and named <= listed
    for family in exposed:
        for sample in family.samples:
            owner = next(f for f in families.values() if sample.name in f.series)
            assert set(sample.labels) - {"le"} <= set(owner.labels)
    # Each family's listed series are all really exposed.
    assert {s for f in families.values() for s in f.series} == named


def test_the_scrape_address_and_the_alert_rules_come_from_the_settings_and_the_file():
    page = metrics_page()
    worker = WorkerSettings()
    assert f"http://{worker.web_host}:{worker.web_port}/metrics" in page
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alerts = re.findall(r"^\| `(Guardrail\w+)` \|", page, re.MULTILINE)
    assert alerts == [r["alert"] for r in rules] and len(alerts) >= 10
