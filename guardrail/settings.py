"""All settings in one place, read from flags, a config file and the environment.

Precedence, highest first: command-line flags, the config file
(``--config`` or ``GUARDRAIL_CONFIG``), ``GUARDRAIL_*`` environment variables,
then the defaults below::

    >>> settings = load_settings(config_path="guardrail.yaml", judge_model="openai/gpt-4o-mini")
    >>> settings.judge_model
    'openai/gpt-4o-mini'

Every field ``x`` can be set as ``GUARDRAIL_X`` (lists comma-separated, nested
blocks as JSON). Secrets are :class:`pydantic.SecretStr` and never printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from .errors import ConfigError
from .models import RedteamConfig

__all__ = ["Settings", "AlertRule", "load_settings", "ENV_PREFIX"]

ENV_PREFIX = "GUARDRAIL_"


class AlertRule(BaseModel):
    """When to alert on one metric's windowed unsafe rate (``metric='*'``: any)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str = "*"
    #: Absolute rule: alert when the unsafe rate exceeds this (None: off).
    max_unsafe_rate: float | None = Field(default=0.2, ge=0, le=1)
    #: Fewest judgments in a window before any rule may fire.
    min_judgments: int = Field(default=20, ge=1)
    #: Regression rule: compare with the previous K windows (0: off).
    baseline_windows: int = Field(default=3, ge=0)
    #: Or compare with this label value of the group's version label.
    baseline_version: str | None = None
    #: One-sided two-proportion z-test significance level.
    significance: float = Field(default=0.01, gt=0, lt=0.5)
    #: One incident, one alert: no repeat for the same rule and group within this.
    cooldown_seconds: float = Field(default=900, ge=0)


class Settings(BaseModel):
    """Every knob guardrail has. Frozen; build a new one with ``model_copy``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- the judge -----------------------------------------------------
    judge_model: str = "openai/gpt-4o-mini"
    judge_api_base: str | None = None
    judge_api_key: SecretStr | None = None
    judge_timeout: float = Field(default=30.0, gt=0)
    judge_max_retries: int = Field(default=3, ge=0)
    judge_concurrency: int = Field(default=16, ge=1)
    judge_max_tokens: int = Field(default=400, ge=16)
    judge_temperature: float = 0.0
    judge_structured_output: bool = True
    #: ``auto``: plain HTTP for a self-hosted OpenAI-compatible judge
    #: (``openai/`` or ``hosted_vllm/`` model with ``judge_api_base``), litellm
    #: otherwise; ``litellm`` or ``http`` to force one.
    judge_transport: Literal["auto", "litellm", "http"] = "auto"
    #: Prices per token when the cost map does not know the judge model.
    judge_input_cost_per_token: float | None = None
    judge_output_cost_per_token: float | None = None
    # --- what is judged ------------------------------------------------
    rubric_dir: Path | None = None
    redteam: RedteamConfig = RedteamConfig()
    cache_path: Path | None = None
    # --- Kafka ---------------------------------------------------------
    bootstrap_servers: str | None = None
    input_topic: str = "model-outputs"
    results_topic: str = "redteam-results"
    dlq_topic: str = "model-outputs.dlq"
    alerts_topic: str = "redteam-alerts"
    judgments_topic: str = "guardrail-judgments"
    topic_partitions: int = Field(default=2, ge=1)
    topic_replication: int = Field(default=1, ge=1)
    app_id: str = "guardrail"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    # --- the worker ----------------------------------------------------
    batch_size: int = Field(default=64, ge=1)
    batch_within: float = Field(default=0.05, gt=0)
    max_message_bytes: int = Field(default=1_000_000, ge=1024)
    #: Longest a consumer fetch waits for data (Faust fixes 1500 ms; a broker
    #: that holds fetches for the full wait then adds it to every latency).
    consumer_fetch_wait_ms: int = Field(default=100, ge=1, le=30_000)
    #: On a judge outage: "pause" (back off, retry the batch) or "record" (errors).
    outage_policy: Literal["pause", "record"] = "pause"
    outage_max_backoff: float = Field(default=60.0, gt=0)
    #: Share of a batch's judgments failing on the judge's side (unreachable,
    #: 429/5xx, timeouts) from which the batch counts as an outage and waits.
    outage_threshold: float = Field(default=0.5, gt=0, le=1)
    #: A stop taking longer (e.g. the broker vanished) ends the process; nothing
    #: unfinished was acked, so its messages are redelivered.
    stop_deadline_seconds: float = Field(default=45.0, gt=0)
    web_port: int = 6066
    web_host: str = "127.0.0.1"
    # --- windows and alerts ----------------------------------------------
    window_seconds: float = Field(default=300.0, gt=0)
    window_expires_seconds: float = Field(default=3600.0, gt=0)
    group_labels: tuple[str, ...] = ("model", "model_version", "prompt_version")
    version_label: str = "model_version"
    alert_rules: tuple[AlertRule, ...] = (AlertRule(),)
    alert_webhook_url: str | None = None
    alert_webhook_timeout: float = Field(default=5.0, gt=0)
    alert_examples: int = Field(default=3, ge=0, le=20)

    def public_dict(self) -> dict[str, Any]:
        """The settings with every secret masked, for logs and ``--show-config``."""
        data = self.model_dump(mode="json")
        for key in ("judge_api_key", "sasl_password"):
            if data.get(key):
                data[key] = "***"
        return data


_LIST_FIELDS = {"group_labels"}
_JSON_FIELDS = {"redteam", "alert_rules"}


def _from_env(environ: os._Environ[str] | dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in Settings.model_fields:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None or raw == "":
            continue
        if name in _LIST_FIELDS:
            values[name] = [part.strip() for part in raw.split(",") if part.strip()]
        elif name in _JSON_FIELDS:
            try:
                values[name] = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise ConfigError(f"{ENV_PREFIX}{name.upper()} is not valid JSON: {exc}") from None
        else:
            values[name] = raw
    return values


def read_config_file(path: Path | str) -> dict[str, Any]:
    """Read a YAML or JSON config file into a mapping of settings."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings")
    return data


def load_settings(
    config_path: Path | str | None = None,
    *,
    environ: dict[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Merge defaults < environment < config file < overrides (flags).

    ``None`` overrides are ignored, so unset CLI flags fall through.
    """
    env = dict(os.environ) if environ is None else environ
    merged = _from_env(env)
    config_path = config_path or env.get(ENV_PREFIX + "CONFIG") or None
    if config_path:
        merged.update(read_config_file(config_path))
    merged.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
