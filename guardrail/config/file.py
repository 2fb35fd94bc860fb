"""Read a YAML or JSON settings file into a mapping (see :mod:`guardrail.config.settings`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from ..errors import ConfigError

__all__ = ["read_config_file"]


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
