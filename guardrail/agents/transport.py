"""Faust's aiokafka transport with three corrections.

**Fetch wait.** faust-streaming 0.15.3 builds its worker consumer with
``fetch_max_wait_ms`` fixed at 1500. Kafka answers a fetch as soon as
``fetch_min_bytes`` (1) is there, so the wait only bounds idle polling; but a
broker that holds every fetch for the full wait (Tansu, the embedded broker,
does) then adds up to 1.5 s to each message's latency — measured in
``bench/latency.py`` as the whole p99 floor. The wait comes from
``consumer_fetch_wait_ms``.

**End offsets for table recovery.** Faust recovers a table partition by
reading its changelog up to the end offset ``ListOffsets`` reports. Tansu
reports the *base offset of the last record batch + 1*, not the offset after
the last record, so recovery stopped inside the last batch and silently
dropped the newest counts of a window cell (the fault suite's windows came
out a few short whenever partitions moved). The high watermark a real fetch
returns is right on every broker, so the recovery end offsets are taken as
the larger of the two (on Apache Kafka they are equal).

**No acks from an earlier consumer generation.** A message fetched before a
rebalance can still be acked after it: Faust itself acks the stale messages
its streams skip, even on ``noack`` streams. Once the new assignment has
reset the partition's bookkeeping, such an ack enters the new generation's
acked offsets, and the commit can move past offsets whose fresh copies are
not processed yet — a crash then loses them (seen as window counts a few
short after SIGKILLs). The consumer here drops those acks: after the
assignment the partition is re-read from its committed offset anyway.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

log = logging.getLogger("guardrail.transport")

__all__ = ["GuardrailFaustApp"]


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "fetch_wait_ms", None)
        if wait_ms is not None:
            # Read once, when the consumer starts its Fetcher.
            consumer._fetch_max_wait_ms = int(wait_ms)
        return consumer

    async def _highwaters(self, partitions: list[Any]) -> Mapping[Any, int]:
        reported = await super()._highwaters(partitions)
        if self.consumer.in_transaction or not any(reported.values()):
            return reported
        fetched = await fetched_highwaters(self._probe_options(), reported)
        return {tp: max(offset, fetched.get(tp, offset)) for tp, offset in reported.items()}

    def _probe_options(self) -> dict[str, Any]:
        transport, conf = self.transport, self.app.conf
        return dict(
            bootstrap_servers=faust_aiokafka.server_list(transport.url, transport.default_port),
            **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials,
                                                         conf.ssl_context))


async def fetched_highwaters(options: dict[str, Any], reported: Mapping[Any, int], *,
                             timeout: float = 10.0) -> dict[Any, int]:
    """The high watermark a fetch returns for each partition with data, read
    by a throwaway group-less consumer positioned at the reported end - 1
    (a record that exists: the last batch's first). Partitions it could not
    read within ``timeout`` are left out (the caller keeps the reported end)."""
    wanted = {aiokafka.TopicPartition(tp.topic, tp.partition): tp
              for tp, end in reported.items() if end > 0}
    if not wanted:
        return {}
    probe = aiokafka.AIOKafkaConsumer(group_id=None, enable_auto_commit=False,
                                      fetch_max_wait_ms=100, **options)
    started = False
    try:
        await probe.start()
        started = True
        probe.assign(list(wanted))
        for key, tp in wanted.items():
            probe.seek(key, reported[tp] - 1)
        return await _read_highwaters(probe, wanted, timeout)
    except Exception as exc:  # the reported offsets are still a usable answer
        log.warning("could not read changelog high watermarks (%s); using reported ends", exc)
        return {}
    finally:
        if started:  # a consumer whose start failed is left as it is
            await probe.stop()


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


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Any) -> bool:
        if message.generation_id != self.app.consumer_generation_id:
            # Stale (see module doc): never part of this generation's commits.
            message.acked = True
            self._unacked_messages.discard(message)
            return False
        return super().ack(message)


class _Transport(faust_aiokafka.Transport):
    Consumer: ClassVar[Any] = _Consumer


class GuardrailFaustApp(faust.App):
    """A ``faust.App`` whose worker consumer waits ``fetch_wait_ms`` per fetch::

        app = GuardrailFaustApp("guardrail", broker="kafka://localhost:9092",
                                fetch_wait_ms=50)
    """

    def __init__(self, *args: Any, fetch_wait_ms: int | None = None, **kwargs: Any) -> None:
        self.fetch_wait_ms = fetch_wait_ms
        super().__init__(*args, **kwargs)

    def _new_transport(self) -> Any:
        url = self.conf.broker_consumer[0]
        if url.scheme in ("kafka", "aiokafka"):
            return _Transport(self.conf.broker_consumer, self)
        return super()._new_transport()
