"""The Faust application: judging agent, counting agent, web pages.

    runtime = build_app(load_settings())   # a WorkerRuntime (see .runtime)
    run_worker(runtime)                    # blocks until SIGTERM / SIGINT

Lifecycle: :func:`build_app` wires everything from :class:`Settings` and
hooks :meth:`WorkerRuntime.close` into the app's stop; ``guardrail worker``
first creates the topics (``ensure_topics``), then runs the app's worker
until SIGTERM. Each piece lives in its own module:

- :mod:`.runtime` — what the agents share, and the order it is closed in.
- :mod:`.judging` — input topic → judged in batches → results / judgments /
  DLQ, offsets acked only after the broker acknowledged every output.
- :mod:`.run_assembly` — spans of AI agents' runs → one judged case per run
  (``otlp`` input with ``agent_runs``).
- :mod:`.session_assembly` — turns with a conversation id → session judgments
  (``session_judging``); both on the one assembler of :mod:`.assembly`.
- :mod:`.windows` — judgments topic → tumbling windowed counts → alerts.
- :mod:`.sampling` — which messages are judged, and the judge budget.
- :mod:`.web` — ``/rates``, ``/health``, ``/metrics``.
- :mod:`.liveness` — partitions with lag and no progress (stalled), checked on a timer.
- :mod:`.kafka_trouble` — the Kafka client's failures, reported once per interval.
- :mod:`.dashboard` — ``/dashboard``, the live page over the same data.
- :mod:`.review` — ``/review``, the human review queue (with ``review_users_file``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import faust

from ..judges.build import build_evaluator
from ..judging.judge import Judge
from ..kafka.clients import resolve_bootstrap, ssl_context
from ..kafka.registry_settings import check_registry
from .rates_view import RatesView
from ..config.settings import Settings
from ..stream.alerts import AlertDispatcher, Sender
from ..stream.budget import check_budget_prices
from ..stream.otel_export import evaluation_exporter
from ..stream.processing import MessageJudge
from ..stream.registry_alerts import AlertValues
from ..stream.telemetry import Telemetry
from ..formats import build_decoder
from ..assembly.runs.routing import RunRouter
from ..gate.settings import check_gate
from . import (agreement, dashboard, gate, judging, kafka_trouble, liveness, review,
               run_assembly, sampling, session_assembly, web, windows)
from .runtime import GuardrailApp, WorkerRuntime
from .transport import GuardrailFaustApp

__all__ = ["WorkerRuntime", "GuardrailApp", "build_app", "faust_options", "runs_assembled"]


def faust_options(settings: Settings) -> dict[str, object]:
    """Faust App keyword arguments derived from settings."""
    datadir = Path(tempfile.gettempdir()) / "guardrail" / settings.kafka.app_id
    datadir.mkdir(parents=True, exist_ok=True)  # Faust creates only the last level
    options: dict[str, object] = dict(
        broker=f"kafka://{resolve_bootstrap(settings.kafka)}",
        store="memory://",
        topic_partitions=settings.kafka.topic_partitions,
        # Resolved from the cluster at worker start (settle_cluster); 1 in-process.
        topic_replication_factor=settings.kafka.topic_replication or 1,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        # Short session/rebalance timeouts: group joins take seconds, not ~30 s.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_rebalance_timeout=6.0,
        broker_commit_interval=1.0,
        web_enabled=True,
        web_host=settings.worker.web_host,
        web_port=settings.worker.web_port,
        datadir=str(datadir),
        table_cleanup_interval=30.0,
        producer_acks=-1,
        # A few ms of batching: results and judgment events of a batch share requests.
        # Not in gate mode: a record's gate writes are awaited one after the other,
        # and each would wait out the linger on the way to the approved topic.
        producer_linger=0.0 if settings.gate.gate else 0.005,
    )
    if settings.kafka.security_protocol != "PLAINTEXT":
        options["broker_credentials"] = _credentials(settings)
    return options


def _fetch_wait_ms(settings: Settings) -> int:
    """The worker consumer's fetch wait: a record's latency counts in gate mode."""
    if settings.gate.gate:
        return settings.gate.gate_fetch_wait_ms
    return settings.worker.consumer_fetch_wait_ms


def _credentials(settings: Settings) -> object:
    context = ssl_context(settings.kafka)
    if settings.kafka.security_protocol.startswith("SASL"):
        password = settings.secret("sasl_password") or ""
        return faust.SASLCredentials(username=settings.kafka.sasl_username, password=password,
                                     mechanism=settings.kafka.sasl_mechanism, ssl_context=context)
    return faust.SSLCredentials(context)


def build_app(settings: Settings, *, judge: Judge | None = None,
              telemetry: Telemetry | None = None) -> WorkerRuntime:
    """Create the Faust app with its agents, tables and pages, closed on stop."""
    # Settings that cannot work refuse before anything connects (exit 2).
    check_budget_prices(settings.sampling, settings.judge)
    check_gate(settings.gate, settings.sampling, settings.review)
    check_registry(settings.registry, settings.inputs.input_format)
    app = GuardrailFaustApp(settings.kafka.app_id, fetch_wait_ms=_fetch_wait_ms(settings),
                            **faust_options(settings))
    app.idempotent_producer = bool(settings.kafka.producer_idempotence)
    telemetry = telemetry or Telemetry()
    evaluator = build_evaluator(settings, judge=judge)
    telemetry.expect_metrics(m.name for m in evaluator.base_metrics)
    dispatcher = AlertDispatcher(webhook_url=settings.windows.alert_webhook_url,
                                 timeout=settings.windows.alert_webhook_timeout,
                                 send_to_topic=_alerts_sender(app, settings))
    sampler, budget = sampling.build(settings, telemetry, notify=dispatcher.dispatch)
    runtime = WorkerRuntime(
        app=app, settings=settings, telemetry=telemetry,
        message_judge=MessageJudge.from_settings(evaluator, settings, telemetry=telemetry,
                                                 sampler=sampler, budget=budget,
                                                 exporter=evaluation_exporter(
                                                     settings.inputs, settings.judge, telemetry),
                                                 **_run_options(settings)),
        dispatcher=dispatcher, rates_view=RatesView(settings),
    )
    sampling.register(runtime)  # before the judging agent: it may add a hook to acks
    if settings.gate.gate:
        gate.register(runtime)  # before the judging agent, which hands it every record
    judging.register(runtime)
    if runs_assembled(settings):
        telemetry.expect_metrics(m.name for m in getattr(evaluator, "run_metrics", ()))
        run_assembly.register(runtime)
    if session_assembly.sessions_assembled(settings):
        telemetry.expect_metrics(m.name for m in getattr(evaluator, "session_metrics", ()))
        session_assembly.register(runtime)
    windows.register(runtime)
    agreement.register(runtime)  # review on: /agreement, its gauges and alerts
    web.register(runtime)
    liveness.register(runtime)  # stalled partitions, checked whether or not /metrics is read
    kafka_trouble.register(runtime)  # the Kafka client's failures, said once per interval
    # Followers of their own topics, started before table recovery (a complete
    # /rates sooner after a restart); stopped in runtime.close.
    app.on_app_start(runtime.start)
    # The page shows the whole group's windows (the changelog view behind /rates).
    dashboard.register(runtime, rows=runtime.rates_view.rows, rates_scope="all workers")
    review.register(runtime)  # /review; with review_protect_pages, guards the pages above
    app.before_producer_stops(runtime.close)
    return runtime


def runs_assembled(settings: Settings) -> bool:
    """Are agent runs assembled from spans (``otlp`` input with ``agent_runs``)?"""
    return settings.inputs.input_format == "otlp" and settings.runs.agent_runs


def _run_options(settings: Settings) -> dict[str, object]:
    """The judging agent's decoder and topics for spans of agent runs and turns
    of sessions, when on."""
    options: dict[str, object] = {}
    if session_assembly.sessions_assembled(settings):
        options["session_turns_topic"] = session_assembly.session_turns_topic(
            settings.kafka.app_id)
    if runs_assembled(settings):
        options["decoder"] = build_decoder(settings.inputs, settings.sessions, runs=RunRouter())
        options["run_spans_topic"] = run_assembly.run_spans_topic(settings.kafka.app_id)
    return options


def _alerts_sender(app: faust.App, settings: Settings) -> Sender:
    """Write an alert to the alerts topic (in ``alerts_format``) and wait for the
    broker's ack."""
    alerts_topic = app.topic(settings.kafka.alerts_topic, key_type=bytes, value_type=bytes,
                             key_serializer="raw", value_serializer="raw")
    values = AlertValues(settings.registry, settings.kafka.alerts_topic)

    async def send_alert(alert: dict[str, object]) -> None:
        # Regression alerts are keyed by metric; budget alerts by their kind.
        key = alert.get("metric") or alert.get("kind") or "alert"
        fut = await alerts_topic.send(key=str(key).encode(),
                                      value=await values.of(alert))
        await fut

    return send_alert
