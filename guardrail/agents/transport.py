"""Faust's aiokafka transport with one knob it lacks: the consumer fetch wait.

faust-streaming 0.15.3 builds its worker consumer with ``fetch_max_wait_ms``
fixed at 1500. Kafka answers a fetch as soon as ``fetch_min_bytes`` (1) is
there, so the wait only bounds idle polling; but a broker that holds every
fetch for the full wait (Tansu, the embedded broker, does) then adds up to
1.5 s to each message's latency — measured in ``bench/latency.py`` as the
whole p99 floor. :class:`GuardrailFaustApp` builds the same consumer and
sets the wait from ``consumer_fetch_wait_ms``; nothing else changes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

__all__ = ["GuardrailFaustApp"]


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait_ms = getattr(self.app, "fetch_wait_ms", None)
        if wait_ms is not None:
            # Read once, when the consumer starts its Fetcher.
            consumer._fetch_max_wait_ms = int(wait_ms)
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


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
