"""Internal-topic records for an assembler under test (no Kafka: a dict table)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Message:
    """What the assembler reads of a Faust event's message."""

    key: bytes
    value: bytes
    headers: list
    partition: int = 0
    offset: int = 0
    topic: str = "app-internal"
    timestamp: float = 1_700_000_000.0
