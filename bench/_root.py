"""Puts the repository root first on ``sys.path``, for scripts run as files.

``python bench/worker/ceiling.py`` puts only the script's own folder on the
path, so each script's first import is ``import _root``: this module, found
through the link to it that every script folder holds. With the root first,
``bench.*`` and ``tests.support.*`` import, and ``guardrail`` is this
checkout's even where the environment has another copy installed.
"""

import sys
from pathlib import Path

#: resolve(): a group folder's ``_root.py`` is a link to this file.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
