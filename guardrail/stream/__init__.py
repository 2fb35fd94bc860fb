"""The stream contract: what the worker reads, judges, publishes and counts.

It knows no Kafka client: records come in as :class:`RawMessage` (bytes plus
their source coordinates, key and headers) and go out as :class:`Outgoing`
(topic, key, value, headers). The Faust worker (:mod:`guardrail.agents`) and ``guardrail replay``
(:mod:`guardrail.replay.backfill`) both move bytes in and out of it::

    judge = MessageJudge.from_settings(evaluator, settings)
    outgoing = await judge.process([RawMessage(value=b'{"output": "hi"}', source=source)])

- :mod:`.envelope` — input decoding, result and DLQ record shapes;
- :mod:`.processing` — a batch of messages → results, judgment events, DLQ records;
- :mod:`.events` — the typed judgment event and the window-table key;
- :mod:`.alerts` — alert rules over window counts, and their delivery;
- :mod:`.telemetry` — the Prometheus metrics.
"""

from .alerts import AlertDispatcher, WindowCounts, check_rule
from .envelope import BadInput, InputMessage, Source, decode_input
from .events import JudgmentEvent, MalformedEvent
from .processing import MessageJudge, Outgoing, RawMessage
from .telemetry import Telemetry

__all__ = ["AlertDispatcher", "BadInput", "InputMessage", "JudgmentEvent", "MalformedEvent",
           "MessageJudge", "Outgoing", "RawMessage", "Source", "Telemetry", "WindowCounts",
           "check_rule", "decode_input"]
