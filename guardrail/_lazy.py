"""A wing's public names, imported on first use.

:mod:`guardrail.config` imports every wing's settings group, so importing a
wing's ``settings`` module runs the wing's ``__init__``; a wing whose modules pull
in heavy libraries (a Kafka client, protobuf, the guard judges) exports its names
lazily, and plain configuration stays light::

    __all__ = ["EmbeddedBroker", "ensure_topics"]
    __getattr__ = lazy_exports(__name__, {"EmbeddedBroker": ".broker",
                                          "ensure_topics": ".topics"})

A home starting with a dot is a module of the wing; any other is a full module
name (a name the wing re-exports from a wing below it).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``homes[name]`` the first
    time it is asked for, and keeps it on the package (later reads cost nothing)."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(home, package if home.startswith(".") else None)
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
