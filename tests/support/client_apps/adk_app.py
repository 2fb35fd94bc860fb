"""An app built with Google ADK, its model through LiteLLM at an OpenAI-compatible
server: one ADK session per conversation (ADK keeps the history), a function tool
per tool of the plan. ADK traces through the global tracer provider, here one whose
OTLP/HTTP exporter sends each span to a sink. Runs in the isolated environment
``.ci/run`` makes for ADK (it pins an older OpenTelemetry than the dev one)::

    ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 .venv-adk/bin/python adk_app.py SINK MODEL_URL PLAN
"""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def _tool(name: str, arguments: dict, results: dict):
    """A function tool named ``name`` with one string parameter per argument."""
    params = ", ".join(f"{key}: str" for key in arguments)
    scope: dict = {"results": results}
    exec(f"def {name}({params}) -> str:\n    '''{name}.'''\n    return results[{name!r}]",
         scope)
    return scope[name]


async def _play(model_url: str, plan: dict) -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    sessions = InMemorySessionService()
    for item in [*plan["turns"], *plan["runs"]]:
        tools = [_tool(n, a, item.get("results", {})) for n, a in item.get("tools", {}).items()]
        agent = LlmAgent(name="assistant", instruction="You are a helpful assistant.",
                         model=LiteLlm(model="openai/" + item["model"], api_base=model_url,
                                       api_key="sk-app-test"), tools=tools)
        runner = Runner(agent=agent, app_name="adk-app", session_service=sessions)
        key = {"app_name": "adk-app", "user_id": "user-7", "session_id": item["conversation"]}
        if await sessions.get_session(**key) is None:
            await sessions.create_session(**key)
        message = types.Content(role="user", parts=[types.Part(text=item["user"])])
        async for _ in runner.run_async(user_id="user-7", session_id=item["conversation"],
                                        new_message=message):
            pass


def main(sink: str, model_url: str, plan: dict) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": plan["service"],
                                                        "service.version": plan["version"]}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sink)))
    trace.set_tracer_provider(provider)
    asyncio.run(_play(model_url, plan))
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
