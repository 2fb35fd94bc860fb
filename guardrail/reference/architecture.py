"""The architecture page (``reference/architecture.md``): guardrail's wings on their
layers, read from the layer table in :mod:`guardrail`'s docstring (the table
``tests/test_layers.py`` holds the code to), drawn as one picture with one line per
wing::

    >>> rows = layer_rows()
    >>> rows[0].layer, rows[0].wing
    (0, '(root)')
    >>> "judging" in {row.wing for row in rows if row.layer == 1}
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape

import guardrail

from ._markdown import md_table

__all__ = ["LayerRow", "layer_rows", "architecture_svg", "architecture_page"]

#: A row of the table: its layer, then the wing (or ``(root)``), then the text.
_ROW = re.compile(r"^(\d+)\s{2,}(\(root\)|[a-z_]+)\s{2,}(.*)$")
#: A continuation line of a row's text: indented to the text's column.
_MORE = re.compile(r"^\s{10,}(\S.*)$")

_BOX_W, _BOX_H, _GAP, _BAND_H, _LEFT, _WIDTH = 150, 34, 14, 58, 96, 760


@dataclass(frozen=True)
class LayerRow:
    layer: int
    wing: str
    text: str


def layer_rows(doc: str | None = None) -> list[LayerRow]:
    """The table's rows in order, each row's text joined into one line."""
    rows: list[LayerRow] = []
    for line in (doc if doc is not None else guardrail.__doc__ or "").splitlines():
        if match := _ROW.match(line):
            rows.append(LayerRow(int(match.group(1)), match.group(2), match.group(3).strip()))
        elif rows and (more := _MORE.match(line)) and not line.strip().startswith("="):
            last = rows[-1]
            rows[-1] = LayerRow(last.layer, last.wing, f"{last.text} {more.group(1).strip()}")
    return rows


def _plain(text: str) -> str:
    """The row's reStructuredText as plain text (``x`` → x)."""
    return text.replace("``", "")


def architecture_svg(rows: list[LayerRow]) -> str:
    """One band per layer, the highest on top, a box per wing; each box's title is
    its line of the table (shown on hover)."""
    layers = sorted({row.layer for row in rows}, reverse=True)
    height = len(layers) * _BAND_H + 40
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_WIDTH} {height}" '
             f'width="100%" role="img" aria-label="guardrail\'s wings by layer; imports '
             f'point down" font-family="sans-serif" font-size="13">']
    for band, layer in enumerate(layers):
        top = 20 + band * _BAND_H
        fill = "#eef0fb" if band % 2 == 0 else "#f7f7fd"
        parts.append(f'<rect x="0" y="{top}" width="{_WIDTH}" height="{_BAND_H}" '
                     f'fill="{fill}"/>')
        parts.append(f'<text x="12" y="{top + _BAND_H / 2 + 4}" fill="#555">layer {layer}'
                     '</text>')
        wings = [row for row in rows if row.layer == layer]
        for index, row in enumerate(wings):
            x = _LEFT + index * (_BOX_W + _GAP)
            y = top + (_BAND_H - _BOX_H) / 2
            name = "root helpers" if row.wing == "(root)" else row.wing
            parts.append(
                f'<g><title>{escape(name)}: {escape(_plain(row.text))}</title>'
                f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" '
                f'fill="#fff" stroke="#3f51b5"/>'
                f'<text x="{x + _BOX_W / 2}" y="{y + _BOX_H / 2 + 5}" text-anchor="middle">'
                f'{escape(name)}</text></g>')
    parts.append(f'<text x="{_WIDTH - 8}" y="14" text-anchor="end" fill="#555">'
                 'a wing imports only the layers below it</text>')
    parts.append("</svg>")
    return "".join(parts)


def architecture_page() -> str:
    rows = layer_rows()
    lines = [
        "# Architecture",
        "",
        "guardrail is a stack of *wings*, one subpackage each. A wing imports only the",
        "wings of lower layers (and the root's small helpers): the judging core knows",
        "no Kafka, the stream contract knows no Kafka client, and the Faust worker,",
        "the replay and the command line compose everything below them. An exception",
        "is named, with its reason, in the importing wing's docstring;",
        "`tests/test_layers.py` fails on any other. Generated from the layer table in",
        "`guardrail/__init__.py`, so this page shows the wings as the code has them.",
        "",
        '<div class="architecture">' + architecture_svg(rows) + "</div>",
        "",
        md_table(["layer", "wing", "what it is for"],
                 [[str(row.layer), "(root)" if row.wing == "(root)" else f"`{row.wing}/`",
                   row.text.replace("``", "`")] for row in rows]),
    ]
    lines += ["", "Each wing's `__init__.py` says what it holds, what it imports and",
              "never imports, and lists its public names in `__all__`; its tests are in",
              "`tests/<wing>/`.", ""]
    return "\n".join(lines)
