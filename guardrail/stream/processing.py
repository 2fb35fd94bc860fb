"""Judge a batch of raw Kafka messages into the records to publish.

Transport-free: the Faust worker and ``guardrail replay`` both hand raw
messages in and publish what comes out::

    judge = MessageJudge.from_settings(evaluator, settings)
    outgoing = await judge.process([RawMessage(value=b"...", source=Source(...))])
    # -> results, judgment-event bundles (for windows, see .events), DLQ records;
    #    results and DLQ records carry the input's Kafka headers (trace context)
    judge.tally.judged, judge.tally.cached, judge.tally.cost   # what judging cost so far

With a :class:`~.sampling.Sampler` only a share of the valid messages is
judged; the rest get no judge call and no result, only ``not_sampled``
judgment events, so the windows count them as seen. A
:class:`~.budget.BudgetGovernor` records what each batch's judgments cost and
may lower the share (``factor``)::

    judge = MessageJudge.from_settings(evaluator, settings, sampler=sampler, budget=governor)

Nothing is lost or silently passed: bad input becomes a DLQ record, a judge
failure becomes the metric's ``error``, and when the judge is down for the
whole batch the batch waits (``outage_policy="pause"``) instead of publishing
errors. A misconfigured judge (key refused or missing, unknown model) raises
:class:`~guardrail.errors.JudgeConfigError` out of ``process``: nothing of the
batch may be published or acked, the caller stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from .._event_time import now_ms
from ..assembly.base import RUN_SPAN_HEADERS
from ..formats import CaseDecoder, InputDecoder, build_decoder
from ..judging.evaluate import Evaluator
from ..judging.models import MetricRubric, RedteamMetrics
from ..kafka.registry_settings import RegistrySettings
from ..kafka.settings import KafkaSettings
from ..review.selection import review_item
from ..review.settings import ReviewSettings
from .budget import BudgetGovernor
from .envelope import (DEFAULT_CONVERSATION_CHARS, BadInput, DecodedRecord, Headers,
                       InputMessage, Source, decode_record, dlq_record, group_labels, result_value)
from .events import JudgmentEvent, Status, bundled, encode_bundle
from .sampling import Sampler
from .session_turns import (TURN_HEADERS, counts_in_windows, message_unit, standing_verdicts,
                            turn_record_value, window_labels)
from .settings import StreamGroups, WindowSettings, WorkerSettings
from .outage import OutageWaits
from .registry_io import RegistryIO
from .tally import JudgeTally
from .telemetry import Telemetry

__all__ = ["RawMessage", "Outgoing", "MessageJudge", "JudgeTally", "ResultExporter",
           "RecordJudgment", "CaseOutcome"]

log = logging.getLogger("guardrail.worker")

#: A valid case of a batch: its record's judgment, its own source (``index``
#: inside a many-case record) and the decoded message.
Case3 = tuple["RecordJudgment", Source, InputMessage]
FloorOf = Callable[[str, int], "int | None"]  #: see MessageJudge.process


class ResultExporter(Protocol):
    """Somewhere else each judged result goes (``otlp_endpoint``), on the case's
    span with its conversation: must not block or raise (see
    :class:`guardrail.stream.otel_export.EvaluationExporter`)."""

    def export_result(self, metrics: RedteamMetrics, message: InputMessage, *,
                      event_time_ms: int | None) -> None: ...


@dataclass(frozen=True)
class RawMessage:
    value: bytes | None
    source: Source


@dataclass(frozen=True)
class Outgoing:
    """One record to publish: ``timestamp_ms`` None lets the producer stamp it,
    ``partition`` None its partitioner choose (bundles set it); ``headers`` go as they
    are (results and DLQ records repeat the input's: trace context propagates)."""

    topic: str
    key: bytes | None
    value: bytes
    timestamp_ms: int | None = None
    headers: Headers = ()
    partition: int | None = None


@dataclass(frozen=True)
class CaseOutcome:
    """What became of one case of a record: judged (``metrics``), not readable
    (``invalid``: its DLQ reason) or left unjudged (``unjudged``: ``not_sampled``);
    ``message``, ``rubrics`` and ``event_time_ms`` of a readable one (a held
    record's review item is made of them)."""

    case_id: str
    metrics: RedteamMetrics | None = None
    invalid: str | None = None
    unjudged: str | None = None
    session_id: str | None = None
    message: InputMessage | None = field(default=None, repr=False)
    rubrics: tuple[MetricRubric, ...] = field(default=(), repr=False)
    event_time_ms: int | None = None


@dataclass
class RecordJudgment:
    """What one input record came to: the records to publish for it (results, DLQ,
    review items, spans and turns to assemble) and each of its cases' outcome;
    ``unreadable`` is the DLQ reason of a record that could not be read at all."""

    raw: RawMessage
    outgoing: list[Outgoing] = field(default_factory=list)
    cases: list[CaseOutcome] = field(default_factory=list)
    unreadable: str | None = None


class MessageJudge(OutageWaits, RegistryIO):
    """Decode, judge and turn a batch into results, judgment events and DLQ records."""

    def __init__(self, evaluator: Evaluator, *, worker: WorkerSettings, kafka: KafkaSettings,
                 windows: WindowSettings, telemetry: Telemetry | None = None,
                 emit_judgments: bool = True, results_topic: str | None = None,
                 dlq_topic: str | None = None, origin: str = "live",
                 sampler: Sampler | None = None, budget: BudgetGovernor | None = None,
                 decoder: InputDecoder | None = None,
                 conversation_max_chars: int = DEFAULT_CONVERSATION_CHARS,
                 exporter: ResultExporter | None = None,
                 review: ReviewSettings | None = None,
                 run_spans_topic: str | None = None, session_turns_topic: str | None = None,
                 budgets: dict[str, int] | None = None,
                 registry: RegistrySettings | None = None) -> None:
        self.evaluator = evaluator
        #: Where spans of agent runs go, keyed by trace id, to be assembled
        #: (:mod:`guardrail.agents.run_assembly`); None: runs are off.
        self.run_spans_topic = run_spans_topic
        #: Where turns of sessions go, keyed by session id, after their own
        #: judgment (:mod:`.session_turns`); None: sessions are off.
        self.session_turns_topic = session_turns_topic
        #: The review queue's settings when it is on: chosen results also go
        #: to ``review.review_topic`` (guardrail.review.selection).
        self.review = review
        #: The input format (``case`` when None) and its conversation budget.
        self.decoder, self.conversation_max_chars = decoder or CaseDecoder(), conversation_max_chars
        #: The trajectory's budgets (``trajectory_max_chars``, ``tool_result_max_chars``).
        self.budgets = budgets or {}
        #: Where else every result goes (OTLP log records), best effort.
        self.exporter = exporter
        self._noticed: set[str] = set()
        self.worker, self.kafka, self.windows = worker, kafka, windows
        self.telemetry = telemetry or Telemetry()
        #: Groups with their own /metrics series; later ones are counted as "other".
        self.telemetry.groups.max_groups = windows.metrics_max_groups
        self.emit_judgments = emit_judgments
        self.results_topic = results_topic or kafka.results_topic
        self.dlq_topic = dlq_topic or kafka.dlq_topic
        self.tally = JudgeTally()
        #: None: every valid message is judged.
        self.sampler, self.budget = sampler, budget
        #: Valid messages left unjudged by the sampling.
        self.not_sampled = 0
        #: Which run produced the judgments ("live", or a replay's id): see .events.
        self.origin = origin
        self._use_registry(registry)  # schemas in, results out: .registry_io

    @classmethod
    def from_settings(cls, evaluator: Evaluator, settings: StreamGroups, **options: Any,
                      ) -> MessageJudge:
        """Take the groups it needs (:class:`~.settings.StreamGroups`) from ``settings``."""
        options.setdefault("decoder", build_decoder(settings.inputs, settings.sessions))
        options.setdefault("conversation_max_chars", settings.inputs.conversation_max_chars)
        options.setdefault("registry", settings.registry)
        options.setdefault("budgets", {
            "trajectory_max_chars": settings.runs.trajectory_max_chars,
            "tool_result_max_chars": settings.runs.tool_result_max_chars})
        if settings.review.review_users_file is not None:
            options.setdefault("review", settings.review)
        return cls(evaluator, worker=settings.worker, kafka=settings.kafka,
                   windows=settings.windows, **options)

    async def process(self, batch: list[RawMessage], *,
                      floor_of: FloorOf | None = None) -> list[Outgoing]:
        """Never raises for bad input or judge trouble, except
        :class:`~guardrail.errors.JudgeConfigError`; may wait out an outage.

        One record may hold many cases (``otlp``): each gets its own source
        (``index``), and the records of all of them come back together, so the
        caller acks the record only after every case of it is published.
        ``floor_of(topic, partition)``, asked once the batch is judged, gives
        the judgment events their :attr:`~.events.JudgmentEvent.floor`."""
        records, bundles = await self.judge_records(batch, floor_of=floor_of)
        return [out for record in records for out in record.outgoing] + bundles

    async def judge_records(self, batch: list[RawMessage], *, floor_of: FloorOf | None = None,
                            ) -> tuple[list[RecordJudgment], list[Outgoing]]:
        """:meth:`process`, record by record: what each input record came to, and
        the batch's judgment-event bundles (one record may hold events of many)."""
        await self._learn_schemas(batch)  # may wait out the registry (.registry_io)
        await self._results_schema_ready()
        records, good = self._decode(batch)
        standing = [case for case in good if standing_verdicts(case[2]) is not None]
        good = [case for case in good if standing_verdicts(case[2]) is None]
        # Before any await: batches start in order, so the sampler sees each
        # partition's cases in (offset, index) order (its version counts need that).
        chosen = self._sample(good)
        judged = [case for case, take in zip(good, chosen) if take]
        self.telemetry.in_flight.inc(len(judged))
        try:
            verdicts = await self._judge_until_available([msg for _, _, msg in judged])
        finally:
            self.telemetry.in_flight.dec(len(judged))
        if self.budget is not None:
            self.budget.record(verdicts)
            self.budget.update()
        # In input order, unsampled cases too: older releases' counters need it.
        next_verdict = iter(verdicts)
        events: list[JudgmentEvent] = []
        floors = {} if floor_of is None else {where: floor_of(*where) for where in {
            (s.topic, s.partition) for _, s, _ in good + standing}}
        for (record, source, msg), take in zip(good, chosen):
            verdict = next(next_verdict) if take else None
            floor = floors.get((source.topic, source.partition))
            record.outgoing.extend(self._records(record.raw, source, msg, verdict, events, floor)
                                   if take else self._not_sampled(source, msg, events, floor))
            record.outgoing.extend(self._turn(source, msg, verdict))
            record.cases.append(CaseOutcome(
                msg.case.case_id or source.coordinates, verdict,
                unjudged=None if take else "not_sampled", session_id=msg.session_id,
                message=msg, rubrics=tuple(self.evaluator.effective_config(msg.case).metrics),
                event_time_ms=_event_ms(source, msg)))
        for record, source, msg in standing:  # a session of one turn: counted, not judged
            if self.emit_judgments:
                events.extend(self._events(msg, source, floors.get(
                    (source.topic, source.partition)), standing_verdicts(msg) or []))
            record.cases.append(CaseOutcome(msg.case.case_id or "", unjudged="turn_stands"))
        return records, self._bundles(events)

    def _turn(self, source: Source, message: InputMessage,
              verdict: RedteamMetrics | None) -> list[Outgoing]:
        """A case with a conversation id as a turn of its session (acked after it, as spans)."""
        if not (self.session_turns_topic and message.session_id) or message.session is not None:
            return []
        self.telemetry.session_turns.labels(outcome="forwarded").inc()
        value = turn_record_value(message, verdict, event_ms=_event_ms(source, message))
        return [Outgoing(self.session_turns_topic, message.session_id.encode(), value,
                         headers=TURN_HEADERS)]

    def _decode(self, batch: list[RawMessage]) -> tuple[list[RecordJudgment], list[Case3]]:
        """Each record's judgment so far (DLQ records for what cannot be read, spans
        forwarded to assembly), and the batch's valid cases in input order."""
        records: list[RecordJudgment] = []
        good: list[Case3] = []
        for raw in batch:
            record = RecordJudgment(raw)
            records.append(record)
            decoded = decode_record(raw.value, max_bytes=self.worker.max_message_bytes,
                                    source=raw.source, decoder=self.decoder,
                                    conversation_max_chars=self.conversation_max_chars,
                                    budgets=self.budgets)
            if isinstance(decoded, BadInput):
                record.unreadable = decoded.reason
                record.outgoing.append(self._dlq(raw, raw.source, decoded.reason))
                continue
            self._note_skipped(decoded)
            record.outgoing.extend(self._forward_run_spans(raw, decoded))
            for source, item in decoded.items:
                if isinstance(item, BadInput):
                    record.outgoing.append(self._dlq(raw, source, item.reason))
                    record.cases.append(CaseOutcome(source.coordinates, invalid=item.reason))
                else:
                    good.append((record, source, item))
        return records, good

    def _forward_run_spans(self, raw: RawMessage, decoded: DecodedRecord) -> list[Outgoing]:
        """The record's spans of agent runs, one record each keyed by trace id,
        so one worker assembles each run; published before the record is acked."""
        if not decoded.run_spans:
            return []
        if self.run_spans_topic is None:  # a decoder with a router and nowhere to send
            raise RuntimeError("run spans decoded but no run_spans_topic set")
        self.telemetry.run_spans.labels(outcome="forwarded").inc(len(decoded.run_spans))
        return [Outgoing(self.run_spans_topic, span.trace_id.encode(), span.to_bytes(),
                         timestamp_ms=raw.source.timestamp_ms, headers=RUN_SPAN_HEADERS)
                for span in decoded.run_spans]

    def _note_skipped(self, decoded: DecodedRecord) -> None:
        """Count what a record held and was not to judge; say each notice once."""
        for outcome, count in decoded.skipped.items():
            self.telemetry.messages.labels(outcome=outcome).inc(count)
        for notice in decoded.notices:
            if notice.key not in self._noticed:
                self._noticed.add(notice.key)
                log.warning("%s", notice.text)

    def _sample(self, good: list[Case3]) -> list[bool]:
        """Judge each case? (All of them without a sampler.)"""
        if self.sampler is None:
            return [True] * len(good)
        factor = 1.0 if self.budget is None else self.budget.factor
        return [self.sampler.decide(msg, source, factor) for _, source, msg in good]

    def _not_sampled(self, source: Source, message: InputMessage,
                     events: list[JudgmentEvent], floor: int | None) -> list[Outgoing]:
        """No record, only a ``not_sampled`` event per metric (the windows' seen)."""
        self.not_sampled += 1
        self.telemetry.messages.labels(outcome="not_sampled").inc()
        if self.emit_judgments and counts_in_windows(message):
            names = [m.name for m in self.evaluator.effective_config(message.case).metrics]
            events.extend(self._events(message, source, floor,
                                       [(n, "not_sampled", ()) for n in names]))
        return []

    def _dlq(self, raw: RawMessage, source: Source, reason: str) -> Outgoing:
        """A DLQ record for a whole record, or (``source.index`` set) one case of it."""
        self.telemetry.messages.labels(outcome="dlq").inc()
        log.info("DLQ %s: %s", source.coordinates, reason)
        value = self._dlq_value(orjson.dumps(dlq_record(reason, raw.value, source)))
        return Outgoing(self.dlq_topic, source.key, value, headers=source.headers)

    def _records(self, raw: RawMessage, source: Source, message: InputMessage,
                 metrics: RedteamMetrics, events: list[JudgmentEvent],
                 floor: int | None) -> list[Outgoing]:
        """A judged case's result (and review item); its events go to ``events``."""
        event_ms = _event_ms(source, message)
        value = self._result_value(result_value(message, metrics, source, event_time_ms=event_ms,
                                                judge_model=self.evaluator.judge.model))
        # Keyed by case_id, which decoding always set (the case's own, else
        # the input's key, else its coordinates).
        key = (message.case.case_id or source.coordinates).encode()
        records = [Outgoing(self.results_topic, key, value, headers=raw.source.headers)]
        self._count(metrics, message)
        if self.exporter is not None:
            self.exporter.export_result(metrics, message, event_time_ms=event_ms)
        if self.review is not None:
            records.extend(self._review(message, metrics, event_ms))
        if self.emit_judgments and counts_in_windows(message):
            events.extend(self._events(message, source, floor, [
                (m.name, "error" if m.error else ("unsafe" if m.unsafe else "safe"),
                 tuple(m.result[0].evidence_spans[:3]) if m.unsafe else ())
                for m in metrics.metrics]))
        return records

    def _review(self, message: InputMessage, metrics: RedteamMetrics,
                event_ms: int) -> list[Outgoing]:
        """The review item of a result, when some metric of it is chosen (the
        same choice on every redelivery and replay: readers fold by key)."""
        assert self.review is not None
        item = review_item(
            message.case, metrics, self.evaluator.effective_config(message.case).metrics,
            review=self.review, thresholds=self.evaluator.evaluation.verdict_thresholds,
            judge_model=self.evaluator.judge.model, event_time_ms=event_ms, labels=message.metadata,
            trace=message.trace, run=message.run, session=message.session)
        if item is None:
            return []
        self.telemetry.review_items.inc()
        return [Outgoing(self.review.review_topic, item.key(), item.encode())]

    def _count(self, metrics: RedteamMetrics, message: InputMessage) -> None:
        self.tally.add(metrics)
        cascade = self.evaluator.cascade
        self.telemetry.count_judged(metrics, message.metadata, unit=message_unit(message),
                                    escalation_model=cascade.model if cascade else None)

    def _events(self, message: InputMessage, source: Source, floor: int | None,
                verdicts: list[tuple[str, Status, tuple[str, ...]]]) -> list[JudgmentEvent]:
        """Judgment events, one per (metric, status, evidence spans)."""
        labels = window_labels(message, group_labels(message.metadata, self.windows.group_labels))
        event_ms = _event_ms(source, message)
        return [JudgmentEvent(metric=metric, group=labels, status=status,
                              case_id=message.case.case_id, event_time_ms=event_ms,
                              evidence_spans=spans, source=source, origin=self.origin,
                              floor=floor)
                for metric, status, spans in verdicts]

    def _bundles(self, events: list[JudgmentEvent]) -> list[Outgoing]:
        """One judgments record per partition key and window, events in input order
        (de-duplication needs it), stamped with the first event's time."""
        topic, version_label = self.kafka.judgments_topic, self.windows.version_label
        if not self.windows.judgment_bundles:  # one record per event, as before bundles
            return [Outgoing(topic, e.partition_key(version_label), e.encode(),
                             timestamp_ms=e.event_time_ms) for e in events]
        return [Outgoing(topic, key, encode_bundle(bundle), timestamp_ms=bundle[0].event_time_ms)
                for key, bundle in bundled(events, version_label, self.windows.window_seconds)]


def _event_ms(source: Source, message: InputMessage) -> int:
    """The message's event time: its own, else the Kafka timestamp, else now."""
    held = next((t for t in (message.event_time_ms, source.timestamp_ms)
                 if t is not None and t >= 0), None)
    return now_ms() if held is None else held  # the clock read only when needed
