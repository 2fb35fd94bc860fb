"""Flags that stand for a setting and show the setting's default in ``--help``::

    @setting_option("--web-port", "web_port", type=click.IntRange(1, 65535),
                    help="Port of the worker's HTTP pages.")

``--help`` reads ``[default: 6066]``: the default of the ``web_port`` setting,
taken from :class:`~guardrail.config.settings.Settings`, so help and code cannot
disagree. A flag the user did not give still reaches the command as None, and
:func:`~guardrail.config.settings.load_settings` then keeps what the config file or a
``GUARDRAIL_*`` variable set: a given flag overrides both, a default must not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from ..config.settings import FLAT_NAMES, Settings

__all__ = ["setting_option", "setting_default"]


def setting_default(name: str) -> Any:
    """The default of the setting with flat name ``name`` (``web_port`` → 6066)."""
    group, field = FLAT_NAMES[name]
    return getattr(getattr(Settings(), group), field)


def _given_only(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """The flag's value when the user gave it, else None (see the module docstring)."""
    source = ctx.get_parameter_source(param.name or "")
    return None if source in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP) else value


def setting_option(flag: str, name: str, **kwargs: Any) -> Callable[[Any], Any]:
    """``click.option`` for the setting ``name``, its default shown in ``--help``."""
    if name not in FLAT_NAMES:
        raise ValueError(f"{name} is not a setting")
    return click.option(flag, name, default=setting_default(name), show_default=True,
                        callback=_given_only, **kwargs)
