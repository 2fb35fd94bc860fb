"""``guardrail inputs check``: what the worker would make of some input records.

Set up ``input_format`` / ``input_mapping`` before pointing a worker at
production: each record goes through the worker's own decoding
(:func:`guardrail.stream.envelope.decode_record`) and the command shows the
cases it yields, or why it yields none::

    guardrail inputs check spans.jsonl --input-format otlp
    guardrail inputs check --topic otlp_spans --max 20 --input-format otlp
    guardrail inputs check events.jsonl --input-mapping '{"output": "response.text"}' --json

With ``otlp`` input and agent runs on (``agent_runs``, the default), the spans of
agent runs are not cases of their own: after the records, it shows the runs they
assemble into (:mod:`.inputs_runs`): spans per run, whether its root came, the
status it would get, its rendered trajectory (``--json``: the whole run case).

With sessions on (``session_judging``, the default), it then lists the sessions
the cases carrying a conversation id assemble into (:mod:`.inputs_sessions`; an
agent run is one turn): per session its id, turns, traces, first and last turn
time, model versions, turn ids and the transcript the judge reads (``--json``:
the whole session case), and how many cases carry no conversation id.

Exit code 0 when every record decoded (cases or a counted skip), 1 when some
record would go to the DLQ, 2 for usage and settings errors.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import orjson

from ..formats import build_decoder
from ..formats.base import InputDecoder
from ..formats.registry import RegistryDecoder
from ..formats.reader import parse_records
from ..config.settings import Settings
from ..kafka.registry_settings import check_registry
from ..stream.envelope import BadInput, DecodedRecord, InputMessage, Source, decode_record
from .batch import input_format_options, settings_from_flags, settings_options
from .inputs_runs import RunCollector, run_text, span_counts
from .inputs_sessions import SessionCollector, session_text, sessions_heading

__all__ = ["inputs_group"]

_EXCERPT = 72


@click.group("inputs", short_help="Check how input records become cases.")
def inputs_group() -> None:
    """Check how input records become cases (input_format, input_mapping)."""


@inputs_group.command("check", short_help="Show the cases each input record yields.")
@click.argument("path", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--topic", help="Read a sample of this Kafka topic instead of a file.")
@click.option("--max", "limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Records to check.")
@click.option("--bootstrap-servers", help="Kafka bootstrap servers (with --topic).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON line per record, then one per agent run and per session.")
@click.option("--agent-runs/--no-agent-runs", default=None,
              help="With --input-format otlp: assemble the spans of agent runs into runs, as "
                   "the worker does (setting agent_runs, on by default).")
@click.option("--sessions/--no-sessions", "session_judging", default=None,
              help="List the sessions the cases with a conversation id assemble into, as "
                   "the worker does (setting session_judging, on by default).")
@input_format_options
@settings_options
def check_command(path: str | None, topic: str | None, limit: int, bootstrap_servers: str | None,
                  as_json: bool, **flags: Any) -> None:
    """Show the cases each record yields (PATH: JSON, JSON Lines, or one OTLP
    protobuf message), or why it yields none; with OTLP input, then the agent
    runs the records' spans assemble into; then the sessions of the cases that
    carry a conversation id."""
    if (path is None) == (topic is None):
        raise click.UsageError("give a file PATH or --topic, not both")
    settings = settings_from_flags(bootstrap_servers=bootstrap_servers, **flags)
    if topic is not None:  # a topic's records are asked of the registry; a file's are JSON
        check_registry(settings.registry, settings.inputs.input_format, writes=())
    # A bad mapping fails here, before anything is read. A file's records are JSON:
    # with a registry format, the decoded records, read as its inner format.
    decode = _decoding(settings, files=path is not None)
    records = (_file_records(Path(path), settings, decode) if path is not None
               else _topic_records(settings, topic or "", limit, decode))
    runs = RunCollector(settings.runs)
    sessions = SessionCollector(settings.sessions, version_label=settings.windows.version_label)
    failed = 0
    for index, (where, decoded) in enumerate(records):
        if index >= limit:
            break
        failed += _show(where, decoded, as_json)
        if isinstance(decoded, DecodedRecord):
            runs.add(decoded.run_spans)
            for source, item in decoded.items:
                if isinstance(item, InputMessage):
                    sessions.add(item, source)
    run_views = _show_runs(runs, as_json)
    if settings.sessions.session_judging:
        for view in run_views:  # each run is one turn of the conversation it names
            sessions.add_run(view["case"])
        _show_sessions(sessions, as_json)
    sys.exit(1 if failed else 0)


Decode = Callable[[bytes, Source], "DecodedRecord | BadInput"]


def _decoding(settings: Settings, *, files: bool = False) -> Decode:
    """The worker's decoding of one record under ``settings`` (``files``: of a
    record that is JSON, the registry formats' decoded record)."""
    decoder = _decoder(settings)
    if files and isinstance(decoder, RegistryDecoder):
        decoder = decoder.inner

    def decode(raw: bytes, source: Source) -> DecodedRecord | BadInput:
        return decode_record(raw, max_bytes=settings.worker.max_message_bytes, source=source,
                             decoder=decoder,
                             conversation_max_chars=settings.inputs.conversation_max_chars)

    decode.decoder = decoder  # type: ignore[attr-defined]  # its schemas are learnt first
    return decode


async def _learn_schemas(settings: Settings, decoder: Any, records: list[Any]) -> None:
    """The registry formats: ask the registry for the schemas the records name, once
    each, as the worker does; a registry that does not answer ends the check."""
    from ..kafka.schema_registry import RegistryUnavailable, SchemaRegistryClient

    if not isinstance(decoder, RegistryDecoder):
        return
    registry = SchemaRegistryClient(settings.registry)
    try:
        named = decoder.schema_ids((m.value, dict(m.headers or ())) for m in records)
        for schema_id in sorted(decoder.book.missing(named), key=str):
            found = await registry.schema(schema_id)
            if found is None:
                decoder.book.unknown(schema_id)
            else:
                decoder.book.learn(schema_id, *found)
    except RegistryUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        await registry.close()


def _decoder(settings: Settings) -> InputDecoder:
    """The worker's decoder: with ``otlp`` input and agent runs on, one that takes the
    spans of agent runs out of the records (as ``run_spans``) instead of judging them."""
    runs = None
    if settings.inputs.input_format == "otlp" and settings.runs.agent_runs:
        from ..assembly.runs.routing import RunRouter

        runs = RunRouter()
    return build_decoder(settings.inputs, settings.sessions, runs=runs)


def _file_records(path: Path, settings: Settings, decode: Decode
                  ) -> Iterator[tuple[str, DecodedRecord | BadInput]]:
    data = path.read_bytes()
    records, problems = parse_records(data)
    if not records and settings.inputs.input_format == "otlp":
        # Not JSON: one protobuf ExportTraceServiceRequest, as the Collector sends it.
        yield "file", decode(data, Source(path.name, 0, 0))
        return
    for problem in problems:
        yield problem.where, BadInput(problem.reason)
    for number, (where, record) in enumerate(records):
        # Re-encoded and decoded as the worker decodes a Kafka value.
        yield where, decode(orjson.dumps(record), Source(path.name, 0, number))


def _topic_records(settings: Settings, topic: str, limit: int, decode: Decode
                   ) -> Iterator[tuple[str, DecodedRecord | BadInput]]:
    from ..kafka.io import tail_records

    async def read() -> list[Any]:
        messages = [message async for message, _ in tail_records(
            settings.kafka, topic, from_beginning=True, idle_timeout=3.0, limit=limit)]
        await _learn_schemas(settings, getattr(decode, "decoder", None), messages)
        return messages

    for message in asyncio.run(read()):
        headers = tuple((name, value) for name, value in (message.headers or ()))
        source = Source(message.topic, message.partition, message.offset,
                        timestamp_ms=message.timestamp, key=message.key, headers=headers)
        yield source.coordinates, decode(message.value, source)


def _show(where: str, decoded: DecodedRecord | BadInput, as_json: bool) -> int:
    """Print one record's outcome; 1 when something of it would go to the DLQ."""
    if isinstance(decoded, BadInput):
        click.echo(orjson.dumps({"where": where, "dlq": decoded.reason}).decode() if as_json
                   else f"{where}: DLQ: {decoded.reason}")
        return 1
    cases = [_case_view(source, item) for source, item in decoded.items]
    in_runs = span_counts(decoded.run_spans)
    read_as = decoded.conventions
    if as_json:
        line = {"where": where, "cases": cases, "skipped": decoded.skipped}
        line.update({"run_spans": in_runs} if in_runs else {})
        click.echo(orjson.dumps({**line, "conventions": read_as} if read_as else line).decode())
    else:
        skipped = ", ".join(f"{n} {outcome}" for outcome, n in decoded.skipped.items())
        runs = ", ".join(f"{n} span{'' if n == 1 else 's'} of agent run {trace}"
                         for trace, n in in_runs.items())
        click.echo(f"{where}: {len(cases)} case(s)" + (f"; not judged: {skipped}" if skipped
                                                       else "")
                   + (f"; {runs}" if runs else ""))
        for case in cases:
            click.echo("  " + _case_line(case))
        if read_as:
            click.echo(f"  read as {_conventions(read_as)}")
        for notice in decoded.notices:
            click.echo(f"  note: {notice.text}")
    return int(any("dlq" in case for case in cases))


def _conventions(counts: dict[str, int]) -> str:
    """``langfuse (3 spans), otel_genai (1 span)``: the conventions the answers were in."""
    return ", ".join(f"{name} ({n} span{'' if n == 1 else 's'})" for name, n in counts.items())


def _show_runs(runs: RunCollector, as_json: bool) -> list[dict[str, Any]]:
    """The agent runs the records' spans assemble into, each as the worker judges
    it; returns their views."""
    views = runs.views()
    if not as_json and views:
        click.echo(f"\n{len(views)} agent run(s) from these records (each judged once, as "
                   "one case; its verdict on the root span):")
    for view in views:
        click.echo(orjson.dumps({"run": view}).decode() if as_json else "\n" + run_text(view))
    return views


def _show_sessions(sessions: SessionCollector, as_json: bool) -> None:
    """The sessions the turns assemble into, and the cases of no conversation;
    nothing when no case carries a conversation id."""
    views = sessions.views()
    if not views:
        return
    if as_json:
        for view in views:
            click.echo(orjson.dumps({"session": view}).decode())
        click.echo(orjson.dumps({"without_session": sessions.without_session}).decode())
        return
    click.echo("\n" + sessions_heading(len(views), sessions.settings))
    for view in views:
        click.echo("\n" + session_text(view))
    click.echo(f"\n{sessions.without_session} case(s) without a conversation id (judged as "
               "turns only)")


def _case_view(source: Source, item: InputMessage | BadInput) -> dict[str, Any]:
    if isinstance(item, BadInput):
        return {"source": source.as_dict(), "dlq": item.reason}
    case = item.case
    return {"source": source.as_dict(), "case_id": case.case_id, "output": case.output,
            "input": case.input, "conversation": case.field_text("conversation"),
            "metadata": item.metadata, "event_time_ms": item.event_time_ms,
            "trace": item.trace}


def _case_line(case: dict[str, Any]) -> str:
    if "dlq" in case:
        return f"DLQ: {case['dlq']}"
    parts = [f"case_id={case['case_id']}", f"output={_excerpt(case['output'])}"]
    if case["input"]:
        parts.append(f"input={_excerpt(case['input'])}")
    if case["conversation"]:
        parts.append(f"conversation={len(case['conversation'])} chars")
    if case["metadata"]:
        parts.append(" ".join(f"{k}={v}" for k, v in case["metadata"].items()))
    if case["trace"]:
        parts.append(f"trace={case['trace']['trace_id']}:{case['trace']['span_id']}")
    return "  ".join(parts)


def _excerpt(text: str | None) -> str:
    text = " ".join((text or "").split())
    return repr(text if len(text) <= _EXCERPT else text[:_EXCERPT - 1] + "…")
