"""The Faust application: judging agent, counting agent, web pages.

Lifecycle: :func:`build_app` wires everything from :class:`Settings`;
``guardrail worker`` first creates the topics (``ensure_topics``), then runs
the app's worker until SIGTERM. Each piece lives in its own module:

- :mod:`.judging` — input topic → judged in batches → results / judgments /
  DLQ, offsets acked only after the broker acknowledged every output.
- :mod:`.windows` — judgments topic → tumbling windowed counts → alerts.
- :mod:`.web` — ``/rates``, ``/health``, ``/metrics``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import faust

from ..cache import MemoryCache, SqliteCache
from ..evaluate import Evaluator
from ..judge import Judge, LiteLLMJudge
from ..kafka.clients import resolve_bootstrap, ssl_context
from ..settings import Settings
from ..stream.alerts import AlertDispatcher
from ..stream.processing import MessageJudge
from ..stream.telemetry import Telemetry
from .transport import GuardrailFaustApp

__all__ = ["GuardrailApp", "build_app", "faust_options"]


@dataclass
class GuardrailApp:
    """The Faust app plus the objects its agents share."""

    app: faust.App
    settings: Settings
    telemetry: Telemetry
    message_judge: MessageJudge
    dispatcher: AlertDispatcher
    state: dict[str, object] = field(default_factory=dict)


def faust_options(settings: Settings) -> dict[str, object]:
    """Faust App keyword arguments derived from settings."""
    datadir = Path(tempfile.gettempdir()) / "guardrail" / settings.app_id
    datadir.mkdir(parents=True, exist_ok=True)  # Faust creates only the last level
    options: dict[str, object] = dict(
        broker=f"kafka://{resolve_bootstrap(settings)}",
        store="memory://",
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        # Short session/rebalance timeouts: group joins take seconds, not ~30 s.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_rebalance_timeout=6.0,
        broker_commit_interval=1.0,
        web_enabled=True,
        web_host=settings.web_host,
        web_port=settings.web_port,
        datadir=str(datadir),
        table_cleanup_interval=30.0,
        producer_acks=-1,
        # A few ms of batching: results and judgment events of a batch share requests.
        producer_linger=0.005,
    )
    if settings.security_protocol != "PLAINTEXT":
        options["broker_credentials"] = _credentials(settings)
    return options


def _credentials(settings: Settings) -> object:
    context = ssl_context(settings)
    if settings.security_protocol.startswith("SASL"):
        password = settings.sasl_password.get_secret_value() if settings.sasl_password else ""
        return faust.SASLCredentials(username=settings.sasl_username, password=password,
                                     mechanism=settings.sasl_mechanism, ssl_context=context)
    return faust.SSLCredentials(context)


def build_app(settings: Settings, *, judge: Judge | None = None,
              telemetry: Telemetry | None = None) -> GuardrailApp:
    """Create the Faust app with its agents, tables and pages."""
    from . import judging, web, windows

    app = GuardrailFaustApp(settings.app_id, fetch_wait_ms=settings.consumer_fetch_wait_ms,
                            **faust_options(settings))
    telemetry = telemetry or Telemetry()
    # Bounded: the in-memory cache only has to bridge outage retries and redeliveries.
    cache = SqliteCache(settings.cache_path) if settings.cache_path else MemoryCache(20_000)
    evaluator = Evaluator(judge or LiteLLMJudge(settings), settings=settings, cache=cache)
    alerts_topic = app.topic(settings.alerts_topic, key_type=bytes, value_type=bytes,
                             key_serializer="raw", value_serializer="raw")

    async def send_alert(alert: dict[str, object]) -> None:
        import orjson

        fut = await alerts_topic.send(key=str(alert.get("metric")).encode(),
                                      value=orjson.dumps(alert))
        await fut

    runtime = GuardrailApp(
        app=app, settings=settings, telemetry=telemetry,
        message_judge=MessageJudge(evaluator, settings=settings, telemetry=telemetry),
        dispatcher=AlertDispatcher(webhook_url=settings.alert_webhook_url,
                                   timeout=settings.alert_webhook_timeout,
                                   send_to_topic=send_alert),
    )
    judging.register(runtime)
    windows.register(runtime)
    web.register(runtime)
    return runtime
