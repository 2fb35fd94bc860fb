"""Read the monitoring files in docker/ (Prometheus rules, the Grafana
dashboard) and find which metrics and labels their PromQL uses::

    exprs = promql_expressions()          # [(where, expr), ...] rules and panels
    for where, expr in exprs:
        metric_names(expr), label_names(expr)
    exported = exported_families(text)    # from a /metrics text: {sample name: labels}
"""

from __future__ import annotations

import json
import re

import yaml
from prometheus_client.parser import text_string_to_metric_families

from .paths import ROOT

DOCKER = ROOT / "docker"
RULES = DOCKER / "prometheus" / "rules.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "guardrail.json"

#: Grafana's variables, replaced so the expressions are plain PromQL.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
                "$instance": ".*", "$model": ".*"}
#: Labels Prometheus adds or histograms carry, not the worker's own.
TARGET_LABELS = {"instance", "job", "le"}

_METRIC = re.compile(r"\b(guardrail_[a-z0-9_]+)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER_NAME = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def plain_promql(expr: str) -> str:
    for name, value in GRAFANA_VARS.items():
        expr = expr.replace(name, value)
    return expr


def rule_expressions() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [(f"rule {rule['alert']}", rule["expr"])
            for group in doc["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = [(f"panel {p['title']!r}", t["expr"]) for p in doc["panels"]
             for t in p.get("targets", [])]
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in doc["annotations"]["list"]
              if "expr" in a]
    for var in doc["templating"]["list"]:
        match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", var["definition"])
        assert match, f"variable {var['name']}: unexpected query {var['definition']!r}"
        found.append((f"variable {var['name']}", f"{match[1]}{{{match[2]}!=''}}"))
    return [(where, plain_promql(expr)) for where, expr in found]


def promql_expressions() -> list[tuple[str, str]]:
    return rule_expressions() + dashboard_expressions()


def metric_names(expr: str) -> set[str]:
    return set(_METRIC.findall(expr))


def label_names(expr: str) -> set[str]:
    """Labels the expression matches on or groups by."""
    names = {m for block in _MATCHERS.findall(expr) for m in _MATCHER_NAME.findall(block)}
    names |= {n.strip() for block in _GROUPING.findall(expr) for n in block.split(",")
              if n.strip()}
    return names


def exported_families(text: str) -> dict[str, set[str]]:
    """Every sample name in a Prometheus text exposition, with its label names."""
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def unknown_references(text: str) -> list[str]:
    """What the monitoring files use that a /metrics text does not have."""
    exported = exported_families(text)
    problems = []
    for where, expr in promql_expressions():
        names = metric_names(expr)
        problems += [f"{where}: {n} not exported" for n in sorted(names - set(exported))]
        labels = set().union(*(exported.get(n, set()) for n in names)) if names else set()
        for label in sorted(label_names(expr) - TARGET_LABELS - labels):
            problems.append(f"{where}: label {label!r} not on {sorted(names)}")
    return problems
