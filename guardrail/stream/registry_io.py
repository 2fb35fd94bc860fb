"""The Schema Registry side of a message judge: the schemas a batch names asked
for before it is decoded, the results schema registered before the first result,
and a registry that does not answer waited out, never put on a record::

    await self._learn_schemas(batch)      # fills the decoder's SchemaBook; may wait
    await self._results_schema_ready()    # registers under the results (and DLQ) subject once
    value = self._result_value(json_value)   # framed, or the JSON as it was
    value = self._dlq_value(json_value)      # the same for a DLQ record (``dlq_format``)

While the registry is down the batch is held, unacked, as in a judge outage
(:mod:`.outage`): the worker says so, ``guardrail_paused`` is 1, and it retries
with backoff up to ``outage_max_backoff``. Only the registry's own "no such
schema" puts a record on the DLQ (as ``unknown schema id N``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ..formats.registry import RegistryDecoder
from ..formats.registry_results import RECORD_NAMES, ResultEncoder, result_schema, subject_name
from ..kafka.registry_settings import RegistrySettings
from ..kafka.schema_registry import RegistryUnavailable, SchemaRegistryClient

__all__ = ["RegistryIO"]

log = logging.getLogger("guardrail.worker")
T = TypeVar("T")


class RegistryIO:
    """Mixed into :class:`~.processing.MessageJudge` (which sets ``decoder``,
    ``worker``, ``telemetry``, ``results_topic`` and ``_pause``)."""

    decoder: Any
    worker: Any
    telemetry: Any
    results_topic: str
    dlq_topic: str
    _pause: Callable[[float], Awaitable[None]]  # OutageWaits' (tests replace it)
    registry_settings: RegistrySettings | None = None
    registry: SchemaRegistryClient | None = None
    #: Record kind (``result``, ``dlq``) → its encoder, for the formats not ``json``.
    _encoders: dict[str, ResultEncoder]
    _encoders_ready = False

    def _use_registry(self, settings: RegistrySettings | None) -> None:
        """Talk to the registry when a registry format is in use."""
        self.registry_settings, self._encoders = settings, {}
        wanted = isinstance(self.decoder, RegistryDecoder) or (settings is not None and (
            settings.results_format != "json" or settings.dlq_format != "json"))
        if wanted and settings is not None:
            # Without schema_registry_url this refuses (ConfigError): the commands say
            # so first (check_registry); this catches a caller that builds a judge itself.
            self.registry = SchemaRegistryClient(settings)

    async def _learn_schemas(self, batch: Iterable[Any]) -> None:
        """Ask the registry for every schema a batch's records name (in their value's
        prefix or their ``__value_schema_id`` header) that is not known yet."""
        if not isinstance(self.decoder, RegistryDecoder) or self.registry is None:
            return
        book, registry = self.decoder.book, self.registry
        named = self.decoder.schema_ids((raw.value, dict(raw.source.headers)) for raw in batch)
        for schema_id in sorted(book.missing(named), key=str):
            found = await self._until_registry_answers(lambda i=schema_id: registry.schema(i))
            if found is None:
                book.unknown(schema_id)
            else:
                book.learn(schema_id, *found)

    async def _results_schema_ready(self) -> None:
        """Register the results (and DLQ) schema under its topic's subject, once."""
        settings, registry = self.registry_settings, self.registry
        if self._encoders_ready or registry is None or settings is None:
            return
        for kind, fmt, topic in (("result", settings.results_format, self.results_topic),
                                 ("dlq", settings.dlq_format, self.dlq_topic)):
            if fmt == "json":
                continue
            subject = subject_name(settings.subject_name_strategy, topic, RECORD_NAMES[kind])
            schema_id = await self._until_registry_answers(
                lambda f=fmt, k=kind, s=subject: registry.register(
                    s, ResultEncoder.schema_type_of(f), result_schema(f, k)))
            log.info("%s schema (%s) registered under %s as id %d", kind, fmt, subject,
                     schema_id)
            self._encoders[kind] = ResultEncoder(fmt, schema_id, kind)
        self._encoders_ready = True

    def _result_value(self, value: bytes) -> bytes:
        encoder = self._encoders.get("result")
        return value if encoder is None else encoder.encode(value)

    def _dlq_value(self, value: bytes) -> bytes:
        encoder = self._encoders.get("dlq")
        return value if encoder is None else encoder.encode(value)

    async def _until_registry_answers(self, ask: Callable[[], Awaitable[T]]) -> T:
        """``ask()``, retried with backoff for as long as the registry is unavailable."""
        delay = 1.0
        while True:
            try:
                answer = await ask()
            except RegistryUnavailable as exc:
                log.warning("schema registry unavailable; pausing %.0fs: %s", delay, exc)
                self.telemetry.paused.set(1)
                self.telemetry.outage_pauses.inc()
                await self._pause(delay)
                delay = min(delay * 2, self.worker.outage_max_backoff)
                continue
            self.telemetry.paused.set(0)
            return answer

    async def close_registry(self) -> None:
        if self.registry is not None:
            await self.registry.close()
