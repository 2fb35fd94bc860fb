"""A test double of a newer release's worker: today's code, except that beside
every judgments record it also writes a record of a kind today's release does
not know (``probe``, schema version 2) to the judgments topic, as a newer
release might during a rolling upgrade (one beside every judgments record)::

    python tests/support/newer_worker.py worker --web-port 6067
"""

from __future__ import annotations

import sys

import orjson

from guardrail.stream.processing import MessageJudge, Outgoing


def _with_probes(original):  # type: ignore[no-untyped-def]
    def bundles(self, events):  # type: ignore[no-untyped-def]
        outgoing = original(self, events)
        probes = [Outgoing(o.topic, o.key, orjson.dumps({
            "kind": "probe", "schema_version": 2, "case_ids": [e.case_id for e in events],
            "note": "an event kind of a newer release"}), timestamp_ms=o.timestamp_ms)
            for o in outgoing]
        return outgoing + probes

    return bundles


if __name__ == "__main__":
    MessageJudge._bundles = _with_probes(MessageJudge._bundles)  # type: ignore[method-assign]
    from guardrail.cli import main

    sys.argv[0] = "guardrail"
    main(sys.argv[1:])
