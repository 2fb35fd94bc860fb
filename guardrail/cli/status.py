"""``guardrail status``: each worker's state from its ``/health`` page::

    $ guardrail status --worker 10.0.0.5:6066 --worker 10.0.0.6:6066
    10.0.0.5:6066  stalled  1 partition with lag and no progress
      model-outputs[0]  lag 412  no progress for 2:35  committed offset 90311
    10.0.0.6:6066  ok

A worker is ``ok``, ``paused`` (waiting out a judge outage), ``stalled``
(partitions it holds have lag and no committed progress for ``stall_seconds``,
see :mod:`guardrail.stream.liveness`) or ``unreachable``. The command exits 0
when every worker is ok, 1 otherwise, so a script or a cron job can act on it.
``/health`` needs no credentials, even with ``review_protect_pages``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click
import orjson

from ..config.settings import load_settings
from .progress import format_duration

__all__ = ["status_command", "status_lines", "worker_health"]


def worker_health(address: str, timeout: float) -> dict[str, Any]:
    """A worker's ``/health`` answer (a 503 too: its body says why); on no answer,
    ``{"status": "unreachable", "error": …}``."""
    url = f"http://{address}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:  # 503 while paused: still an answer
        try:
            return dict(json.loads(exc.read()))
        except ValueError:
            return {"status": "unreachable", "error": f"HTTP {exc.code} from {url}"}
    except (OSError, ValueError) as exc:
        return {"status": "unreachable", "error": str(getattr(exc, "reason", exc))}


def status_lines(address: str, health: dict[str, Any]) -> list[str]:
    """A worker's line, then one line per stalled partition."""
    status = str(health.get("status", "unknown"))
    stalled = health.get("stalled_partitions") or []
    note = {"paused": "waiting out a judge outage (nothing judged, nothing lost)",
            "unreachable": str(health.get("error", "")),
            "stalled": f"{len(stalled)} partition{'' if len(stalled) == 1 else 's'} with "
                       "lag and no progress"}.get(status, "")
    if health.get("rebalancing"):
        note = f"{note}; rebalancing" if note else "rebalancing"
    lines = [f"{address}  {status}" + (f"  {note}" if note else "")]
    for p in stalled:
        lines.append(f"  {p.get('topic')}[{p.get('partition')}]  lag {p.get('lag')}  no "
                     f"progress for {format_duration(float(p.get('seconds_since_progress', 0)))}"
                     f"  committed offset {p.get('committed')}")
    return lines


@click.command("status", short_help="Show workers' health: ok, paused or stalled partitions.")
@click.option("--worker", "workers", multiple=True, metavar="HOST:PORT",
              help="A worker's web address (repeatable); default: web_host:web_port of the "
              "settings (GUARDRAIL_WEB_HOST, GUARDRAIL_WEB_PORT).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML/JSON settings file (overrides GUARDRAIL_* env).")
@click.option("--json", "as_json", is_flag=True, help="Print the /health answers as JSON, "
              "by address.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, help="Seconds to wait for each worker's answer.")
def status_command(workers: tuple[str, ...], config_path: str | None, as_json: bool,
                   timeout: float) -> None:
    """Each worker's state from its /health page: ok, paused on a judge outage, or
    stalled, with the partitions it holds that have lag and no committed progress.
    Exits 0 when every worker is ok, 1 otherwise."""
    if not workers:
        settings = load_settings(config_path).worker
        workers = (f"{settings.web_host}:{settings.web_port}",)
    answers = {address: worker_health(address, timeout) for address in workers}
    if as_json:
        click.echo(orjson.dumps(answers).decode())
    else:
        for address, health in answers.items():
            click.echo("\n".join(status_lines(address, health)))
    if any(health.get("status") != "ok" for health in answers.values()):
        raise SystemExit(1)
