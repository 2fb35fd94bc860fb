"""A test double of a worker whose agents lose records on their way, as
Faust's drain and stream do now and then when the flow stops or resumes:
today's code, except that the first delivery of the chosen records never
reaches the agent (no processing, no ack). The consumer must notice and read
each again, *after* the records behind it were done::

    DROP_FIRST_DELIVERY="in-1234:*:3,judg-1234:*:1" \\
        python tests/support/dropping_worker.py worker --web-port 6067

Each item is ``topic:partition:offset`` (``*``: every partition). Each
dropped record is logged as ``test double: dropped ...``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

log = logging.getLogger("guardrail.test_double")


def _chosen(spec: str) -> set[tuple[str, str, int]]:
    chosen = set()
    for item in filter(None, spec.split(",")):
        topic, partition, offset = item.rsplit(":", 2)
        chosen.add((topic, partition, int(offset)))
    return chosen


def _dropping(original: Any, chosen: set[tuple[str, str, int]]) -> Any:
    dropped: set[tuple[str, int, int]] = set()

    def drop(event: Any) -> bool:
        m = event.message
        where = (m.topic, m.partition, m.offset)
        if where in dropped or not ({(m.topic, str(m.partition), m.offset),
                                     (m.topic, "*", m.offset)} & chosen):
            return False
        dropped.add(where)
        log.warning("test double: dropped %s[%d] offset %d on its way to the agent", *where)
        return True

    async def noack_take(self: Any, max_: int, within: Any) -> Any:
        async for batch in original(self, max_, within):
            lost = [event for event in batch if drop(event)]
            # Untracked, as if it never reached a stream (else a stop waits for it).
            self.app.consumer.forget(event.message for event in lost)
            kept = [event for event in batch if event not in lost]
            if kept:
                yield kept

    return noack_take


if __name__ == "__main__":
    from faust.streams import Stream

    Stream.noack_take = _dropping(Stream.noack_take,  # type: ignore[method-assign]
                                  _chosen(os.environ.get("DROP_FIRST_DELIVERY", "")))
    from guardrail.cli import main

    sys.argv[0] = "guardrail"
    main(sys.argv[1:])
