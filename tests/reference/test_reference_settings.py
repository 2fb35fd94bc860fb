"""The generated settings reference (docs/reference/settings.md): every setting
described, every flat name listed with its variable and default, tables that
Python-Markdown reads as written, and an example whose file and environment
forms give the same settings."""

from __future__ import annotations

import json
import re
import shlex

import markdown
import pytest
from pydantic import SecretStr

from guardrail.reference.settings import EXAMPLE, nested_models, settings_page
from guardrail.config.settings import (ENV_PREFIX, FLAT_NAMES, Settings, _GROUPS, _SECRETS,
                                       load_settings)
from guardrail.judging.settings import DEFAULT_CACHE_PATH, EvaluationSettings
from guardrail.stream.settings import AlertRule, SampleRule

MODELS = [model for model, _ in _GROUPS.values()] + nested_models()


@pytest.fixture(scope="module")
def page() -> str:
    return settings_page()


def _cells(row: str) -> list[str]:
    """A table row's cells as Python-Markdown splits them: ``\\|`` and pipes
    inside code spans do not separate cells."""
    cells, current, code = [], "", ""
    i, body = 0, row.strip()[1:-1] if row.strip().endswith("|") else row.strip()[1:]
    while i < len(body):
        ticks = re.match(r"`+", body[i:])
        if ticks:
            mark = ticks.group()
            code = "" if code == mark else (code or mark)
            current += mark
            i += len(mark)
        elif body.startswith("\\|", i):
            current, i = current + "\\|", i + 2
        elif body[i] == "|" and not code:
            cells.append(current.strip())
            current, i = "", i + 1
        else:
            current, i = current + body[i], i + 1
    return cells + [current.strip()]


def _tables(page: str) -> list[list[str]]:
    """Each table of the page as its lines (header, rule, rows)."""
    tables: list[list[str]] = []
    previous = ""
    for line in page.splitlines():
        if line.startswith("|"):
            if not previous.startswith("|"):
                tables.append([])
            tables[-1].append(line)
        previous = line
    return tables


def _row_of(page: str, name: str) -> list[str]:
    rows = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, name
    return _cells(rows[0])


def test_the_nested_blocks_are_the_alert_and_sample_rules():
    assert nested_models() == [AlertRule, SampleRule]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_setting_has_a_description(model):
    missing = [name for name, field in model.model_fields.items()
               if not isinstance(field.description, str) or not field.description.strip()]
    assert missing == [], f"{model.__name__}: give these fields a docstring"
    for name, field in model.model_fields.items():
        assert "#:" not in field.description and ":mod:" not in field.description, name


def test_the_secrets_are_the_secret_fields():
    secret = {name for name, (group, field) in FLAT_NAMES.items()
              if SecretStr in _annotation_parts(
                  _GROUPS[group][0].model_fields[field].annotation)}
    assert secret == set(_SECRETS)


def _annotation_parts(annotation):
    args = getattr(annotation, "__args__", ())
    return {annotation, *(part for arg in args for part in _annotation_parts(arg))}


def test_the_cache_description_names_the_default_cache_path():
    assert str(DEFAULT_CACHE_PATH) in EvaluationSettings.model_fields["cache_path"].description


def test_every_flat_name_is_listed_with_its_variable_and_default(page):
    defaults = Settings().flat()
    for name in FLAT_NAMES:
        _, variable, _, default, description = _row_of(page, name)
        assert variable.startswith(f"`{ENV_PREFIX}{name.upper()}`"), name
        value = defaults[name]
        if value is None or name in _SECRETS:
            expected = "unset"
        else:
            expected = f"`{value if isinstance(value, str) else json.dumps(value)}`"
        assert default == expected, name
        assert description, name


def test_the_blocks_list_their_fields(page):
    assert "### AlertRule" in page and "### SampleRule" in page
    for model in nested_models():
        for field in model.model_fields:
            assert f"| `{field}` |" in page, (model.__name__, field)


def test_every_table_row_has_as_many_cells_as_its_header(page):
    tables = _tables(page)
    assert len(tables) == len(_GROUPS) + len(nested_models())
    for table in tables:
        header = _cells(table[0])
        assert re.fullmatch(r"\|(---\|)+", table[1]), table[1]
        for row in table[2:]:
            assert len(_cells(row)) == len(header), row


def test_the_page_renders_every_row_and_no_escaping_backslash(page):
    html = markdown.markdown(page, extensions=["tables", "attr_list", "toc"])
    rows = len(FLAT_NAMES) + sum(len(m.model_fields) for m in nested_models())
    assert html.count("<tr>") == rows + len(_tables(page))  # plus one header row each
    assert "\\|" not in html
    # Docstrings' reST (double backticks, roles) became Markdown; fences stay.
    assert not re.search(r"(?<!`)``(?!`)|:(mod|class|data):", page)


def _block(page: str, language: str) -> str:
    match = re.search(rf"```{language}\n(.*?)\n```", page, re.DOTALL)
    assert match, language
    return match.group(1)


def test_the_example_file_and_environment_give_the_same_settings(page, tmp_path):
    config = tmp_path / "guardrail.yaml"
    config.write_text(_block(page, "yaml"), encoding="utf-8")
    environ = dict(shlex.split(line)[1].split("=", 1)
                   for line in _block(page, "bash").splitlines())
    assert set(environ) == {ENV_PREFIX + name.upper() for name in EXAMPLE}
    from_file = load_settings(config, environ={})
    assert from_file == load_settings(environ=environ)
    changed = {k for k, v in from_file.flat().items() if v != Settings().flat()[k]}
    assert changed == set(EXAMPLE)
