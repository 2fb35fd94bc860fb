"""docker/: the Prometheus config and alerting rules, the Grafana provisioning
and dashboard, and their wiring in compose.yaml. No Docker engine is needed;
promtool (Debian: apt-get install prometheus) checks and unit-tests the rules
when it is installed. The same references are checked against a live worker's
/metrics in tests/agents/test_dashboard_live.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.monitoring import (DASHBOARD, DOCKER, RULES, dashboard_expressions, metric_names,
                                promql_expressions, rule_expressions)

from guardrail.stream.telemetry import Telemetry

COMPOSE = DOCKER / "compose.yaml"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = DOCKER / "grafana" / "provisioning" / "dashboards" / "guardrail.yml"


def _yaml(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _mounts(service: dict) -> dict[str, Path]:
    """Container path → host path of a compose service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DOCKER / source).resolve()
    return mounts


def _in_container(mounts: dict[str, Path], path: str) -> Path | None:
    """The host file a container path resolves to through the bind mounts."""
    for target, source in mounts.items():
        if path == target or path.startswith(target + "/"):
            return source / path[len(target):].lstrip("/")
    return None


def test_compose_runs_prometheus_and_grafana_on_the_files_here():
    services = _yaml(COMPOSE)["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert "9090:9090" in prometheus["ports"] and "3000:3000" in grafana["ports"]
    prom_mounts = _mounts(prometheus)
    config = next(a.split("=", 1)[1] for a in prometheus["command"]
                  if a.startswith("--config.file="))
    assert _in_container(prom_mounts, config) == PROMETHEUS.resolve()
    graf_mounts = _mounts(grafana)
    assert _in_container(graf_mounts, "/etc/grafana/provisioning/datasources/prometheus.yml") \
        == DATASOURCES.resolve()
    provider = _yaml(PROVIDERS)["providers"][0]
    assert _in_container(graf_mounts, provider["options"]["path"]) == DASHBOARD.parent.resolve()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert _in_container(graf_mounts, home) == DASHBOARD.resolve()
    for source in [*prom_mounts.values(), *graf_mounts.values()]:
        assert source.exists(), source


def test_prometheus_scrapes_the_worker_and_loads_the_rules():
    config = _yaml(PROMETHEUS)
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    worker = _yaml(COMPOSE)["services"]["worker"]
    published = {p.split(":")[-1] for p in worker["ports"]}
    for target in job["static_configs"][0]["targets"]:
        host, port = target.split(":")
        assert host == "worker" and port in published
    assert [PROMETHEUS.parent / f for f in config["rule_files"]] == [RULES]


def test_every_rule_says_how_bad_and_what_happened():
    doc = _yaml(RULES)
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert len(rules) >= 8
    names = [r["alert"] for r in rules]
    assert len(set(names)) == len(names)
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
    covered = " ".join(e for _, e in rule_expressions())
    for metric in ("guardrail_alerts_total", "guardrail_judge_paused",
                   "guardrail_consumer_lag", "guardrail_stalled_partitions", 'outcome="dlq"', 'verdict="error"',
                   'verdict="unsafe"', "on (metric, model) group_left"):
        assert metric in covered, metric
    # The worker leaves Faust's internal topics out of the lag: no filter needed.
    assert "changelog" not in covered


def test_grafana_panels_use_the_provisioned_datasource_and_fit_the_grid():
    [source] = _yaml(DATASOURCES)["datasources"]
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"])
                 for dy in range(pos["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
            assert 'instance=~"$instance"' in target["expr"], panel["title"]
    titles = {p["title"] for p in panels}
    assert {"Unsafe share by metric", "Unsafe share by version", "Judge latency",
            "Consumer lag", "Spend per hour"} <= titles
    [by_version] = [p for p in panels if p["title"] == "Unsafe share by version"]
    for target in by_version["targets"]:
        assert "sum by (metric, model, model_version)" in target["expr"]
        assert "{{model_version}}" in target["legendFormat"]


def _defined_names() -> set[str]:
    """Every sample name the worker's telemetry can export."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum",
                                                                      "_count")}
    return {family.name + s for family in Telemetry().registry.collect()
            for s in suffixes[family.type]}


def test_every_metric_the_files_name_is_one_the_worker_defines():
    defined = _defined_names()
    exprs = promql_expressions()
    used = set().union(*(metric_names(e) for _, e in exprs))
    assert len(used) >= 12
    unknown = [f"{where}: {name}" for where, e in exprs for name in metric_names(e) - defined]
    assert unknown == []


def test_the_series_rules_and_panels_rate_over_exist_at_zero_before_the_first_count():
    """Prometheus sees no increase in a series born at its first count, so a
    burst within one scrape would never show as a rate."""
    telemetry = Telemetry()
    telemetry.expect_metrics(["toxicity"])
    text = telemetry.render().decode()
    for sample in ('guardrail_messages_total{outcome="judged"} 0.0',
                   'guardrail_messages_total{outcome="dlq"} 0.0',
                   'guardrail_judge_tokens_total{direction="output"} 0.0',
                   'guardrail_metrics_groups_folded_total 0.0',
                   'guardrail_alerts_total{metric="toxicity"} 0.0'):
        assert sample in text
    # A group's verdict series all start with its first count (the one counted
    # then is the only one Prometheus cannot see as an increase).
    group = telemetry.groups.group_of({"model": "bot", "model_version": "v2"})
    telemetry.groups.count("toxicity", "safe", group)
    text = telemetry.render().decode()
    labels = 'model="bot",model_version="v2",prompt_version="-",unit="turn"'
    for sample in (f'guardrail_judgments_total{{metric="toxicity",{labels},verdict="unsafe"}} 0.0',
                   f'guardrail_judgments_total{{metric="toxicity",{labels},verdict="error"}} 0.0',
                   f'guardrail_judgments_total{{metric="toxicity",{labels},verdict="safe"}} 1.0',
                   f'guardrail_unsafe_rate{{metric="toxicity",{labels}}} 0.0'):
        assert sample in text


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed "
                                    "(Debian: apt-get install prometheus)")


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@needs_promtool
def test_promtool_accepts_the_config_and_the_rules_pass_their_unit_tests():
    for args in (("check", "config", PROMETHEUS), ("check", "rules", RULES),
                 ("test", "rules", RULES.parent / "rules.test.yml")):
        result = _promtool(*args)
        assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path):
    """Each panel query as a recording rule: promtool then parses its PromQL."""
    rules = [{"record": f"guardrail:dashboard:{i}", "expr": expr}
             for i, (_, expr) in enumerate(dashboard_expressions())]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
