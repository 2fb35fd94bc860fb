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
    settings.worker      # WorkerSettings: batching, outages, shutdown, web, stalls
    settings.windows     # WindowSettings: windows, groups, alert rules, webhook
    settings.sampling    # SamplingSettings: sample rate and rules, the judge budget
    settings.inputs      # InputSettings: input_format, input_mapping, otlp_endpoint, ...
    settings.review      # ReviewSettings: review queue, labels topic, agreement alerts
    settings.escalation  # EscalationSettings (guardrail.judges.settings): escalate_model, band, ...
    settings.runs        # RunSettings (guardrail.assembly.runs): agent runs from OTLP spans
    settings.sessions    # SessionSettings (guardrail.assembly.sessions): conversations judged whole
    settings.batch_api   # BatchApiSettings (guardrail.batch_api): run --batch-api chunks, polls
    settings.gate        # GateSettings (guardrail.gate): gate mode, approved and held topics
    settings.registry    # RegistrySettings (guardrail.kafka): Schema Registry, results_format

Every setting also has one flat name, the name users write: ``judge_model``,
``input_topic``, ``window_seconds`` … (:data:`FLAT_NAMES`). Flat names work as
config keys, as ``GUARDRAIL_<NAME>`` environment variables (lists
comma-separated, nested blocks as JSON), as ``load_settings`` keywords and in
``Settings(...)``; a config file may also nest them by group
(``judge: {model: ...}``). Secrets are :class:`pydantic.SecretStr` and never
printed.

Each group lives in the wing it configures (``judges/settings.py``,
``kafka/settings.py``, ``stream/settings.py`` …), so a wing reads its own group
and never the whole; this module, above the wings, gathers them. Every field's
docstring is its description, from which the settings reference of the docs is
generated (:mod:`guardrail.reference.settings`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

from ..assembly.runs.settings import RunSettings
from ..assembly.sessions.settings import SessionSettings
from ..batch_api.settings import BatchApiSettings
from ..formats.settings import InputSettings
from ..gate.settings import GateSettings
from ..judges.settings import EscalationSettings, JudgeSettings
from ..judging.settings import DEFAULT_CACHE_PATH, EvaluationSettings
from ..kafka.registry_settings import RegistrySettings
from ..kafka.settings import KafkaSettings
from ..review.settings import ReviewSettings
from ..stream.settings import (AlertRule, SampleRule, SamplingSettings, WindowSettings,
                               WorkerSettings)
from ..errors import ConfigError
from .file import read_config_file

__all__ = ["Settings", "JudgeSettings", "EvaluationSettings", "KafkaSettings", "WorkerSettings",
           "WindowSettings", "AlertRule", "SamplingSettings", "InputSettings", "ReviewSettings",
           "SampleRule", "EscalationSettings", "RunSettings", "SessionSettings", "BatchApiSettings",
           "GateSettings", "RegistrySettings",
           "load_settings",
           "settings_env", "env_text",
           "read_config_file", "ENV_PREFIX", "FLAT_NAMES", "DEFAULT_CACHE_PATH"]

ENV_PREFIX = "GUARDRAIL_"

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
    "runs": (RunSettings, ""),
    "sessions": (SessionSettings, ""),
    "batch_api": (BatchApiSettings, "batch_"),
    "gate": (GateSettings, ""),
    "registry": (RegistrySettings, ""),
}

#: Flat name → (group, field): ``judge_model`` → ``("judge", "model")``.
FLAT_NAMES: dict[str, tuple[str, str]] = {
    prefix + field: (group, field)
    for group, (model, prefix) in _GROUPS.items() for field in model.model_fields}
_SECRETS = ("judge_api_key", "escalate_api_key", "sasl_password", "schema_registry_password")
_LIST_FIELDS = {"group_labels", "session_association_keys"}
_JSON_FIELDS = {"redteam", "alert_rules", "sample_rules", "verdict_thresholds",
                "judge_protocol_options", "judge_guard_categories",
                "input_mapping", "otlp_labels"}


def _nest(data: Any) -> Any:
    """Fold flat names (``judge_model=...``) into their groups; nested groups pass."""
    if not isinstance(data, dict):
        return data
    nested: dict[str, Any] = {}
    for key, value in data.items():
        if key in _GROUPS and isinstance(value, (dict, BaseModel)):
            # A group as a mapping or a model (``dict(settings)``); flat names beside it
            # win. Checked first: ``gate`` is a group and, as a boolean, a flat name.
            nested[key] = {**dict(value), **nested.get(key, {})}
        elif key in FLAT_NAMES:
            group, field = FLAT_NAMES[key]
            block = nested.setdefault(group, {})
            if isinstance(block, dict):
                block[field] = value
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
    runs: RunSettings = RunSettings()
    sessions: SessionSettings = SessionSettings()
    batch_api: BatchApiSettings = BatchApiSettings()
    gate: GateSettings = GateSettings()
    registry: RegistrySettings = RegistrySettings()

    @model_validator(mode="before")
    @classmethod
    def _accept_flat_names(cls, data: Any) -> Any:
        return _runs_off_at_the_gate(_nest(data))

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name, as JSON-ready values (secrets included)."""
        groups = self.model_dump(mode="json")
        return {name: groups[group][field] for name, (group, field) in FLAT_NAMES.items()}

    def public_dict(self) -> dict[str, Any]:
        """The settings by flat name with every secret masked, for logs."""
        data = self.flat()
        data.update({key: "***" for key in _SECRETS if data.get(key)})
        return data

    def secret(self, name: str) -> str | None:
        """The plain value of a secret setting (``judge_api_key``, ``sasl_password`` …)."""
        group, field = FLAT_NAMES[name]
        value = getattr(getattr(self, group), field)
        return value.get_secret_value() if value is not None else None


def _runs_off_at_the_gate(data: Any) -> Any:
    """Gate mode judges each model call unless ``agent_runs`` is set: a run is judged
    once complete, after its spans went through the gate (as verdict NONE)."""
    if not isinstance(data, dict):
        return data
    gate, runs = data.get("gate"), data.get("runs")
    on = gate.get("gate") if isinstance(gate, dict) else getattr(gate, "gate", False)
    try:
        on = TypeAdapter(bool).validate_python(on or False)
    except ValidationError:
        return data  # the gate group's own validation says what is wrong
    given = (runs if isinstance(runs, dict)
             else getattr(runs, "model_fields_set", set()) if runs is not None else {})
    if on and "agent_runs" not in given:
        runs = dict(runs) if isinstance(runs, dict) else (
            runs.model_dump(exclude_unset=True) if runs is not None else {})
        return {**data, "runs": {**runs, "agent_runs": False}}
    return data


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
        env[ENV_PREFIX + name.upper()] = env_text(name, value)
    return env


def env_text(name: str, value: Any) -> str:
    """A JSON-ready value of the setting ``name`` as its ``GUARDRAIL_*`` variable
    holds it: lists comma-separated, nested blocks as JSON, booleans lower-case."""
    if name in _LIST_FIELDS:
        return ",".join(value)
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


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
