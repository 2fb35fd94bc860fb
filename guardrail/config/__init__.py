"""The one ``Settings``: every wing's settings group gathered, read from flags, a
config file and the environment (flags win, then the file, then ``GUARDRAIL_*``)::

    from guardrail.config import load_settings
    settings = load_settings(config_path="guardrail.yaml", judge_model="openai/gpt-4o-mini")
    settings.judge.model, settings.kafka.input_topic
    settings_env(settings)        # the GUARDRAIL_* variables that rebuild it in a child

Each group lives in the wing it configures (``judges/settings.py``,
``kafka/settings.py``, ``stream/settings.py`` …) and each wing reads only its own
groups; composition happens here, above them. So this wing imports every wing that
owns a group, and is imported only by the wings that start things: the file runs,
calibration, replay, the worker, the demo, the command line and the reference.

- :mod:`.settings` — :class:`Settings`, flat names, :func:`load_settings`, the
  environment both ways.
- :mod:`.file` — a YAML or JSON settings file read into a mapping.
"""

from __future__ import annotations

from .file import read_config_file
from .settings import ENV_PREFIX, FLAT_NAMES, Settings, env_text, load_settings, settings_env

__all__ = ["Settings", "load_settings", "settings_env", "env_text", "read_config_file",
           "ENV_PREFIX", "FLAT_NAMES"]
