"""The stream contract: what the worker reads, judges, publishes and counts.

It knows no Kafka client: records come in as :class:`RawMessage` (bytes plus
their source coordinates, key and headers) and go out as :class:`Outgoing`
(topic, key, value, headers). The Faust worker (:mod:`guardrail.agents`) and ``guardrail replay``
(:mod:`guardrail.replay.backfill`) both move bytes in and out of it::

    judge = MessageJudge.from_settings(evaluator, settings)
    outgoing = await judge.process([RawMessage(value=b'{"output": "hi"}', source=source)])

- :mod:`.settings` — the ``worker``, ``windows`` and ``sampling`` settings groups.
- :mod:`.envelope` — input decoding, result and DLQ record shapes; :mod:`.schemas`
  and :mod:`.alert_schemas` — the records' typed descriptions.
- :mod:`.processing` — a batch of messages → results, judgment events, DLQ records;
  :mod:`.tally` — what its judgments cost; :mod:`.session_turns` and
  :mod:`.item_bundles` — turns and spans on their way to assembly.
- :mod:`.sampling` and :mod:`.budget` — which messages are judged, and the judge
  budget that lowers the share.
- :mod:`.events` — the typed judgment event and the window-table key; :mod:`.dedup`
  — exact window counts under redelivery.
- :mod:`.alerts` — alert rules over window counts, and their delivery;
  :mod:`.agreement` — the judge against its reviewers, and rates corrected for it.
- :mod:`.telemetry` and :mod:`.group_series` — the Prometheus metrics;
  :mod:`.otel_export` — verdicts sent back into the team's tracing.
- :mod:`.liveness` and :mod:`.kafka_trouble` — stalled partitions and a Kafka
  client's failures, as the worker reports them.
- :mod:`.dashboard` — the ``/dashboard`` page, rendered from plain rows.

It imports the wings below it (the judging core, the judges, formats, assembly,
review, Kafka's settings), never a Kafka client, Faust or the whole settings:
:meth:`MessageJudge.from_settings` takes any object with the groups it names
(:class:`~.settings.StreamGroups`). Names are imported on first use: every
command reads this wing's settings, and only some judge.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_HOMES = {
    "MessageJudge": ".processing", "Outgoing": ".processing", "RawMessage": ".processing",
    "BadInput": ".envelope", "InputMessage": ".envelope", "Source": ".envelope",
    "decode_input": ".envelope", "JudgmentEvent": ".events", "MalformedEvent": ".events",
    "AlertDispatcher": ".alerts", "WindowCounts": ".alerts", "check_rule": ".alerts",
    "Telemetry": ".telemetry", "WorkerSettings": ".settings", "WindowSettings": ".settings",
    "AlertRule": ".settings", "SamplingSettings": ".settings", "SampleRule": ".settings",
    "StreamGroups": ".settings",
}

__all__ = list(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
