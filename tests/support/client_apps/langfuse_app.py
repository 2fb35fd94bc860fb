"""An app traced with the Langfuse SDK (v3+: OpenTelemetry underneath): its OpenAI
drop-in for chat turns, ``propagate_attributes(session_id=…, user_id=…)`` for the
conversation, ``@observe(as_type="agent" / "tool")`` around an agent loop. Langfuse's
own exporter sends its OTLP requests to ``LANGFUSE_BASE_URL`` (a local sink).

Run in its own process (the drop-in patches the ``openai`` module for good)::

    python langfuse_app.py MODEL_URL PLAN_JSON     # LANGFUSE_* set by the caller
"""

from __future__ import annotations

import json
import sys

from agent_loop import run_loop
from langfuse import get_client, observe, propagate_attributes
from langfuse.openai import OpenAI


def main(model_url: str, plan: dict) -> None:
    client = OpenAI(base_url=model_url, api_key="sk-app-test", max_retries=0)
    langfuse = get_client()
    for turn in plan["turns"]:
        with propagate_attributes(session_id=turn["conversation"], user_id="user-7"):
            client.chat.completions.create(
                model=turn["model"], messages=[{"role": "user", "content": turn["user"]}])
        langfuse.flush()  # one export request per turn

    for run in plan["runs"]:
        tools = {name: observe(as_type="tool", name=name)(_returning(run["results"][name]))
                 for name in run["tools"]}

        @observe(as_type="agent", name="mail-assistant")
        def agent(user: str) -> str:
            return run_loop(client, run["model"], user, run["tools"],
                            lambda name, args: tools[name](**args))

        with propagate_attributes(session_id=run["conversation"], user_id="user-7"):
            agent(run["user"])
        langfuse.flush()
    langfuse.shutdown()


def _returning(result: str):
    def tool(**arguments: str) -> str:
        return result

    return tool


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
