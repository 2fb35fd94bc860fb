"""Small named exceptions; each carries a message meant for the user."""

from __future__ import annotations

__all__ = [
    "GuardrailError",
    "RubricError",
    "ConfigError",
    "InputError",
    "JudgeError",
    "JudgeUnavailable",
    "JudgeAnswerError",
    "JudgeConfigError",
]


class GuardrailError(Exception):
    """Base class of every error guardrail raises on purpose."""


class RubricError(GuardrailError):
    """A rubric file or custom metric is invalid; the message names the field."""


class ConfigError(GuardrailError):
    """Settings or a config file are invalid."""


class InputError(GuardrailError):
    """A case could not be read (bad JSON, wrong types, missing output)."""


class JudgeError(GuardrailError):
    """The judge could not produce a usable verdict."""


class JudgeUnavailable(JudgeError):
    """Transport-level failure after retries: timeouts, 429, 5xx, refused connections.

    The streaming worker treats a batch full of these as a judge outage and
    pauses instead of publishing errors.
    """


class JudgeAnswerError(JudgeError):
    """The judge answered, but not with a valid verdict (even after one repair)."""


class JudgeConfigError(JudgeError, ConfigError):
    """The judge is misconfigured: every call would fail alike, so none is retried.

    Credentials refused or missing (HTTP 401/403), a model the provider does
    not know, an endpoint without a chat route (HTTP 404). ``setting`` is the
    flat name to fix (``judge_api_key``, ``judge_model``, ``judge_api_base``)
    and the message is one line naming it, never the key itself. Nobody turns
    this into a per-metric error: ``run`` and ``calibrate`` exit 2 with the
    line, the worker stops without acking the batch (exit code 78)::

        raise JudgeConfigError("judge configuration error: ...; check judge_api_key "
                               "(GUARDRAIL_JUDGE_API_KEY)", setting="judge_api_key")
    """

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting
