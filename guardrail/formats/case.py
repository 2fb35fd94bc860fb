"""The ``case`` input format: guardrail's own case JSON, one case per record::

    CaseDecoder().decode(b'{"case_id": "c1", "output": "Hello"}', {}).cases
    # [{'case_id': 'c1', 'output': 'Hello'}]

A case names the conversation it is a turn of with ``conversation_id`` (else
``metadata.conversation_id``); every format puts the id it finds there, and
:func:`conversation_id` reads it::

    conversation_id({"output": "Hi", "conversation_id": " chat-7 "})          # 'chat-7'
    conversation_id({"output": "Hi", "metadata": {"conversation_id": 42}})    # '42'
    conversation_id({"output": "Hi"})                                         # None
    conversation_id({"output": "Hi", "conversation_id": ["a"]})   # ValueError naming the field
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Decoded, Headers, UndecodableRecord, json_type, load_json

__all__ = ["CaseDecoder", "conversation_id", "conversation_id_text", "MAX_CONVERSATION_ID"]

#: Longest conversation id, in characters: ids are UUIDs, ULIDs, thread names;
#: anything longer is a payload put in the wrong field.
MAX_CONVERSATION_ID = 200


class CaseDecoder:
    """A JSON object in the case schema is the case (validated downstream)."""

    name = "case"
    many_per_record = False

    def decode(self, raw: bytes, headers: Headers) -> Decoded:
        return self.decode_json(load_json(raw))

    def decode_json(self, record: Any) -> Decoded:
        if not isinstance(record, dict):
            raise UndecodableRecord(f"value must be a JSON object, got {type(record).__name__}")
        return Decoded(cases=[record])


def conversation_id_text(value: Any) -> str | None:
    """A conversation id as text, trimmed: strings and numbers (written as text);
    None for anything else or an empty id. Formats use it to pick the first usable
    id of several candidates; its length is checked by :func:`conversation_id`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    return value.strip() or None


def conversation_id(data: Mapping[str, Any]) -> str | None:
    """The conversation id of a case dict: ``conversation_id``, else
    ``metadata.conversation_id``; None when neither is there (or null). A value that
    is no id (an object, an array, a boolean, empty, over :data:`MAX_CONVERSATION_ID`
    characters) raises ValueError naming the field: it is a producer's mistake to
    fix, not a turn to judge as if it had no conversation."""
    field, value = "conversation_id", data.get("conversation_id")
    metadata = data.get("metadata")
    if value is None and isinstance(metadata, Mapping):
        field, value = "metadata.conversation_id", metadata.get("conversation_id")
    if value is None:
        return None
    text = conversation_id_text(value)
    if text is None:
        wanted = "a non-empty string or a number"
        raise ValueError(f"{field} must be {wanted}, got "
                         f"{'an empty string' if isinstance(value, str) else json_type(value)}")
    if len(text) > MAX_CONVERSATION_ID:
        raise ValueError(f"{field} is {len(text)} characters, over the limit of "
                         f"{MAX_CONVERSATION_ID}")
    return text
