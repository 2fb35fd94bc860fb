"""``guardrail calibrate`` as a user runs it: a subprocess against a stand-in judge,
with no ``GUARDRAIL_*`` setting of the test run leaking in::

    proc = run_calibrate(["--labels", "l.jsonl", "--json"], server, tmp_path)
    json.loads(proc.stdout)["metrics"]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def run_calibrate(args: list[str], server: Any, cwd: Path,
                  api_key: str = "sk-calibrate-secret") -> subprocess.CompletedProcess[str]:
    """Run ``guardrail calibrate ARGS`` in ``cwd`` against ``server`` (a rule judge)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDRAIL_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
                "GUARDRAIL_JUDGE_MODEL": "openai/test-judge",
                "GUARDRAIL_JUDGE_API_BASE": server.api_base,
                "GUARDRAIL_JUDGE_API_KEY": api_key,
                # No network fetch of litellm's price list: unknown prices stay unknown.
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return subprocess.run(["guardrail", "calibrate", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
