"""Deprecated alias of :mod:`guardrail.local.rule_judge`, kept for one release.

``python -m guardrail.testing.judge_server`` and imports from here keep
working (docker compose files and user scripts name this path); new code
should use ``guardrail.local.rule_judge`` / ``python -m guardrail.local.rule_judge``.
"""

from ..local.rule_judge import *  # noqa: F401,F403
from ..local.rule_judge import (
    __all__,  # noqa: F401
    main,
)

if __name__ == "__main__":
    raise SystemExit(main())
