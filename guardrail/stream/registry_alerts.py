"""The alerts topic's values in the format ``alerts_format`` says: guardrail's
JSON, or the registry wire format under the alert schema of
``guardrail/formats/schemas/alert_record.*``, registered under the alerts
topic's subject when the first alert is written::

    values = AlertValues(settings.registry, settings.kafka.alerts_topic)
    value = await values.of(alert)   # json: orjson.dumps(alert); avro: b"\\x00\\x00\\x00\\x00\\x05…"

The registry is asked once, and only when an alert fires (a worker that never
alerts never registers). A registry that does not answer then, or refuses the
schema, fails that alert's write to the topic, not the worker: the
:class:`~.alerts.AlertDispatcher` logs it, the alert is in the log line and goes
to the webhook as JSON, and the next alert tries to register again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from ..formats.registry_results import RECORD_NAMES, ResultEncoder, result_schema, subject_name
from ..kafka.registry_settings import RegistrySettings
from ..kafka.schema_registry import SchemaRegistryClient

__all__ = ["AlertValues"]

log = logging.getLogger("guardrail.alerts")


class AlertValues:
    """Alerts (JSON-ready dicts) → the alerts topic's value bytes."""

    def __init__(self, settings: RegistrySettings, topic: str) -> None:
        self.settings = settings
        self.alerts_format = settings.alerts_format
        self.subject = subject_name(settings.subject_name_strategy, topic,
                                    RECORD_NAMES["alert"])
        self._encoder: ResultEncoder | None = None
        # Alerts fired together register the schema once.
        self._registering = asyncio.Lock()

    async def of(self, alert: dict[str, Any]) -> bytes:
        """One alert's value: its JSON, framed under the registered schema when
        ``alerts_format`` is a registry format."""
        value = orjson.dumps(alert)
        if self.alerts_format == "json":
            return value
        encoder = self._encoder or await self._register()
        return encoder.encode(value)

    async def _register(self) -> ResultEncoder:
        async with self._registering:
            if self._encoder is None:
                fmt = self.alerts_format
                # A client for this one request: once the id is known the worker
                # never asks the registry about alerts again.
                registry = SchemaRegistryClient(self.settings)
                try:
                    schema_id = await registry.register(
                        self.subject, ResultEncoder.schema_type_of(fmt),
                        result_schema(fmt, "alert"))
                finally:
                    await registry.close()
                log.info("alert schema (%s) registered under %s as id %d", fmt,
                         self.subject, schema_id)
                self._encoder = ResultEncoder(fmt, schema_id, "alert")
        return self._encoder
