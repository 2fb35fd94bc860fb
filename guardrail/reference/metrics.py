"""The Prometheus metrics reference (``reference/metrics.md``), read from the
worker's own registry (:class:`~guardrail.stream.telemetry.Telemetry`) and the
Docker setup's alerting rules (``docker/prometheus/rules.yml``)::

    >>> from guardrail.reference.metrics import metric_families, metrics_page
    >>> families = metric_families()
    >>> families[0].name, families[0].kind, families[0].labels
    ('guardrail_messages', 'counter', ('outcome',))
    >>> families[0].series
    ('guardrail_messages_total', 'guardrail_messages_created')
    >>> "`guardrail_judge_latency_seconds_bucket`" in metrics_page()
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.metrics import MetricWrapperBase

from ..stream.settings import WorkerSettings
from ..stream.telemetry import Telemetry
from ._markdown import md_table

__all__ = ["MetricFamily", "metric_families", "alert_rules", "metrics_page", "SUFFIXES",
           "RULES"]

#: The Docker setup's alerting rules (present in a source checkout).
RULES = Path(__file__).resolve().parents[2] / "docker" / "prometheus" / "rules.yml"

#: The series a family of each type is exposed as (prometheus_client's text format).
SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


@dataclass(frozen=True)
class MetricFamily:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    #: Label values whose series exist from the start (at 0), by label.
    initial: dict[str, tuple[str, ...]]
    #: The histogram's bucket bounds (``le``), empty for other types.
    buckets: tuple[str, ...] = ()

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(self.name + suffix for suffix in SUFFIXES[self.kind])


def _label_names(telemetry: Telemetry) -> dict[str, tuple[str, ...]]:
    """Each family's label names, from the collectors of its registry."""
    collectors = telemetry.registry._collector_to_names  # noqa: SLF001 (no public way)
    return {c._name: tuple(c._labelnames) for c in collectors  # noqa: SLF001
            if isinstance(c, MetricWrapperBase)}


def metric_families(telemetry: Telemetry | None = None) -> list[MetricFamily]:
    """Every family of a worker's registry, in the order it registers them."""
    telemetry = telemetry or Telemetry()
    labels = _label_names(telemetry)
    families = []
    for family in telemetry.registry.collect():
        initial: dict[str, list[str]] = {}
        buckets: list[str] = []
        for sample in family.samples:
            if sample.name == family.name + "_bucket":
                buckets.append(sample.labels["le"])
            elif sample.name in (family.name, family.name + "_total"):
                for label, value in sample.labels.items():
                    initial.setdefault(label, [])
                    if value not in initial[label]:
                        initial[label].append(value)
        families.append(MetricFamily(
            family.name, family.type, family.documentation, labels.get(family.name, ()),
            {k: tuple(v) for k, v in initial.items()}, tuple(dict.fromkeys(buckets))))
    return families


def alert_rules(path: Path = RULES) -> list[dict[str, Any]]:
    """The alerting rules of a Prometheus rules file, each with its group."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [{**rule, "group": group["name"]} for group in doc["groups"]
            for rule in group["rules"] if "alert" in rule]


def _labels_cell(family: MetricFamily) -> str:
    parts = []
    for label in family.labels:
        values = family.initial.get(label)
        parts.append(f"`{label}`" + (f" ({', '.join(values)})" if values else ""))
    return ", ".join(parts) or "—"


def _families_table(families: list[MetricFamily]) -> str:
    rows = []
    for f in families:
        text = f.help.rstrip(".") + "."
        if f.buckets:
            text += f" Buckets (`le`, seconds): {', '.join(f.buckets)}."
        rows.append([f"`{f.name}`", f.kind, "<br>".join(f"`{s}`" for s in f.series),
                     _labels_cell(f), text])
    return md_table(["Family", "Type", "Series", "Labels", "Description"], rows)


def _rules_section(path: Path) -> str:
    config = path.with_name("prometheus.yml")
    if not (path.exists() and config.exists()):
        return ""
    rows = [[f"`{r['alert']}`", r["group"], r.get("labels", {}).get("severity", "—"),
             r.get("for", "—"), r.get("annotations", {}).get("summary", "")]
            for r in alert_rules(path)]
    prometheus = yaml.safe_load(config.read_text(encoding="utf-8"))
    scrape = prometheus["scrape_configs"][0]
    return f"""\
## Alerting rules

The Docker setup (see [Run with Docker](../how-to/docker.md)) runs Prometheus
with `docker/prometheus/prometheus.yml`, which scrapes the worker's
`{scrape.get("metrics_path", "/metrics")}` (job `{scrape["job_name"]}`) every
{prometheus["global"]["scrape_interval"]} and evaluates `docker/prometheus/{path.name}`;
`docker/prometheus/rules.test.yml` holds their unit tests for
`promtool test rules`, and `docker/grafana/dashboards/guardrail.json` is the
Grafana dashboard over the same series. The rules, as the file has them:

{md_table(["Alert", "Group", "Severity", "For", "Summary"], rows)}
"""


def metrics_page(telemetry: Telemetry | None = None, rules: Path = RULES) -> str:
    worker = WorkerSettings.model_fields
    host, port = worker["web_host"].default, worker["web_port"].default
    families = metric_families(telemetry)
    return f"""\
# Prometheus metrics

Each worker serves its metrics in the Prometheus text format at `/metrics` on
its web port: `http://{host}:{port}/metrics` with the default
[settings](settings.md#worker) `web_host` ({host}) and `web_port` ({port}); with
`review_protect_pages` the
page asks for a reviewer's credentials. Every worker keeps its own figures, so
sum or group by `instance` across workers. This page is generated from the
worker's registry, so the names below are the ones it exports.

How a family is exposed depends on its type:

- **counter** `<family>`: `<family>_total`, and `<family>_created` (when the
  series started, Unix seconds);
- **gauge** `<family>`: `<family>`;
- **histogram** `<family>`: `<family>_bucket` (one series per bound, label
  `le`), `<family>_sum`, `<family>_count`, and `<family>_created`.

The `_created` series are prometheus_client's; a worker started with
`PROMETHEUS_DISABLE_CREATED_SERIES=True` leaves them out. Series of the label
values listed in parentheses exist from the start at 0 (so a rate sees the first
increase); others appear with their first count.

The per-group series (`guardrail_judgments_total`, `guardrail_unsafe_rate`)
carry `unit`: `turn` for answers and agent runs, `session` for the judgments
of whole conversations. Select `unit="turn"` (or `unit!="session"`, which
also matches series from workers before sessions) to count answers alone;
summing over `unit` adds the two.

{_families_table(families)}

{_rules_section(rules)}"""
