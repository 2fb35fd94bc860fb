"""The ``mapping`` input format: any JSON event, case fields picked by JMESPath.

The mapping names, for each case field, the JMESPath expression
(https://jmespath.org) that finds it in an event::

    decoder = MappingDecoder({"output": "event.llm.response.text",
                              "input": "event.user.prompt",
                              "metadata.model_version": "tags.ver"})
    decoder.decode_json({"event": {"llm": {"response": {"text": "Hi"}},
                                   "user": {"prompt": "Hello?"}}, "tags": {"ver": "v2"}}).cases
    # [{"output": "Hi", "input": "Hello?", "metadata": {"model_version": "v2"}}]

Case fields: ``case_id``, ``output``, ``input``, ``context``, ``reference``,
``messages``, ``trajectory``, ``timestamp``, ``conversation_id`` and
``metadata.<label>``; ``output`` or ``messages`` must be mapped. Every
expression is compiled when the decoder is built: a bad one, an unknown
function or an unknown field raises :class:`~guardrail.errors.ConfigError`
(one line naming the field).

In a record, a mapped field whose expression finds nothing (or null) sends the
record to the DLQ naming the field, and so does a value of the wrong type:
``output``, ``input`` and ``reference`` must be strings, ``context`` a string
or an array of strings, ``messages`` an array; ``case_id`` and labels may be
strings, numbers or booleans (written as text); ``timestamp`` a number or an
ISO-8601 string. ``conversation_id`` (the conversation the event is a turn of)
is the one field that may find nothing: the event is then judged as a turn of
no conversation; found, it must be a string or a number (checked further as
:func:`guardrail.formats.case.conversation_id` says)::

    MappingDecoder({"output": "reply.text", "conversation_id": "chat.thread"})

The mapping comes from ``input_mapping`` in a config file or the JSON text of
``GUARDRAIL_INPUT_MAPPING``; :func:`parse_mapping` reads either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jmespath
import orjson
from jmespath import exceptions as jmes_errors
from jmespath.functions import Functions
from jmespath.parser import ParsedResult

from ..errors import ConfigError
from .base import Decoded, Headers, UndecodableRecord, json_type, load_json

__all__ = ["MappingDecoder", "parse_mapping", "CASE_FIELDS", "METADATA_PREFIX"]

#: Case fields an expression can fill (besides ``metadata.<label>``).
CASE_FIELDS = ("case_id", "output", "input", "context", "reference", "messages", "trajectory",
               "timestamp", "conversation_id")
#: Fields whose expression may find nothing: a turn without a conversation is
#: still a turn to judge, not a record to send to the DLQ.
_OPTIONAL = frozenset({"conversation_id"})
METADATA_PREFIX = "metadata."
_ALLOWED = ", ".join(CASE_FIELDS) + ", metadata.<label>"


def _config_error(reason: str) -> ConfigError:
    # One line, whatever the parser's message held: the CLI prints it as is.
    return ConfigError("input_mapping: " + " ".join(reason.split()))


def _parse_problem(exc: jmes_errors.JMESPathError) -> str:
    """One line for a JMESPath compile error (its own message has three)."""
    if isinstance(exc, jmes_errors.IncompleteExpressionError):
        return f"incomplete expression at column {exc.lex_position}"
    if isinstance(exc, jmes_errors.LexerError):
        return f"{exc.message} at column {exc.lexer_position}"
    if isinstance(exc, jmes_errors.ParseError):
        return f"{exc.msg} at column {exc.lex_position}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _function_problems(node: Any) -> list[str]:
    """Calls to functions JMESPath does not have, or with the wrong number of
    arguments: they would otherwise fail only when a record is searched."""
    if not isinstance(node, dict):
        return []
    problems = []
    if node.get("type") == "function_expression":
        name, given = node.get("value"), len(node.get("children", ()))
        signature = Functions.FUNCTION_TABLE.get(name, {}).get("signature")
        if signature is None:
            problems.append(f"calls unknown function {name}()")
        elif signature and signature[-1].get("variadic") and given < len(signature):
            problems.append(f"calls {name}() with {given} arguments, "
                            f"it takes at least {len(signature)}")
        elif not (signature and signature[-1].get("variadic")) and given != len(signature):
            problems.append(f"calls {name}() with {given} arguments, it takes {len(signature)}")
    for child in node.get("children", ()):
        problems.extend(_function_problems(child))
    return problems


def _compile(field: str, expression: Any) -> ParsedResult:
    if not isinstance(expression, str):
        raise _config_error(f"{field}: the expression must be a string, "
                            f"got {json_type(expression)}")
    if not expression.strip():
        raise _config_error(f"{field}: the expression is empty")
    try:
        compiled = jmespath.compile(expression)
    except jmes_errors.JMESPathError as exc:
        raise _config_error(f"{field}: expression {expression!r} is not valid JMESPath: "
                            f"{_parse_problem(exc)}") from None
    problems = _function_problems(compiled.parsed)
    if problems:
        raise _config_error(f"{field}: expression {expression!r} {problems[0]}")
    return compiled


def _check_field(field: Any) -> str:
    if not isinstance(field, str):
        raise _config_error(f"case field names must be strings, got {json_type(field)}")
    if field.startswith(METADATA_PREFIX):
        if not field[len(METADATA_PREFIX):].strip():
            raise _config_error(f"{field!r} names no label (metadata.<label>)")
    elif field not in CASE_FIELDS:
        raise _config_error(f"{field!r} is not a case field (allowed: {_ALLOWED})")
    return field


def parse_mapping(value: str | Mapping[str, Any]) -> dict[str, str]:
    """A checked mapping from the JSON text of ``GUARDRAIL_INPUT_MAPPING`` or
    the ``input_mapping`` object of a config file; raises a one-line
    :class:`ConfigError` naming what is wrong."""
    if isinstance(value, (str, bytes)):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise _config_error(f"not valid JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise _config_error("must be an object of case field -> JMESPath expression, "
                            f"got {json_type(value)}")
    mapping = {_check_field(field): expression for field, expression in value.items()}
    if "output" not in mapping and "messages" not in mapping:
        raise _config_error("map output or messages (the text to judge); mapped: "
                            f"{', '.join(mapping) or 'nothing'}")
    for field, expression in mapping.items():
        _compile(field, expression)
    return mapping


def _scalar_text(value: Any) -> str | None:
    """Strings as they are, numbers and booleans as JSON writes them."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return orjson.dumps(value).decode()
    return None


def _convert(field: str, value: Any) -> Any:
    """The value as the case schema wants it, or None when it has the wrong type."""
    if field in ("output", "input", "reference"):
        return value if isinstance(value, str) else None
    if field == "context":
        ok = isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value))
        return value if ok else None
    if field == "messages":
        return value if isinstance(value, list) else None
    if field in ("timestamp", "conversation_id"):
        ok = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        return value if ok else None
    return _scalar_text(value)  # case_id and metadata labels


_WANTED = {"output": "a string", "input": "a string", "reference": "a string",
           "context": "a string or an array of strings", "messages": "an array of messages",
           "timestamp": "a number or an ISO-8601 string",
           "conversation_id": "a string or a number"}


class MappingDecoder:
    """Any JSON event, one case per record, fields found by JMESPath."""

    name = "mapping"
    many_per_record = False

    def __init__(self, mapping: Mapping[str, Any] | str) -> None:
        self.mapping = parse_mapping(mapping)
        self._compiled = {field: _compile(field, expression)
                          for field, expression in self.mapping.items()}

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        try:
            record = load_json(raw)
        except UndecodableRecord as exc:
            raise UndecodableRecord(f"mapping: {exc}") from None
        return self.decode_json(record)

    def decode_json(self, record: Any) -> Decoded:
        case: dict[str, Any] = {}
        for field, compiled in self._compiled.items():
            value = self._find(field, compiled, record)
            if value is None:  # an optional field that found nothing
                continue
            if field.startswith(METADATA_PREFIX):
                case.setdefault("metadata", {})[field[len(METADATA_PREFIX):]] = value
            else:
                case[field] = value
        return Decoded(cases=[case])

    def _find(self, field: str, compiled: ParsedResult, record: Any) -> Any:
        where = f"mapping: {field} (expression {self.mapping[field]!r})"
        try:
            found = compiled.search(record)
        except jmes_errors.JMESPathError as exc:  # e.g. a function given the wrong type
            raise UndecodableRecord(f"{where} failed: {str(exc).splitlines()[0]}") from None
        if found is None:
            if field in _OPTIONAL:
                return None
            raise UndecodableRecord(f"{where} found nothing")
        value = _convert(field, found)
        if value is None:
            wanted = _WANTED.get(field, "a string, number or boolean")
            raise UndecodableRecord(f"{where} found {json_type(found)}, not {wanted}")
        return value
