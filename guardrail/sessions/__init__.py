"""Conversations judged as a whole: turns (and agent runs) that carry one
conversation id gathered into a session, judged while it goes on and when it
ends. Pure logic, no Kafka (the Faust wiring is in :mod:`guardrail.agents`).

- :mod:`.settings`: the ``sessions`` settings group.
"""

from __future__ import annotations

__all__: list[str] = []
