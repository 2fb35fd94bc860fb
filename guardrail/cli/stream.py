"""Streaming commands: ``broker``, ``worker``, ``produce``, ``tail``, ``replay``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from datetime import datetime, timezone
from typing import Any

import click
import orjson

from ..inputs import parse_records
from ..kafka.broker import DEFAULT_PORT, EmbeddedBroker
from ..kafka.io import produce_records, tail_records
from ..kafka.topics import ensure_topics
from ..stream.envelope import parse_event_time
from .batch import settings_from_flags, settings_options
from .progress import Progress

__all__ = ["register"]


@click.command("broker")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True)
def broker_command(port: int) -> None:
    """Run the embedded Kafka-compatible broker (Tansu, in memory) in the foreground."""
    broker = EmbeddedBroker(port).start()
    click.echo(f"embedded broker listening; bootstrap servers: {broker.bootstrap}")
    click.echo(f"(export GUARDRAIL_BOOTSTRAP_SERVERS={broker.bootstrap}; Ctrl-C stops it)")
    sys.stdout.flush()
    stop = {"now": False}

    def _stop(*_: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop["now"] and broker.process and broker.process.poll() is None:
            time.sleep(0.5)
    finally:
        broker.stop()
    click.echo("embedded broker stopped")


def _stream_options(func: Any) -> Any:
    func = settings_options(func)
    return click.option("--bootstrap-servers", help="Kafka bootstrap servers "
                        "(default: GUARDRAIL_BOOTSTRAP_SERVERS, else the embedded broker).")(func)


def _settings(bootstrap_servers: str | None, **flags: Any) -> Any:
    return settings_from_flags(bootstrap_servers=bootstrap_servers, **flags)


@click.command("worker")
@_stream_options
@click.option("--web-port", type=int, help="Port of /rates, /health, /metrics.")
@click.option("--loglevel", default="info", show_default=True)
def worker_command(web_port: int | None, loglevel: str, **flags: Any) -> None:
    """Run the streaming guardrail worker (Faust) until SIGTERM."""
    from ..agents import build_app, run_worker

    settings = _settings(web_port=web_port, **flags)
    logging.basicConfig(level=loglevel.upper())
    run_worker(build_app(settings), loglevel=loglevel)


@click.command("produce")
@_stream_options
@click.option("--input", "input_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--topic", help="Default: the input topic (model-outputs).")
def produce_command(input_path: str, topic: str | None, **flags: Any) -> None:
    """Publish cases from JSON / JSONL, keyed by case_id."""
    settings = _settings(**flags)
    with open(input_path, "rb") as handle:
        records, problems = parse_records(handle.read())
    for problem in problems:
        click.echo(f"skipped {problem}", err=True)
    topic = topic or settings.kafka.input_topic
    asyncio.run(ensure_topics(settings.kafka))
    sent = asyncio.run(produce_records(settings.kafka, topic, [r for _, r in records]))
    click.echo(f"produced {sent} records to {topic}")


@click.command("tail")
@_stream_options
@click.option("--topic", help="Default: the results topic (redteam-results).")
@click.option("--from-beginning/--latest", default=True, show_default=True)
@click.option("--idle-timeout", type=float, help="Stop after this many idle seconds.")
@click.option("--max", "limit", type=int, help="Stop after this many records.")
def tail_command(topic: str | None, from_beginning: bool, idle_timeout: float | None,
                 limit: int | None, **flags: Any) -> None:
    """Print records of a topic as JSON lines."""
    settings = _settings(**flags)
    topic = topic or settings.kafka.results_topic

    async def run() -> None:
        async for _, value in tail_records(settings.kafka, topic, from_beginning=from_beginning,
                                           idle_timeout=idle_timeout, limit=limit):
            click.echo(value.decode("utf-8", "replace"))

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


def _time(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_event_time(float(value) if value.replace(".", "", 1).isdigit() else value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("replay")
@_stream_options
@click.option("--from", "start", required=True, help="Start time: ISO-8601 or epoch s/ms.")
@click.option("--to", "end", help="End time (exclusive); default: the end seen at start.")
@click.option("--topic", help="Topic to replay (default: the input topic).")
@click.option("--results-topic", help="Where results go (default: the results topic).")
@click.option("--fire-alerts", is_flag=True, help="Also feed the live windows and alerts.")
@click.option("--quiet", is_flag=True, help="No progress line.")
def replay_command(start: str, end: str | None, topic: str | None, results_topic: str | None,
                   fire_alerts: bool, quiet: bool, **flags: Any) -> None:
    """Re-judge a time range of a topic, then stop."""
    from ..kafka.replay import replay

    settings = _settings(**flags)
    start_ms, end_ms = _time(start), _time(end)

    reporter = Progress("replayed", unit="messages", enabled=not quiet)
    progress = reporter.update

    summary = asyncio.run(replay(settings, start_ms=start_ms or 0, end_ms=end_ms, topic=topic,
                                 results_topic=results_topic, fire_alerts=fire_alerts,
                                 progress=progress))
    reporter.finish()
    click.echo(orjson.dumps({"topic": summary.topic, "planned": summary.planned,
                             "processed": summary.processed, "published": summary.published,
                             "ranges": {str(k): v for k, v in summary.ranges.items()},
                             "finished_at": datetime.now(timezone.utc).isoformat()}).decode())


def register(cli: click.Group) -> None:
    for command in (broker_command, worker_command, produce_command, tail_command,
                    replay_command):
        cli.add_command(command)
