"""The worker's Kafka trouble report: the client's failures, said once per
interval (:mod:`guardrail.stream.kafka_trouble` sorts and sums them; this
module hooks the client's loggers, reports on a timer and exports)::

    register(runtime)        # a filter on the Kafka client's loggers, a timer
    trouble_now(runtime)     # the last report's summary, for /health; None when quiet

When brokers go away the worker already waits without losing anything (results
are retried, nothing unwritten is acked, the consumer refetches); what it
lacked was saying so. Each interval (``kafka_trouble_seconds``) with failures
gives one WARNING naming the unreachable brokers and the failed operations,
``guardrail_kafka_trouble`` 1 and ``guardrail_kafka_unreachable_brokers``;
the first client line of each kind, broker and error still goes through, the
repeats are summed. A whole interval without failures gives one INFO line and
sets the gauges back to 0.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ..stream.kafka_trouble import KafkaTrouble, TroubleReport, classify

if TYPE_CHECKING:
    from .runtime import WorkerRuntime

__all__ = ["CLIENT_LOGGERS", "ClientLogFilter", "register", "report", "trouble_now"]

log = logging.getLogger("guardrail.worker")

#: The Kafka client's loggers whose records tell of failed operations (a
#: logger's filter sees only the records of that logger, not its children's).
CLIENT_LOGGERS = ("aiokafka", "aiokafka.consumer.fetcher", "aiokafka.producer.sender",
                  "aiokafka.consumer.group_coordinator")


class ClientLogFilter(logging.Filter):
    """Counts the client's failure records; passes the first of each per interval."""

    def __init__(self, trouble: KafkaTrouble, telemetry: Any) -> None:
        super().__init__()
        self.trouble, self.telemetry = trouble, telemetry

    def filter(self, record: logging.LogRecord) -> bool:
        failure = classify(record.msg, record.args)
        if failure is None:
            return True
        self.telemetry.kafka_client_errors.labels(failure.kind, failure.error or "-").inc()
        return self.trouble.note(failure, time.monotonic())

    def install(self) -> None:
        """On every client logger, in place of an earlier runtime's filter (a
        process runs one worker; an app built again, as in tests, takes over)."""
        for name in CLIENT_LOGGERS:
            logger = logging.getLogger(name)
            for old in [f for f in logger.filters if isinstance(f, ClientLogFilter)]:
                logger.removeFilter(old)
            logger.addFilter(self)

    async def start(self) -> None:  # the runtime's service protocol
        self.install()

    def uninstall(self) -> None:
        for name in CLIENT_LOGGERS:
            logging.getLogger(name).removeFilter(self)

    async def stop(self) -> None:
        self.uninstall()


def report(runtime: WorkerRuntime, now: float | None = None) -> TroubleReport | None:
    """Log and export the interval's failures once it is over; after a whole
    quiet interval, say the trouble is over."""
    trouble: KafkaTrouble = runtime.state["kafka_trouble"]
    now = time.monotonic() if now is None else now
    found = trouble.report(now)
    telemetry = runtime.telemetry
    if found is not None:
        summary = found.summary()
        log.warning("Kafka trouble in the last %.0f s: %s. The worker waits and retries by "
                    "itself; nothing is acked before its results are written (%d repeated "
                    "client lines summed here)", found.seconds, summary, found.held_back)
        telemetry.kafka_trouble.set(1)
        telemetry.kafka_unreachable_brokers.set(len(found.unreachable))
        runtime.state["kafka_trouble_summary"] = summary
    elif runtime.state.get("kafka_trouble_summary") and trouble.quiet_for(now) >= trouble.interval:
        log.info("Kafka: no client failures for %.0f s; the trouble is over", trouble.interval)
        telemetry.kafka_trouble.set(0)
        telemetry.kafka_unreachable_brokers.set(0)
        runtime.state["kafka_trouble_summary"] = None
    return found


def trouble_now(runtime: Any) -> str | None:
    """The last report's summary while the trouble lasts (``/health``)."""
    return getattr(runtime, "state", {}).get("kafka_trouble_summary")


def register(runtime: WorkerRuntime) -> None:
    """Hook the client's loggers (removed on close) and report on a timer."""
    interval = runtime.settings.worker.kafka_trouble_seconds
    trouble = runtime.state["kafka_trouble"] = KafkaTrouble(interval)
    client_filter = ClientLogFilter(trouble, runtime.telemetry)
    client_filter.install()  # before the consumer starts: a cluster may be down at start
    runtime.services.append(client_filter)  # removed on close

    @runtime.app.timer(min(5.0, max(0.5, interval / 4)))
    async def kafka_trouble_report() -> None:
        report(runtime)
