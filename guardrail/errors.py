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
