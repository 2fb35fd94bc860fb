"""Connection options shared by every Kafka client guardrail creates."""

from __future__ import annotations

import ssl
from typing import Any

from ..errors import ConfigError
from ..settings import KafkaSettings

__all__ = ["resolve_bootstrap", "client_options", "ssl_context"]


def resolve_bootstrap(kafka: KafkaSettings) -> str:
    """``bootstrap_servers`` from settings; without it, the embedded broker's default."""
    if kafka.bootstrap_servers:
        return kafka.bootstrap_servers
    from .broker import DEFAULT_PORT

    return f"127.0.0.1:{DEFAULT_PORT}"


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext | None:
    if kafka.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.create_default_context(
        cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None)
    if kafka.ssl_certfile:
        context.load_cert_chain(str(kafka.ssl_certfile),
                                str(kafka.ssl_keyfile) if kafka.ssl_keyfile else None)
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
