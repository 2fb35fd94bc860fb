"""Where things are in the checkout, for tests in any folder of ``tests/``::

    ROOT / "docs" / "index.md"
    SUPPORT / "dropping_worker.py"
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT", "SUPPORT"]

#: The repository's root (``tests/`` and ``guardrail/`` are below it).
ROOT = Path(__file__).resolve().parents[2]
#: ``tests/support``: the test helpers, some of them run as scripts.
SUPPORT = ROOT / "tests" / "support"
