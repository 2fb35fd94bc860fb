"""Streaming commands: ``broker``, ``worker``, ``produce``, ``tail``, ``rates``, ``replay``."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import orjson

from ..formats.reader import parse_records
from ..kafka.broker import DEFAULT_PORT, EmbeddedBroker
from ..kafka.io import produce_records, tail_records
from ..kafka.registry_settings import check_registry
from ..kafka.topics import ensure_topics
from .._event_time import parse_event_time
from .batch import batch_api_options, input_format_options, settings_from_flags, settings_options
from .options import setting_option
from .progress import Progress

if TYPE_CHECKING:  # replay pulls in the judge (litellm): imported when the command runs
    from ..replay.backfill import ReplaySummary

__all__ = ["register"]


@click.command("broker", short_help="Run the embedded development Kafka broker.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 the broker listens on (0 picks a free one).")
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


#: What ``--loglevel`` accepts: the level names Python's logging knows, as both
#: ``logging.basicConfig`` and Faust's worker (mode's ``setup_logging``) take them.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


@click.command("worker", short_help="Run the streaming worker (Faust) until SIGTERM.")
@_stream_options
@input_format_options
@setting_option("--input-topic", "input_topic",
                help="Topic of the model outputs to judge (setting input_topic).")
@setting_option("--results-topic", "results_topic",
                help="Topic of the results, one per judged message (setting results_topic).")
@setting_option("--web-port", "web_port", type=click.IntRange(1, 65535),
                help="Port of the worker's HTTP pages: /health, /metrics, /rates, /dashboard, "
                     "/review and, with the review queue on, /agreement (setting web_port).")
@click.option("--loglevel", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="info",
              show_default=True, help="Log level of the worker and of Faust.")
def worker_command(input_topic: str | None, results_topic: str | None, web_port: int | None,
                   loglevel: str, **flags: Any) -> None:
    """Run the streaming guardrail worker (Faust) until SIGTERM: judge each record of
    the input topic, publish results, windowed rates and alerts."""
    from ..agents import build_app, run_worker

    settings = _settings(input_topic=input_topic, results_topic=results_topic,
                         web_port=web_port, **flags)
    logging.basicConfig(level=loglevel.upper())
    run_worker(build_app(settings), loglevel=loglevel)


@click.command("produce", short_help="Publish cases from JSON / JSONL, keyed by case_id.")
@_stream_options
@click.option("--input", "input_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Cases as a JSON object, a JSON array or JSON Lines.")
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
@click.option("--from-beginning/--latest", default=True, show_default=True,
              help="Start at the topic's first record, or only print new ones.")
@click.option("--idle-timeout", type=float, help="Stop after this many idle seconds.")
@click.option("--max", "limit", type=int, help="Stop after this many records.")
@click.option("--headers", "with_headers", is_flag=True,
              help="Print each record as {\"key\", \"headers\", \"value\"} (the gate's "
                   "guardrail.* headers: why a record was held, where it came from).")
def tail_command(topic: str | None, from_beginning: bool, idle_timeout: float | None,
                 limit: int | None, with_headers: bool, **flags: Any) -> None:
    """Print records of a topic as JSON lines."""
    settings = _settings(**flags)
    topic = topic or settings.kafka.results_topic

    async def run() -> None:
        async for message, value in tail_records(settings.kafka, topic,
                                                 from_beginning=from_beginning,
                                                 idle_timeout=idle_timeout, limit=limit):
            text = value.decode("utf-8", "replace")
            if with_headers:
                text = _with_headers(message, text)
            click.echo(text)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


def _with_headers(message: Any, value: str) -> str:
    """A record as one JSON line: its key, its headers (as text) and its value."""
    def text(data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8", "replace")

    return orjson.dumps({"key": text(message.key),
                         "headers": {name: text(data) for name, data in message.headers or ()},
                         "value": value}).decode()


@click.command("rates", short_help="Show the consumer group's windowed unsafe rates.")
@_stream_options
@click.option("--app-id", "--group", "app_id",
              help="Consumer group (the workers' app id) to show; default: GUARDRAIL_APP_ID.")
@click.option("--metric", "metrics", multiple=True, help="Only this metric (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON /rates answers (and the "
              "/agreement rows under \"agreement\" when reviewers have labelled results).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Give up reading the changelog after this many seconds.")
def rates_command(app_id: str | None, metrics: tuple[str, ...], as_json: bool, timeout: float,
                  **flags: Any) -> None:
    """Windowed unsafe rates of the whole consumer group, newest window first; with the
    judge's agreement with reviewers and the corrected rate where labels exist."""
    from ..agents.rates_view import read_rates
    from ..agents.window_cells import changelog_topic
    from .rates import rates_table

    settings = _settings(**flags)
    app_id = app_id or settings.kafka.app_id
    # aiokafka logs each failed connection; the error line below already says it once.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    cells = asyncio.run(read_rates(settings, app_id=app_id, timeout=timeout))
    rows = [row for row in cells.rows() if not metrics or row["metric"] in metrics]
    if cells.malformed:
        click.echo(f"warning: skipped {cells.malformed} changelog record(s) that are not "
                   f"window cells (last: {cells.last_error})", err=True)
    agreement = _agreement(settings, rows, metrics, timeout)
    if as_json:
        click.echo(orjson.dumps({
            "scope": "group", "app_id": app_id, "changelog_topic": changelog_topic(app_id),
            "window_seconds": settings.windows.window_seconds, "caught_up": True,
            "malformed_records": cells.malformed, "rates": rows,
            "labels_topic": settings.review.labels_topic, "agreement": agreement}).decode())
    elif rows:
        click.echo(rates_table(rows, agreement))
    else:
        click.echo(f"no unexpired windows for app id {app_id!r}"
                   + (f" and metric {', '.join(metrics)}" if metrics else ""))


def _agreement(settings: Any, rows: list[dict[str, Any]], metrics: tuple[str, ...],
               timeout: float) -> list[dict[str, Any]]:
    """The reviewers' agreement with the judge per window (``/agreement`` rows),
    from the labels topic read once; [] when it is missing or empty."""
    from ..kafka.changelog import RatesUnavailable
    from ..agents.window_cells import stale_before
    from ..stream.agreement import agreement_rows
    from ..review.labels_topic import read_labels_topic

    try:
        fold = asyncio.run(read_labels_topic(
            settings.kafka, settings.review, timeout=timeout, missing_ok=True,
            fetch_wait_ms=settings.worker.consumer_fetch_wait_ms))
    except RatesUnavailable as exc:
        click.echo(f"warning: no agreement figures: {exc}", err=True)
        return []
    if fold is None or not fold.by_key:
        return []
    windows, review = settings.windows, settings.review
    return agreement_rows(
        fold.records(), rows, window_seconds=windows.window_seconds,
        group_labels=windows.group_labels, min_reviews=review.agreement_min_reviews,
        corrected_min_reviews=review.corrected_min_reviews, metrics=metrics,
        after=stale_before(time.time(), windows.window_seconds,
                           windows.window_expires_seconds))


def _time(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_event_time(float(value) if value.replace(".", "", 1).isdigit() else value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("replay")
@_stream_options
@input_format_options
@click.option("--from", "start", required=True, help="Start time: ISO-8601 or epoch s/ms.")
@click.option("--to", "end", help="End time (exclusive); default: the end seen at start.")
@click.option("--topic", help="Topic to replay (default: the input topic).")
@click.option("--results-topic", help="Where results go (default: the results topic).")
@click.option("--dlq-topic", help="Where bad input goes (default: RESULTS_TOPIC.dlq with "
              "--results-topic, else the DLQ topic).")
@click.option("--fire-alerts", is_flag=True, help="Also feed the live windows and alerts.")
@click.option("--sample-rate", type=click.FloatRange(0, 1), help="Judge only this share, "
              "chosen as the worker chooses (by case_id) with the sample_rules; default: all.")
@click.option("--quiet", is_flag=True, help="No progress line.")
@click.option("--processes", type=click.IntRange(1), default=1, show_default=True,
              help="Processes to judge in, each reading its own partitions (one core each).")
@batch_api_options
def replay_command(start: str, end: str | None, topic: str | None, results_topic: str | None,
                   dlq_topic: str | None, fire_alerts: bool, sample_rate: float | None,
                   quiet: bool, processes: int, batch_api: bool, batch_state: str | None,
                   **flags: Any) -> None:
    """Re-judge a time range of a topic, then stop."""
    from ..replay.backfill import replay

    if processes > 1 and (batch_api or sample_rate is not None):
        raise click.UsageError("--processes runs in one process with --batch-api (one state "
                               "file) and --sample-rate (version counts in one memory)")
    settings = _settings(**flags)
    # Before Kafka is asked; a replay writes no alerts (alerts_format is not its concern).
    check_registry(settings.registry, settings.inputs.input_format,
                   writes=("results_format", "dlq_format"))
    start_ms, end_ms = _time(start), _time(end)

    reporter = Progress("replayed", unit="messages", enabled=not quiet)
    progress = reporter.update

    args = dict(start_ms=start_ms or 0, end_ms=end_ms, topic=topic, results_topic=results_topic,
                dlq_topic=dlq_topic, fire_alerts=fire_alerts, progress=progress,
                sample_rate=sample_rate)
    if batch_api:
        summary = _replay_batch_api(settings, batch_state, args)
    elif processes > 1:
        from ..replay.processes import replay_in_processes

        del args["sample_rate"]  # refused above
        summary = replay_in_processes(settings, processes=processes, **args)
    else:
        summary = asyncio.run(replay(settings, **args))
    reporter.finish()
    _print_replay_summary(summary)


def _replay_batch_api(settings: Any, batch_state: str | None, args: dict[str, Any]) -> Any:
    from ..replay.batch_api import replay_batch_api  # only a batch replay needs it

    summary, stats = asyncio.run(replay_batch_api(
        settings, state_path=Path(batch_state) if batch_state else None,
        say=lambda line: click.echo(line, err=True), **args))
    click.echo(f"batch API: {stats.requests} requests, {stats.submitted} chunk(s) submitted, "
               f"{stats.resumed} resumed; state {stats.state_path}", err=True)
    return summary


def _print_replay_summary(summary: ReplaySummary) -> None:
    """Two readable lines on stderr, then the whole summary as one JSON line on
    stdout (the last line, for scripts)."""
    t = summary.tally
    click.echo(f"replayed {summary.processed} messages: {summary.results} results to "
               f"{summary.results_topic}, {summary.dlq} DLQ records to {summary.dlq_topic}"
               + (f", {summary.judgment_events} judgment events" if summary.judgment_events
                  else "")
               + (f", {summary.not_sampled} not sampled" if summary.not_sampled is not None
                  else ""), err=True)
    click.echo(f"judged {t.judged}, cached {t.cached} (cache {summary.cache}); tokens "
               f"{t.input_tokens} in / {t.output_tokens} out; cost {summary.cost_text()}",
               err=True)
    click.echo(orjson.dumps(summary.to_json()).decode())


def register(cli: click.Group) -> None:
    for command in (broker_command, worker_command, produce_command, tail_command,
                    rates_command, replay_command):
        cli.add_command(command)
