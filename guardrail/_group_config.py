"""What every settings group shares: its pydantic model config.

Each wing owns its settings group (``judges/settings.py``, ``kafka/settings.py`` …);
:mod:`guardrail.config` gathers them into the one ``Settings``. A group's model
config is frozen, refuses unknown keys and keeps each field's docstring as its
description, which the generated settings reference prints
(:mod:`guardrail.reference.settings`)::

    class ReplaySettings(BaseModel):
        model_config = GROUP_CONFIG

        replay_rate: float = 1.0
        # ...and under it a string literal: this field's description
"""

from __future__ import annotations

from pydantic import ConfigDict

__all__ = ["GROUP_CONFIG"]

GROUP_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
