"""Faust's aiokafka transport with three corrections.

**Fetch wait.** faust-streaming 0.15.3 builds its worker consumer with
``fetch_max_wait_ms`` fixed at 1500. Kafka answers a fetch as soon as
``fetch_min_bytes`` (1) is there, so the wait only bounds idle polling; but a
broker that holds every fetch for the full wait (Tansu, the embedded broker,
does) then adds up to 1.5 s to each message's latency — measured in
``bench/worker/latency.py`` as the whole p99 floor. The wait comes from
``consumer_fetch_wait_ms``.

**End offsets for table recovery.** Faust recovers a table partition by
reading its changelog up to the end offset ``ListOffsets`` reports. Tansu
reports the *base offset of the last record batch + 1*, not the offset after
the last record, so recovery stopped inside the last batch and silently
dropped the newest counts of a window cell (the fault suite's windows came
out a few short whenever partitions moved). The high watermark a real fetch
returns is right on every broker, so the recovery end offsets are taken as
the larger of the two (on Apache Kafka they are equal).

**Commits only of what was processed.** The worker consumer
(:class:`~guardrail.agents.consumer.ProcessedOnlyConsumer`) replaces Faust's
offset bookkeeping around rebalances: see its module.

Besides the transport, :class:`GuardrailFaustApp` runs stop hooks after the agents
and the consumer stopped, before the producer stops (``before_producer_stops``), and
revoke hooks at the end of each revoke phase (``after_revoke``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar

import aiokafka
import faust
import mode
from faust.transport.drivers import aiokafka as faust_aiokafka

from ..kafka.time_offsets import offsets_since
from .consumer import ProcessedOnlyConsumer

log = logging.getLogger("guardrail.transport")

__all__ = ["GuardrailFaustApp"]


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "fetch_wait_ms", None)
        if wait_ms is not None:
            # Read once, when the consumer starts its Fetcher.
            consumer._fetch_max_wait_ms = int(wait_ms)
        if getattr(self.app, "read_committed", False):  # likewise
            consumer._isolation_level = "read_committed"
        return consumer

    async def _highwaters(self, partitions: list[Any]) -> Mapping[Any, int]:
        reported = await super()._highwaters(partitions)
        if self.consumer.in_transaction or not any(reported.values()):
            return reported
        if getattr(self.app, "read_committed", False):
            # Written in transactions: the end reported is past the last commit marker,
            # a record nobody reads; recovery waits for the last record it does read.
            return await committed_ends(self._probe_options(), reported)
        fetched = await fetched_highwaters(self._probe_options(), reported)
        return {tp: max(offset, fetched.get(tp, offset)) for tp, offset in reported.items()}

    async def earliest_offsets(self, *partitions: Any) -> Mapping[Any, int]:
        """Where table recovery starts: the beginning, except for changelogs
        with a horizon (the window table's), where it is the first record
        written since then: older records hold only expired cells, and reading
        them would make every restart slower than the last."""
        earliest = dict(await super().earliest_offsets(*partitions))
        horizons = getattr(self.app, "changelog_horizons", {})
        bounded = [tp for tp in partitions if tp.topic in horizons]
        if bounded:
            earliest.update(await _offsets_since_horizon(self._probe_options(), bounded,
                                                         horizons))
        return earliest

    async def seek_in_thread(self, tp: Any, offset: int) -> None:
        """Seek on the consumer thread's loop, in turn with its fetches (Faust's
        ``seek`` calls into aiokafka from the caller's thread)."""
        await self.call_thread(self._seek_now, tp, offset)

    async def _seek_now(self, tp: Any, offset: int) -> None:
        consumer = self._ensure_consumer()
        if tp in consumer.assignment():  # else revoked meanwhile: nothing left to read
            consumer.seek(tp, offset)

    def _probe_options(self) -> dict[str, Any]:
        transport, conf = self.transport, self.app.conf
        return dict(
            bootstrap_servers=faust_aiokafka.server_list(transport.url, transport.default_port),
            **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials,
                                                         conf.ssl_context))


async def _offsets_since_horizon(options: dict[str, Any], partitions: list[Any],
                                 horizons: Mapping[str, float]) -> dict[Any, int]:
    """Per partition, the first offset written within its topic's horizon, read
    by a throwaway group-less consumer (the worker's own must not move). On
    failure the partitions are left out: recovery then reads from the beginning."""
    keys = {aiokafka.TopicPartition(tp.topic, tp.partition): tp for tp in partitions}
    probe = aiokafka.AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                      fetch_max_wait_ms=100, **options)
    started, found = False, {}
    try:
        await probe.start()
        started = True
        probe.assign(list(keys))
        for topic in {tp.topic for tp in partitions}:
            since_ms = int((time.time() - horizons[topic]) * 1000)
            mine = [key for key in keys if key.topic == topic]
            for key, offset in (await offsets_since(probe, mine, since_ms)).items():
                found[keys[key]] = offset
        log.info("table recovery starts at the first changelog records of the live "
                 "windows: %s", {f"{tp.topic}[{tp.partition}]": o for tp, o in found.items()})
    except Exception as exc:  # the beginning is still a correct start
        log.warning("could not find where the live windows start (%s); recovering the "
                    "whole changelog", exc)
        return {}
    finally:
        if started:
            await probe.stop()
    return found


@contextlib.asynccontextmanager
async def _probe(options: dict[str, Any], seek: Mapping[Any, int],
                 **consumer: Any) -> AsyncIterator[aiokafka.AIOKafkaConsumer]:
    """A throwaway group-less consumer assigned the partitions of ``seek``, each
    sought to its offset there (one whose start fails is not stopped)."""
    probe = aiokafka.AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                      fetch_max_wait_ms=100, **consumer, **options)
    await probe.start()
    try:
        probe.assign(list(seek))
        for key, offset in seek.items():
            probe.seek(key, offset)
        yield probe
    finally:
        await probe.stop()


def _with_data(reported: Mapping[Any, int]) -> dict[aiokafka.TopicPartition, Any]:
    """aiokafka's partition -> the caller's, for the partitions with records."""
    return {aiokafka.TopicPartition(tp.topic, tp.partition): tp
            for tp, end in reported.items() if end > 0}


async def fetched_highwaters(options: dict[str, Any], reported: Mapping[Any, int], *,
                             timeout: float = 10.0) -> dict[Any, int]:
    """The high watermark a fetch returns for each partition with data, read
    by a throwaway group-less consumer positioned at the reported end - 1
    (a record that exists: the last batch's first). Partitions it could not
    read within ``timeout`` are left out (the caller keeps the reported end)."""
    wanted = _with_data(reported)
    if not wanted:
        return {}
    try:
        async with _probe(options, {key: reported[tp] - 1 for key, tp in wanted.items()}
                          ) as probe:
            return await _read_highwaters(probe, wanted, timeout)
    except Exception as exc:  # the reported offsets are still a usable answer
        log.warning("could not read changelog high watermarks (%s); using reported ends", exc)
        return {}


async def committed_ends(options: dict[str, Any], reported: Mapping[Any, int], *,
                         back: int = 256, timeout: float = 10.0) -> dict[Any, int]:
    """Per partition, one past the last record a ``read_committed`` reader gets below
    the reported end (the last stable offset): the transaction markers after it, and
    the records of a transaction aborted there, hold no record it reads. Looked for
    from ``back`` offsets before the end, then four times as far while none is found
    (seen: a gate changelog ending in 268 offsets of a killed worker's aborted
    transaction; recovery waited for them for ever); a partition with no committed
    record at all ends at 0."""
    wanted = _with_data(reported)
    ends = dict(reported)
    while wanted:
        last, unread = await _last_committed(options, wanted, reported, back, timeout)
        for key, tp in list(wanted.items()):
            if key in last:
                ends[tp] = last[key] + 1
            elif key in unread:
                pass  # not read to its end in time: its end stays as reported
            elif reported[tp] - back > 0:
                continue  # look further back
            else:
                ends[tp] = 0
            del wanted[key]
        back *= 4
    return ends


async def _last_committed(options: dict[str, Any], wanted: Mapping[Any, Any],
                          reported: Mapping[Any, int], back: int, timeout: float
                          ) -> tuple[dict[Any, int], set[Any]]:
    """The offset of the last record a ``read_committed`` reader gets in the ``back``
    offsets before each reported end, for the partitions with one there; and the
    partitions not read to their end within ``timeout``."""
    seek = {key: max(0, reported[tp] - back) for key, tp in wanted.items()}
    last: dict[Any, int] = {}
    async with _probe(options, seek, isolation_level="read_committed") as probe:
        pending = set(wanted)
        deadline = asyncio.get_running_loop().time() + timeout
        while pending and asyncio.get_running_loop().time() < deadline:
            batch = await probe.getmany(*pending, timeout_ms=200)
            for key, records in batch.items():
                last[key] = max([last.get(key, -1), *(r.offset for r in records)])
            pending = {key for key in pending if await probe.position(key) < reported[wanted[key]]}
    return {key: offset for key, offset in last.items() if offset >= 0}, pending


async def _read_highwaters(probe: aiokafka.AIOKafkaConsumer, wanted: Mapping[Any, Any],
                           timeout: float) -> dict[Any, int]:
    pending = dict(wanted)
    found: dict[Any, int] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    while pending and asyncio.get_running_loop().time() < deadline:
        await probe.getmany(*pending, timeout_ms=200, max_records=1)
        for key in list(pending):
            highwater = probe.highwater(key)
            if highwater is not None:
                found[pending.pop(key)] = highwater
    return found


class _Consumer(ProcessedOnlyConsumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Producer(faust_aiokafka.Producer):  # named as Faust's: its log lines say "Producer"
    """Idempotent where the brokers take it (``GuardrailFaustApp.idempotent_producer``)."""

    def _settings_extra(self) -> Mapping[str, Any]:
        idempotent = getattr(self.app, "idempotent_producer", False)
        return {**super()._settings_extra(),
                **({"acks": "all", "enable_idempotence": True} if idempotent else {})}


class _Transport(faust_aiokafka.Transport):
    Consumer: ClassVar[Any] = _Consumer
    Producer: ClassVar[Any] = Producer


StopHook = Callable[[], Awaitable[None]]


class _BeforeProducerStops(mode.Service):
    """Runs the app's stop hooks. It is the app's child right after the
    producer, and mode stops children in reverse start order, so it stops
    after tables, conductor, agents, consumer and web server, and before the
    producer (and the sensors)."""

    def __init__(self, hooks: list[StopHook], **kwargs: Any) -> None:
        self._hooks = hooks
        super().__init__(**kwargs)

    async def on_stop(self) -> None:
        log.info("agents and consumer stopped, producer still up: running %d stop hook(s)",
                 len(self._hooks))
        for hook in self._hooks:
            await hook()


class GuardrailFaustApp(faust.App):
    """A ``faust.App`` whose worker consumer waits ``fetch_wait_ms`` per fetch,
    with hooks that run on stop between the agents and the producer::

        app = GuardrailFaustApp("guardrail", broker="kafka://localhost:9092",
                                fetch_wait_ms=50)
        app.before_producer_stops(runtime.close)
    """

    def __init__(self, *args: Any, fetch_wait_ms: int | None = None, **kwargs: Any) -> None:
        self.fetch_wait_ms = fetch_wait_ms
        #: Idempotent producers (resolved from the cluster: ``producer_idempotence``).
        self.idempotent_producer = False
        #: Changelog topic -> seconds back from now where its table's recovery
        #: may start (see ``_ConsumerThread.earliest_offsets``).
        self.changelog_horizons: dict[str, float] = {}
        #: Read only committed records (the gate's transactions, ``gate_transactional``).
        self.read_committed = False
        #: Topics whose offsets another committer commits (the gate's transactions):
        #: the consumer's own commits leave them out.
        self.offsets_committed_elsewhere: set[str] = set()
        #: Awaited before table recovery reads its ends (the gate's transactional
        #: producers started: their previous owner's transactions settled).
        self.transactions_settled: Callable[[], Awaitable[None]] | None = None
        #: Topics whose agent acks a record only once processed (``mark_processed_on``).
        self.acked_when_processed: set[str] = set()
        self._stop_hooks: list[StopHook] = []
        self._start_hooks: list[StopHook] = []
        self._revoke_hooks: list[Callable[[set[Any]], None]] = []
        self._started_early: list[asyncio.Future[None]] = []
        super().__init__(*args, **kwargs)

    def mark_processed_on(self, topic: str) -> Callable[[Iterable[Any]], None]:
        """Count acks on ``topic`` only for records marked processed, and return
        the marker (``mark(messages)``): for an agent that acks by hand, so the
        records Faust's stream skips and acks are never committed."""
        self.acked_when_processed.add(topic)
        return lambda messages: self.consumer.processed(messages)

    def after_revoke(self, hook: Callable[[set[Any]], None]) -> None:
        """Call ``hook(revoked)`` at the end of each revoke phase of a rebalance, also
        when the worker is stopping (Faust's revoke phase then waits for nothing in
        flight): from then on the revoked partitions may be read by their next owner."""
        self._revoke_hooks.append(hook)

    async def _on_partitions_revoked(self, revoked: set[Any]) -> None:
        try:
            await super()._on_partitions_revoked(revoked)
        finally:
            for hook in self._revoke_hooks:
                hook(revoked)

    def on_app_start(self, hook: StopHook) -> None:
        """Run ``hook()`` as a background task as soon as the app starts, before
        Faust's table recovery (``app.task`` waits until recovery is done): a
        follower of its own topics need not wait for the tables."""
        self._start_hooks.append(hook)

    async def on_start(self) -> None:
        await super().on_start()
        self._started_early = [asyncio.ensure_future(hook()) for hook in self._start_hooks]

    def before_producer_stops(self, hook: StopHook) -> None:
        """Await ``hook()`` when the worker stops, once the agents and the consumer
        have stopped and before the producer does."""
        self._stop_hooks.append(hook)

    def on_init_dependencies(self) -> Iterable[Any]:
        services = list(super().on_init_dependencies())
        producers = [self._producer, getattr(self._producer, "threaded_producer", None)]
        # After the producer (and its thread, if any); with no producer, first:
        # it then stops last of all.
        at = 1 + max((i for i, s in enumerate(services)
                      if s is not None and any(s is p for p in producers)), default=-1)
        services.insert(at, _BeforeProducerStops(self._stop_hooks, loop=self.loop,
                                                 beacon=self.beacon))
        return services

    def stop_waiting_for_streams(self) -> None:
        """Stop without Faust's wait for every unacked message (``stream_wait_empty``):
        a batch held on a judge outage would hold the stop until killed. The
        judging agent instead finishes what it can within its own short grace
        and leaves the rest unacked, to be redelivered (``agents/judging.py``)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Faust warns on any late reconfiguration
            self.conf.stream_wait_empty = False

    async def flush_producer(self) -> None:
        """Wait until the producer's buffered messages are sent (no-op without one)."""
        if self._producer is not None:
            await self._producer.flush()

    def _new_transport(self) -> Any:
        url = self.conf.broker_consumer[0]
        if url.scheme in ("kafka", "aiokafka"):
            return _Transport(self.conf.broker_consumer, self)
        return super()._new_transport()
