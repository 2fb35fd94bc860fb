"""Connection options shared by every Kafka client guardrail creates."""

from __future__ import annotations

import ssl
from typing import Any

from ..errors import ConfigError
from ..settings import Settings

__all__ = ["resolve_bootstrap", "client_options", "ssl_context"]


def resolve_bootstrap(settings: Settings) -> str:
    """``bootstrap_servers`` from settings; without it, the embedded broker's default."""
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    from .broker import DEFAULT_PORT

    return f"127.0.0.1:{DEFAULT_PORT}"


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    context = ssl.create_default_context(
        cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None)
    if settings.ssl_certfile:
        context.load_cert_chain(str(settings.ssl_certfile),
                                str(settings.ssl_keyfile) if settings.ssl_keyfile else None)
    return context


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka keyword arguments: bootstrap, security protocol, SASL, SSL."""
    options: dict[str, Any] = {"bootstrap_servers": resolve_bootstrap(settings),
                               "security_protocol": settings.security_protocol}
    if settings.security_protocol.startswith("SASL"):
        if not settings.sasl_username or settings.sasl_password is None:
            raise ConfigError("SASL needs sasl_username and sasl_password")
        options.update(sasl_mechanism=settings.sasl_mechanism,
                       sasl_plain_username=settings.sasl_username,
                       sasl_plain_password=settings.sasl_password.get_secret_value())
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    return options
