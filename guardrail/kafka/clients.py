"""Connection options shared by every Kafka client guardrail creates, and the
reachability check every command runs before its first client::

    await check_reachable(settings.kafka)   # ConfigError, one line, within bootstrap_timeout
    consumer = AIOKafkaConsumer(topic, **client_options(settings.kafka))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterator
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from ..errors import ConfigError
from .settings import KafkaSettings

__all__ = ["resolve_bootstrap", "client_options", "ssl_context", "check_reachable",
           "retry_concurrent_transactions_sooner", "EMBEDDED_HINT"]

#: Appended when the embedded broker's default address is in use and nothing answers.
EMBEDDED_HINT = "start it with: guardrail broker"
#: aiokafka logs every failed bootstrap attempt (at ERROR) before raising a
#: generic "Unable to bootstrap"; the check keeps the reason for its own line.
_PROBE_LOGGERS = ("aiokafka", "aiokafka.conn")
#: How soon a transactional producer asks again to add a partition to a transaction
#: begun while the previous one's commit markers are still being written: the
#: broker answers CONCURRENT_TRANSACTIONS for the few ms that takes.
CONCURRENT_TRANSACTIONS_RETRY_SECONDS = 0.002

log = logging.getLogger("guardrail.kafka")


def retry_concurrent_transactions_sooner() -> None:
    """Make aiokafka ask again after ``CONCURRENT_TRANSACTIONS_RETRY_SECONDS``, not
    its 20 ms: a producer that begins its next transaction right after a commit (the
    gate's) otherwise adds about 20 ms to the first write of each. aiokafka has no
    setting for it; its AddPartitionsToTxn handler reads a module constant on each
    answer, which this sets (for every producer of the process)."""
    from aiokafka.producer import sender

    if not hasattr(sender, "BACKOFF_OVERRIDE"):
        log.warning("this aiokafka has no BACKOFF_OVERRIDE: a transaction begun right "
                    "after a commit waits aiokafka's own retry time")
        return
    sender.BACKOFF_OVERRIDE = CONCURRENT_TRANSACTIONS_RETRY_SECONDS


def resolve_bootstrap(kafka: KafkaSettings) -> str:
    """``bootstrap_servers`` from settings; without it, the embedded broker's default."""
    if kafka.bootstrap_servers:
        return kafka.bootstrap_servers
    from .broker import DEFAULT_PORT

    return f"127.0.0.1:{DEFAULT_PORT}"


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context for SSL / SASL_SSL; a missing or unreadable file is a
    :class:`ConfigError` naming the setting (one line, exit 2), not a traceback."""
    if kafka.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    try:
        context = ssl.create_default_context(
            cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl_cafile {kafka.ssl_cafile}: {exc.strerror or exc}") from None
    if kafka.ssl_certfile:
        try:
            context.load_cert_chain(str(kafka.ssl_certfile),
                                    str(kafka.ssl_keyfile) if kafka.ssl_keyfile else None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl_certfile {kafka.ssl_certfile} / ssl_keyfile "
                              f"{kafka.ssl_keyfile}: {exc.strerror or exc}") from None
    return context


def client_options(kafka: KafkaSettings) -> dict[str, Any]:
    """aiokafka keyword arguments: bootstrap, security protocol, SASL, SSL."""
    options: dict[str, Any] = {"bootstrap_servers": resolve_bootstrap(kafka),
                               "security_protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL"):
        if not kafka.sasl_username or kafka.sasl_password is None:
            raise ConfigError("SASL needs sasl_username and sasl_password")
        options.update(sasl_mechanism=kafka.sasl_mechanism,
                       sasl_plain_username=kafka.sasl_username,
                       sasl_plain_password=kafka.sasl_password.get_secret_value())
    context = ssl_context(kafka)
    if context is not None:
        options["ssl_context"] = context
    return options


async def check_reachable(kafka: KafkaSettings) -> None:
    """Raise :class:`ConfigError` unless a bootstrap server answers a metadata
    request within ``bootstrap_timeout`` seconds.

    One line names the address and why (refused, no answer in time, TLS or
    SASL refused) and what to do: ``guardrail broker`` when the embedded
    default is in use, the ``bootstrap_servers`` setting otherwise. Without
    it, each client retries on, prints aiokafka's traceback and leaves
    unclosed clients behind. The probe's client is always closed.
    """
    timeout = kafka.bootstrap_timeout
    client = AIOKafkaClient(request_timeout_ms=int(timeout * 1000), **client_options(kafka))
    failures: list[object] = []
    try:
        with _collect_failures(failures):
            # aiokafka bounds each host by the request timeout; this bounds them all.
            await asyncio.wait_for(client.bootstrap(), timeout + 0.5)
    except (KafkaError, OSError, asyncio.TimeoutError) as exc:
        cause = failures[-1] if failures else exc
        reason = (f"no answer within {timeout:g}s" if isinstance(cause, asyncio.TimeoutError)
                  else " ".join(str(cause).split()) or type(cause).__name__)
        raise ConfigError(_unreachable(kafka, reason)) from None
    finally:
        await client.close()


#: Why a broker that answered refused us, and the settings that decide it.
_REFUSALS = (
    ("SaslAuthenticationFailed", "check sasl_username, sasl_password (GUARDRAIL_SASL_PASSWORD) "
                                 "and sasl_mechanism"),
    ("UnsupportedSaslMechanism", "check sasl_mechanism and security_protocol"),
    ("CERTIFICATE_VERIFY_FAILED", "check ssl_cafile: it must hold the CA that signed the "
                                  "brokers' certificates"),
    ("WRONG_VERSION_NUMBER", "check security_protocol: this listener does not speak TLS"),
)


def _unreachable(kafka: KafkaSettings, reason: str) -> str:
    address = resolve_bootstrap(kafka)
    for cause, advice in _REFUSALS:
        if cause in reason:
            return f"Kafka at {address} refused the connection ({reason}); {advice}"
    if kafka.bootstrap_servers:
        return (f"cannot reach Kafka at {address} ({reason}); check bootstrap_servers "
                "(GUARDRAIL_BOOTSTRAP_SERVERS) and that the brokers are up")
    return (f"cannot reach the embedded Kafka broker at {address} ({reason}; "
            f"bootstrap_servers is not set); {EMBEDDED_HINT}")


@contextlib.contextmanager
def _collect_failures(failures: list[object]) -> Iterator[None]:
    """Keep aiokafka's per-host failure lines out of the output, and their causes."""

    def collect(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            args = record.args if isinstance(record.args, tuple) else ()
            # 'Unable connect to "%s:%s": %s' (host, port, error): keep the error.
            failures.append(args[-1] if len(args) == 3 else record.getMessage())
        return False

    loggers = [logging.getLogger(name) for name in _PROBE_LOGGERS]
    for logger in loggers:
        logger.addFilter(collect)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(collect)
