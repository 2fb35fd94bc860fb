"""The settings reference (``reference/settings.md``), built from the settings models.

One section per group of :class:`~guardrail.config.settings.Settings`, each setting with
its flat name, ``GUARDRAIL_*`` variable, type, default and description (the
field's docstring); then the blocks that list settings hold (``alert_rules``,
``sample_rules``), and an example config file with the same settings as
environment variables::

    >>> from guardrail.reference.settings import settings_page
    >>> "| `judge_model` | `GUARDRAIL_JUDGE_MODEL` |" in settings_page()
    True
"""

from __future__ import annotations

import inspect
import json
import re
import shlex
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, SecretStr, TypeAdapter
from pydantic.fields import FieldInfo

from ._markdown import md_table, models_in
from ..config.settings import (_GROUPS, _JSON_FIELDS, _LIST_FIELDS, _SECRETS, ENV_PREFIX,
                               FLAT_NAMES, env_text)

__all__ = ["settings_page", "nested_models"]

#: The settings of the example config file (each one differs from its default).
EXAMPLE: dict[str, Any] = {
    "judge_model": "openai/gpt-4o", "judge_timeout": 20.0,
    "bootstrap_servers": "kafka-1:9092,kafka-2:9092", "input_topic": "chat-outputs",
    "group_labels": ["model", "model_version"], "sample_rate": 0.25,
    "verdict_thresholds": {"toxicity": 0.7},
    "alert_rules": [{"metric": "*", "max_unsafe_rate": 0.1, "cooldown_seconds": 600}],
}

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def settings_page() -> str:
    """The Markdown of the settings reference page."""
    # The page's own contents column goes (Material front matter): the tables need the width.
    parts = ["---\nhide:\n  - toc\n---\n\n# Settings", _how_read(), _example()]
    parts += [_group_section(group) for group in _GROUPS]
    parts.append(_blocks_section())
    return "\n\n".join(parts) + "\n"


def nested_models() -> list[type[BaseModel]]:
    """The blocks that settings hold (``AlertRule``, ``SampleRule``): the models in
    the groups' field types that are defined beside the groups."""
    homes = {model.__module__ for model, _ in _GROUPS.values()}
    found: list[type[BaseModel]] = []
    for model, _ in _GROUPS.values():
        for field in model.model_fields.values():
            found += [m for m in models_in(field.annotation)
                      if m.__module__ in homes and m not in found]
    return found


def _how_read() -> str:
    env = f"`{ENV_PREFIX}<NAME>`"
    return f"""Every setting guardrail has, generated from the settings models in
`guardrail/config/settings.py` and the modules it gathers.

## How settings are read

- **Precedence**, highest first: command-line flags, the config file
  (`--config FILE` or `{ENV_PREFIX}CONFIG`), {env} environment variables,
  then the defaults below. Unset flags fall through.
- **One flat name per setting**: the config key, the environment variable
  ({env}, the name upper-cased) and the keyword of `load_settings(...)` and
  `Settings(...)`. Some settings also have an option on the
  [command line](cli.md) (`--model` for `judge_model`, for example).
- **The config file** is YAML, or JSON when its name ends in `.json`. Its keys
  are flat names, or a group's fields nested under the group's name
  (`judge: {{model: openai/gpt-4o}}`; each group below says how its names
  map). An unknown key is an error.
- **Environment variables** are text: lists comma-separated
  ({_names(_LIST_FIELDS)}), nested blocks as JSON ({_names(_JSON_FIELDS)}),
  booleans `true` or `false`. An empty variable counts as unset; a variable
  with a name guardrail does not know is ignored, so check the spelling.
- **Secrets** ({_names(_SECRETS)}) are never printed: they show as
  `**********`. Keep them in the environment rather than in a file.
- **Every value is checked** when the settings are read: a value out of range
  stops the command with one line naming the setting (exit code 2).
"""


def _names(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in sorted(names))


def _example() -> str:
    file = yaml.safe_dump(EXAMPLE, sort_keys=False, default_flow_style=None).strip()
    env = "\n".join(f"export {ENV_PREFIX}{name.upper()}={shlex.quote(env_text(name, value))}"
                    for name, value in EXAMPLE.items())
    return f"""## Example

A config file, `guardrail.yaml`, read with `guardrail worker --config guardrail.yaml`:

```yaml
{file}
```

The same settings as environment variables:

```bash
{env}
```

Fields of a block left out (here in `alert_rules`) keep their defaults."""


def _group_section(group: str) -> str:
    model, prefix = _GROUPS[group]
    naming = (f"Flat names are `{prefix}` + the field name (`{next(iter(_fields(group)))}`)"
              if prefix else "Flat names are the field names")
    where = (f"{naming}; in a config file also nested as `{group}: {{...}}`, "
             f"in code `settings.{group}` (`{model.__name__}`).")
    rows = [(f"`{name}`", _env_cell(name), _type(info.annotation),
             _default(info, secret=name in _SECRETS), info.description)
            for name, info in _fields(group).items()]
    header = ("setting", "environment variable", "type", "default", "description")
    return "\n\n".join([f"## {group} {{#{group}}}", _markdown(model.__doc__), where,
                        _table(header, rows)])


def _blocks_section() -> str:
    parts = ["## Blocks inside settings",
             ("Some settings hold a list of blocks, each a mapping (JSON objects in the "
              "environment) with the fields below.")]
    for model in nested_models():
        holders = [name for group in _GROUPS for name, info in _fields(group).items()
                   if model in models_in(info.annotation)]
        rows = [(f"`{field}`", _type(info.annotation), _default(info), info.description)
                for field, info in model.model_fields.items()]
        parts += [f"### {model.__name__} {{#{model.__name__.lower()}}}",
                  f"The blocks of {_names(holders)}. {_markdown(model.__doc__)}",
                  _table(("field", "type", "default", "description"), rows)]
    return "\n\n".join(parts)


def _fields(group: str) -> dict[str, FieldInfo]:
    """A group's fields by flat name."""
    model = _GROUPS[group][0]
    return {name: model.model_fields[field]
            for name, (owner, field) in FLAT_NAMES.items() if owner == group}


def _table(header: tuple[str, ...], rows: list[tuple[str | None, ...]]) -> str:
    return md_table(header, [[_markdown(cell) for cell in row] for row in rows])


def _env_cell(name: str) -> str:
    variable = f"`{ENV_PREFIX}{name.upper()}`"
    if name in _LIST_FIELDS:
        return variable + " (comma-separated)"
    return variable + " (JSON)" if name in _JSON_FIELDS else variable


def _type(annotation: Any) -> str:
    """A reader's name for a field's type: ``float``, ``str | None``, ``list of str``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is Literal:
        return "one of: " + ", ".join(str(arg) for arg in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_type(arg) for arg in sorted(args, key=lambda a: a is type(None)))
    if origin in (tuple, list) and (origin is list or args[1:] == (Ellipsis,)):
        return f"list of {_type(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(_type(arg) for arg in args) + "]"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if annotation is SecretStr:
        return "secret str"
    if annotation in nested_models():
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return "path" if annotation is Path else annotation.__name__


def _default(info: FieldInfo, *, secret: bool = False) -> str:
    """The default as JSON-like text (strings bare); ``unset`` for None and secrets."""
    value = info.get_default(call_default_factory=True)
    if secret or value is None:
        return "unset"
    data = TypeAdapter(info.annotation).dump_python(value, mode="json")
    return f"`{data if isinstance(data, str) else json.dumps(data)}`"


def _markdown(text: str | None) -> str:
    """A docstring as Markdown: Sphinx roles become code."""
    return _ROLE.sub(r"`\1`", inspect.cleandoc(text or "")).replace("``", "`")
