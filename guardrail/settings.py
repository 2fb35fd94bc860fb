"""All settings in one place, read from flags, a config file and the environment.

Precedence, highest first: command-line flags, the config file
(``--config`` or ``GUARDRAIL_CONFIG``), ``GUARDRAIL_*`` environment variables,
then the defaults below::

    >>> settings = load_settings(config_path="guardrail.yaml", judge_model="openai/gpt-4o-mini")
    >>> settings.judge.model
    'openai/gpt-4o-mini'

Settings come in groups, and each component receives only its own group (the
judge never sees the Kafka password)::

    settings.judge       # JudgeSettings: model, api_base, api_key, timeout, ...
    settings.evaluation  # EvaluationSettings: rubric_dir, redteam, cache_path, judge_calls
    settings.kafka       # KafkaSettings: bootstrap_servers, topics, security
    settings.worker      # WorkerSettings: batching, outages, shutdown, web
    settings.windows     # WindowSettings: windows, groups, alert rules, webhook
    settings.sampling    # SamplingSettings: sample rate and rules, the judge budget
    settings.inputs      # InputSettings: input_format, input_mapping, otlp_endpoint, ...
    settings.review      # ReviewSettings: review queue, labels topic, agreement alerts
    settings.escalation  # EscalationSettings (guardrail.cascade): escalate_model, band, ...

Every setting also has one flat name, the name users write: ``judge_model``,
``input_topic``, ``window_seconds`` … (:data:`FLAT_NAMES`). Flat names work as
config keys, as ``GUARDRAIL_<NAME>`` environment variables (lists
comma-separated, nested blocks as JSON), as ``load_settings`` keywords and in
``Settings(...)``; a config file may also nest them by group
(``judge: {model: ...}``). Secrets are :class:`pydantic.SecretStr` and never
printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from .cascade import EscalationSettings
from .formats.settings import InputSettings
from .review.settings import ReviewSettings
from ._config_file import read_config_file
from .errors import ConfigError
from .models import RedteamConfig

__all__ = ["Settings", "JudgeSettings", "EvaluationSettings", "KafkaSettings", "WorkerSettings",
           "WindowSettings", "AlertRule", "SamplingSettings", "InputSettings", "ReviewSettings", "SampleRule", "EscalationSettings",
           "load_settings", "settings_env", "read_config_file", "ENV_PREFIX", "FLAT_NAMES",
           "DEFAULT_CACHE_PATH"]

ENV_PREFIX = "GUARDRAIL_"

#: Where ``replay`` keeps judgments when ``cache_path`` is unset, so a second
#: replay of the same range pays the judge nothing.
DEFAULT_CACHE_PATH = Path("~/.cache/guardrail/judgments.sqlite")

_GROUP = ConfigDict(frozen=True, extra="forbid")


class AlertRule(BaseModel):
    """When to alert on one metric's windowed unsafe rate (``metric='*'``: any)."""

    model_config = _GROUP

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


class JudgeSettings(BaseModel):
    """The LLM judge (flat names ``judge_<field>``)."""

    model_config = _GROUP

    model: str = "openai/gpt-4o-mini"
    api_base: str | None = None
    api_key: SecretStr | None = None
    timeout: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    concurrency: int = Field(default=16, ge=1)
    max_tokens: int = Field(default=400, ge=16)
    temperature: float = 0.0
    structured_output: bool = True
    #: Ask for token log-probabilities: P(UNSAFE) decides the verdict (see verdict_thresholds).
    logprobs: bool = True
    #: ``auto``: plain HTTP for a self-hosted OpenAI-compatible judge
    #: (``openai/`` or ``hosted_vllm/`` model with ``api_base``), litellm
    #: otherwise; ``litellm`` or ``http`` to force one.
    transport: Literal["auto", "litellm", "http"] = "auto"
    #: Prices per token when the cost map does not know the judge model.
    input_cost_per_token: float | None = None
    output_cost_per_token: float | None = None


class EvaluationSettings(BaseModel):
    """What is judged and what is remembered."""

    model_config = _GROUP

    rubric_dir: Path | None = None
    redteam: RedteamConfig = RedteamConfig()
    #: SQLite judgment cache for every command. Unset: an in-memory cache per
    #: process, except ``replay``, which uses :data:`DEFAULT_CACHE_PATH`.
    cache_path: Path | None = None
    #: ``per_message``: one judge call carries every metric of a message (one
    #: prompt, one answer with an entry per metric); ``per_metric``: one call
    #: per metric, as before. A choice of how to judge, so it lives here, not
    #: with the judge's connection settings.
    judge_calls: Literal["per_message", "per_metric"] = "per_message"
    #: P(UNSAFE) from which a metric's verdict is UNSAFE, per metric name
    #: (others: 0.5, the sampled verdict's own cut). ``guardrail calibrate``
    #: recommends them and writes them to a settings file.
    verdict_thresholds: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _thresholds_are_probabilities(self) -> EvaluationSettings:
        for metric, threshold in self.verdict_thresholds.items():
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"verdict_thresholds.{metric} must be in (0, 1], got {threshold}")
        return self


class KafkaSettings(BaseModel):
    """Where the streams are, and how to reach them."""

    model_config = _GROUP

    bootstrap_servers: str | None = None
    #: Seconds to wait for a bootstrap server to answer before a command gives
    #: up with one line (exit 2) instead of retrying on.
    bootstrap_timeout: float = Field(default=10.0, gt=0)
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


class WorkerSettings(BaseModel):
    """How the streaming worker batches, waits out outages, stops and serves pages."""

    model_config = _GROUP

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


class WindowSettings(BaseModel):
    """Windowed unsafe rates per group, and the alerts on them."""

    model_config = _GROUP

    window_seconds: float = Field(default=300.0, gt=0)
    window_expires_seconds: float = Field(default=3600.0, gt=0)
    group_labels: tuple[str, ...] = ("model", "model_version", "prompt_version")
    version_label: str = "model_version"
    alert_rules: tuple[AlertRule, ...] = (AlertRule(),)
    alert_webhook_url: str | None = None
    alert_webhook_timeout: float = Field(default=5.0, gt=0)
    alert_examples: int = Field(default=3, ge=0, le=20)
    #: Label groups with their own /metrics series (later ones: "other").
    metrics_max_groups: int = Field(default=50, ge=0)


class SampleRule(BaseModel):
    """Which share of the messages whose metadata match is judged (first match wins).

    ``{"match": {"model_version": "v2"}, "rate": 1.0}``: every v2 message;
    ``{"first_per_version": 200}``: the first 200 messages of every version in
    full (see :mod:`guardrail.stream.sampling` for what "first" means)."""

    model_config = _GROUP

    #: Metadata labels that must all be equal (empty: every message).
    match: dict[str, str] = Field(default_factory=dict)
    rate: float | None = Field(default=None, ge=0, le=1)
    first_per_version: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> SampleRule:
        if (self.rate is None) == (self.first_per_version is None):
            raise ValueError("a sample rule needs exactly one of 'rate' and 'first_per_version'")
        return self


class SamplingSettings(BaseModel):
    """Which messages the worker judges, and the judge budget that can lower it."""

    model_config = _GROUP

    #: Share of valid messages judged (deterministic per case_id); the rest are
    #: only counted as seen.
    sample_rate: float = Field(default=1.0, ge=0, le=1)
    sample_rules: tuple[SampleRule, ...] = ()
    #: Judge spend over the last hour (per worker) that lowers the effective rate.
    budget_usd_per_hour: float | None = Field(default=None, gt=0)
    budget_tokens_per_hour: int | None = Field(default=None, gt=0)
    #: The budget never lowers the effective sample rate below this.
    budget_min_sample_rate: float = Field(default=0.01, gt=0, le=1)
    #: Shortest time between two steps of the effective rate (down or up).
    budget_step_seconds: float = Field(default=30.0, gt=0)


#: Group name → (its model, the prefix of its fields' flat names).
_GROUPS: dict[str, tuple[type[BaseModel], str]] = {
    "judge": (JudgeSettings, "judge_"),
    "evaluation": (EvaluationSettings, ""),
    "kafka": (KafkaSettings, ""),
    "worker": (WorkerSettings, ""),
    "windows": (WindowSettings, ""),
    "sampling": (SamplingSettings, ""),
    "inputs": (InputSettings, ""),
    "review": (ReviewSettings, ""),
    "escalation": (EscalationSettings, "escalate_"),
}

#: Flat name → (group, field): ``judge_model`` → ``("judge", "model")``.
FLAT_NAMES: dict[str, tuple[str, str]] = {
    prefix + field: (group, field)
    for group, (model, prefix) in _GROUPS.items() for field in model.model_fields}
_SECRETS = ("judge_api_key", "escalate_api_key", "sasl_password")
_LIST_FIELDS = {"group_labels"}
_JSON_FIELDS = {"redteam", "alert_rules", "sample_rules", "verdict_thresholds",
                "input_mapping", "otlp_labels"}


def _nest(data: Any) -> Any:
    """Fold flat names (``judge_model=...``) into their groups; nested groups pass."""
    if not isinstance(data, dict):
        return data
    nested: dict[str, Any] = {}
    for key, value in data.items():
        if key in FLAT_NAMES:
            group, field = FLAT_NAMES[key]
            block = nested.setdefault(group, {})
            if isinstance(block, dict):
                block[field] = value
        elif key in _GROUPS and isinstance(value, (dict, BaseModel)):
            # A group as a mapping or a model (``dict(settings)``); flat names beside it win.
            nested[key] = {**dict(value), **nested.get(key, {})}
        else:
            nested[key] = value  # unknown: pydantic names it
    return nested


class Settings(BaseModel):
    """Every knob guardrail has, by group. Frozen; build a new one with ``model_copy``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judge: JudgeSettings = JudgeSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    kafka: KafkaSettings = KafkaSettings()
    worker: WorkerSettings = WorkerSettings()
    windows: WindowSettings = WindowSettings()
    sampling: SamplingSettings = SamplingSettings()
    inputs: InputSettings = InputSettings()
    review: ReviewSettings = ReviewSettings()
    escalation: EscalationSettings = EscalationSettings()

    @model_validator(mode="before")
    @classmethod
    def _accept_flat_names(cls, data: Any) -> Any:
        return _nest(data)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, as JSON-ready values (secrets included)."""
        groups = self.model_dump(mode="json")
        return {name: groups[group][field] for name, (group, field) in FLAT_NAMES.items()}

    def public_dict(self) -> dict[str, Any]:
        """The settings by flat name with every secret masked, for logs and ``--show-config``."""
        data = self.flat()
        data.update({key: "***" for key in _SECRETS if data.get(key)})
        return data

    def secret(self, name: str) -> str | None:
        """The plain value of a secret setting (``judge_api_key``, ``sasl_password`` …)."""
        group, field = FLAT_NAMES[name]
        value = getattr(getattr(self, group), field)
        return value.get_secret_value() if value is not None else None


def _from_env(environ: os._Environ[str] | dict[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in FLAT_NAMES:
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


def settings_env(settings: Settings) -> dict[str, str]:
    """``GUARDRAIL_*`` variables that rebuild ``settings`` in a child process: the
    inverse of the environment parsing, for fields that differ from the defaults
    (secrets included: they travel by environment, never by disk)."""
    defaults = Settings().flat()
    env = {}
    for name, value in settings.flat().items():
        if name in _SECRETS:
            value = settings.secret(name)
        if value is None or value == defaults[name]:
            continue
        if name in _LIST_FIELDS:
            text = ",".join(value)
        elif isinstance(value, (dict, list)):
            text = orjson.dumps(value).decode()
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        env[ENV_PREFIX + name.upper()] = text
    return env


def _flat_location(loc: tuple[Any, ...]) -> str:
    """``("judge", "timeout")`` → ``judge_timeout``: errors name what users wrote."""
    if len(loc) >= 2 and loc[0] in _GROUPS:
        prefix = _GROUPS[str(loc[0])][1]
        return ".".join([prefix + str(loc[1])] + [str(p) for p in loc[2:]])
    return ".".join(str(p) for p in loc)


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
    merged = _nest(_from_env(env))
    config_path = config_path or env.get(ENV_PREFIX + "CONFIG") or None
    layers = [read_config_file(config_path)] if config_path else []
    layers.append({k: v for k, v in overrides.items() if v is not None})
    for layer in layers:
        for group, values in _nest(layer).items():
            below = merged.get(group)
            if group in _GROUPS and isinstance(values, dict) and isinstance(below, dict):
                merged[group] = {**below, **values}
            else:
                merged[group] = values
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(f"{_flat_location(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"invalid settings: {problems}") from None
