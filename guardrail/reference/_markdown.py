"""Markdown pieces the generated reference pages share: table cells, tables and
the models a type annotation holds.

    >>> md_table(["name", "note"], [["`a|b`", "x | y"], ["c", None]]).splitlines()[2]
    '| `a|b` | x \\\\| y |'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, get_args

from pydantic import BaseModel

__all__ = ["md_cell", "md_table", "models_in"]

_CODE = re.compile(r"(`+).+?\1")


def md_cell(text: str | None) -> str:
    """Text for one table cell: on one line, its pipes escaped outside code spans
    (Python-Markdown's tables leave a pipe inside backticks alone and would show
    the backslash of an escaped one)."""
    text = " ".join((text or "").split())
    pieces, last = [], 0
    for code in _CODE.finditer(text):
        pieces += [text[last:code.start()].replace("|", r"\|"), code.group()]
        last = code.end()
    return "".join(pieces) + text[last:].replace("|", r"\|")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str | None]]) -> str:
    """A Markdown table; ``None`` cells are empty."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a type annotation holds (``list[AlertRule] | None`` …)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in models_in(arg)]
