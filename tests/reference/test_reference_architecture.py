"""The architecture page: one line per wing, read from the layer table the code is
held to (tests/test_layers.py), and one picture of them, its text escaped."""

from __future__ import annotations

from xml.etree import ElementTree

from support.source_imports import PACKAGE

from guardrail.reference.architecture import architecture_page, architecture_svg, layer_rows

WINGS = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_every_wing_has_one_line_with_its_layer_and_one_box():
    page = architecture_page()
    rows = layer_rows()
    assert {row.wing for row in rows} == WINGS | {"(root)"}
    for row in rows:
        if row.wing != "(root)":
            assert page.count(f"| {row.layer} | `{row.wing}/` |") == 1, row.wing
    svg = ElementTree.fromstring(architecture_svg(rows))
    boxes = [g.find("{http://www.w3.org/2000/svg}text").text
             for g in svg.iter("{http://www.w3.org/2000/svg}g")]
    assert sorted(boxes) == sorted(WINGS | {"root helpers"})


def test_a_row_continued_on_the_next_line_is_one_line_and_its_text_is_escaped():
    doc = """Intro.

====  ====  ====
0     (root)       ``errors`` and <helpers>
                   that go on & on
3     sample       a wing "quoted"
====  ====  ====
"""
    rows = layer_rows(doc)
    assert [(r.layer, r.wing, r.text) for r in rows] == [
        (0, "(root)", "``errors`` and <helpers> that go on & on"),
        (3, "sample", 'a wing "quoted"')]
    svg = architecture_svg(rows)
    ElementTree.fromstring(svg)  # well-formed: <, & and quotes escaped
    assert "&lt;helpers&gt;" in svg and "<helpers>" not in svg
