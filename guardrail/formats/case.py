"""The ``case`` input format: guardrail's own case JSON, one case per record::

    CaseDecoder().decode(b'{"case_id": "c1", "output": "Hello"}', {}).cases
    # [{'case_id': 'c1', 'output': 'Hello'}]
"""

from __future__ import annotations

from typing import Any

from .base import Decoded, Headers, UndecodableRecord, load_json

__all__ = ["CaseDecoder"]


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
