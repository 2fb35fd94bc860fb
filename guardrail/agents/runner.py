"""Run the Faust worker: create topics first, then serve until a signal, or
until the runtime asks to stop (a judge configuration error: exit code 78).

    run_worker(build_app(load_settings()))   # raises SystemExit with the exit code

When its output is not a terminal (a log file, as in ``guardrail demo``, or a
pipe), the worker writes plain text: no colours, no startup spinner.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
from typing import Any

import colorlog
from faust import Worker
from mode.utils.futures import maybe_cancel
from mode.utils.logging import DEFAULT_FORMAT, DefaultFormatter
from mode.utils.times import want_seconds

from ..providers.litellm import litellm, price_tokens
from ..judges.cascade import escalation_judge_settings
from ..judges.transports import uses_direct_http
from ..kafka.cluster_facts import (ClusterFacts, cluster_facts, describe, replication_warnings,
                                   settled, worker_topic_replicas)
from ..kafka.topics import ensure_topics, topic_plan
from ..gate.sessions import held_sessions_topic
from ..gate.settings import check_gate_transactions, gate_topics
from ..review.settings import review_topics
from ..config.settings import Settings
from ..judges.settings import JudgeSettings
from ..kafka.settings import KafkaSettings
from .app import runs_assembled
from .run_assembly import run_spans_topic
from .session_assembly import session_turns_topic, sessions_assembled
from .runtime import WorkerRuntime

__all__ = ["run_worker", "GuardrailWorker", "settle_heap"]

log = logging.getLogger("guardrail.worker")


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def plain_logs_unless_tty(logger: logging.Logger) -> None:
    """Give every colouring handler of ``logger`` that does not write to a terminal
    the plain formatter mode uses for log files. (colorlog checks the wrong stream,
    stdout, and honours FORCE_COLOR even when writing to a file.)"""
    for handler in logger.handlers:
        stream = getattr(handler, "stream", None)
        if isinstance(handler.formatter, colorlog.ColoredFormatter) and not _isatty(stream):
            handler.setFormatter(DefaultFormatter(DEFAULT_FORMAT))


class GuardrailWorker(Worker):
    """Faust's worker with a deadline on shutdown: with the broker gone, Faust
    would wait on it forever; past ``stop_deadline_seconds`` the process exits.
    Its output is plain text when not on a terminal."""

    stop_deadline: float = 45.0

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if not _isatty(self.stdout):
            # Faust's startup spinner hides and shows the cursor with escape codes
            # whether or not stdout is a terminal; without it Faust logs "Ready".
            self.spinner = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        plain_logs_unless_tty(logger)

    def _on_sigterm(self) -> None:
        self._arm_stop_deadline()
        self.app.stop_waiting_for_streams()
        super()._on_sigterm()

    def _on_sigint(self) -> None:
        self._arm_stop_deadline()
        self.app.stop_waiting_for_streams()
        super()._on_sigint()

    def stop_soon(self, exit_code: int = 1) -> None:
        """Stop as a SIGTERM would, started from inside (e.g. a configuration
        error); past the deadline the process exits with ``exit_code``."""
        if self._signal_stop_time:  # already stopping
            return
        self._arm_stop_deadline(exit_code)
        self.app.stop_waiting_for_streams()
        self._signal_stop_time = self.loop.time()
        self._signal_stop_future = asyncio.ensure_future(self._stop_from_inside())

    async def _stop_from_inside(self) -> None:
        await self.stop()
        maybe_cancel(self._starting_fut)  # as mode's own signal stop does

    def _arm_stop_deadline(self, exit_code: int = 1) -> None:
        def expire() -> None:
            log.error("shutdown exceeded %.0fs; exiting now (unfinished messages are "
                      "redelivered)", self.stop_deadline)
            logging.shutdown()
            os._exit(exit_code)

        timer = threading.Timer(self.stop_deadline, expire)
        timer.daemon = True
        timer.start()


def settle_heap(judge: JudgeSettings) -> None:
    """Load now what the first judgment would load (the judge's prices), then
    take everything alive out of the cyclic garbage collector's walks
    (``gc.freeze``): what :func:`run_worker` does in two steps, the prices
    before the loop starts and the freeze once the worker is up.

    A worker starts with ~370,000 objects (Faust, aiokafka, litellm, pydantic
    schemas) that live as long as it does. Under load every full collection
    walked them all: ~0.2 s with the whole worker stalled, several times a
    minute (``bench/worker_exp.py``, experiment ``gc_time``). Frozen objects
    are still freed when their last reference goes; only cycles among them stay.
    """
    load_prices(judge)
    freeze_heap()


def load_prices(judge: JudgeSettings) -> None:
    """Read the judge's prices by pricing one token (the bundled price map,
    milliseconds; litellm's import, seconds, only for a price only it knows)."""
    price_tokens(judge.model, 1, 1, input_cost_per_token=judge.input_cost_per_token,
                 output_cost_per_token=judge.output_cost_per_token)


def import_litellm_if_called(settings: Settings) -> None:
    """Import litellm now when a judge is sent through it: before the event loop
    runs. Seconds of import starve the loop even from a thread (the GIL): judge
    calls in flight would time out and be sent again."""
    judges = [settings.judge]
    if settings.escalation.model:
        judges.append(escalation_judge_settings(settings.judge, settings.escalation))
    if any(not uses_direct_http(j.transport, j.model, j.api_base) for j in judges):
        litellm()


def freeze_heap() -> None:
    gc.collect()
    gc.freeze()


def _say_replication(kafka: KafkaSettings, facts: ClusterFacts, planned: list[str]) -> None:
    """The start line on replication and producers, and a warning per risk."""
    log.info("%s", describe(kafka, facts))
    existing = asyncio.run(worker_topic_replicas(kafka, planned))
    for line in replication_warnings(kafka, facts, existing):
        log.warning("%s", line)


def table_changelogs(app: Any) -> dict[str, tuple[int, dict[str, str]]]:
    """Each table's changelog topic: its partition count and the topic configs
    Faust would create it with (its ``cleanup.policy`` and ``retention.ms``
    rule, then the table's own configs).

    The worker creates them before the app starts. A changelog Faust creates
    itself can be missing from the cluster metadata its group leader reads
    right after (seen in 1 of 19 worker starts on a three-node cluster): the
    assignor then leaves it out, and every write to the table fails with
    ``PartitionsMismatch`` until the next rebalance.
    """
    found = {}
    for table in app.tables.values():
        topic = table.changelog_topic
        retention_ms = int(want_seconds(topic.retention) * 1000) if topic.retention else None
        # Faust's own rule (what its producer would send), then the table's configs.
        config = app.transport._topic_config(retention_ms, topic.compacting, topic.deleting)
        config.update(topic.config or {})
        found[table.changelog_topic_name] = (topic.partitions or app.conf.topic_partitions,
                                             {key: str(value) for key, value in config.items()})
    return found


def run_worker(runtime: WorkerRuntime, *, loglevel: str = "info") -> None:
    """Create/verify topics, then run the worker in the foreground."""
    settings = runtime.settings
    review = review_topics(settings.kafka, settings.review)
    # The run-spans and session-turns topics are co-partitioned with their tables' changelogs.
    internal = {name: settings.kafka.topic_partitions for name, on in (
        (run_spans_topic(settings.kafka.app_id), runs_assembled(settings)),
        (session_turns_topic(settings.kafka.app_id), sessions_assembled(settings))) if on}
    # Gate mode forwards each record to the partition of the number it was read from.
    internal.update(gate_topics(settings.gate, settings.kafka.topic_partitions))
    # Gate mode's held sessions: one compacted partition, which every worker reads whole.
    if settings.gate.gate and settings.gate.gate_session_hold:
        review = {**review, held_sessions_topic(settings.kafka.app_id): 1}
    changelogs = table_changelogs(runtime.app)
    plan = {**topic_plan(settings.kafka), **internal,
            **{name: partitions for name, (partitions, _) in changelogs.items()}}
    # Replication and idempotence from the cluster: before the app starts, which
    # is when Faust declares its changelog topics and starts its producer.
    facts = asyncio.run(cluster_facts(settings.kafka))
    check_gate_transactions(settings.gate, facts)
    kafka = settled(settings.kafka, facts)
    runtime.app.conf.topic_replication_factor = kafka.topic_replication
    runtime.app.idempotent_producer = bool(kafka.producer_idempotence)
    asyncio.run(ensure_topics(kafka, {**plan, **review}, strict=frozenset(plan),
                              compacted=frozenset({settings.review.labels_topic,
                                                   held_sessions_topic(settings.kafka.app_id)}
                                                  & set(review)),
                              configs={name: config for name, (_, config) in changelogs.items()}))
    _say_replication(kafka, facts, [*plan, *review])
    log.info("guardrail worker: %s -> %s (dlq %s, alerts %s), judge %s",
             settings.kafka.input_topic, settings.kafka.results_topic, settings.kafka.dlq_topic,
             settings.kafka.alerts_topic, settings.judge.model)

    import_litellm_if_called(settings)
    load_prices(settings.judge)

    @runtime.app.task
    async def settle() -> None:  # once the worker is up: what it holds from now on
        freeze_heap()

    # A fresh loop: asyncio.run() above closed its own.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    worker = GuardrailWorker(runtime.app, loglevel=loglevel, loop=loop, redirect_stdouts=False)
    worker.stop_deadline = settings.worker.stop_deadline_seconds
    runtime.request_stop = lambda: worker.stop_soon(runtime.exit_code or 1)
    try:
        worker.execute_from_commandline()
    except SystemExit:
        if runtime.exit_code is not None:  # stopped on its own: say why in the code
            raise SystemExit(runtime.exit_code) from None
        raise
