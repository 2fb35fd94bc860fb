"""An app traced with MLflow Tracing: ``mlflow.openai.autolog()`` over the OpenAI
client, each turn inside an ``@mlflow.trace`` function whose span carries the conversation
as ``session.id`` (what MLflow's own server reads from OTLP spans: its OTLP export
leaves trace metadata such as ``mlflow.trace.session`` behind, and in mlflow-tracing
3.17 a trace with tags loses its root span on export), ``span_type="AGENT"`` /
``"TOOL"`` around an agent loop. MLflow exports OTLP to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (a sink)::

    python mlflow_app.py MODEL_URL PLAN_JSON
"""

from __future__ import annotations

import json
import sys

import mlflow
import openai
from agent_loop import run_loop


def main(model_url: str, plan: dict) -> None:
    mlflow.openai.autolog()
    client = openai.OpenAI(base_url=model_url, api_key="sk-app-test", max_retries=0)

    @mlflow.trace(name="chat_turn")
    def chat_turn(turn: dict) -> str:
        mlflow.get_current_active_span().set_attribute("session.id", turn["conversation"])
        return client.chat.completions.create(
            model=turn["model"],
            messages=[{"role": "user", "content": turn["user"]}]).choices[0].message.content

    def call_tool(name: str, arguments: dict, results: dict) -> str:
        with mlflow.start_span(name=name, span_type="TOOL") as span:
            span.set_inputs(arguments)
            span.set_outputs(results[name])
        return results[name]

    for turn in plan["turns"]:
        chat_turn(turn)
    for run in plan["runs"]:
        @mlflow.trace(name="mail-assistant", span_type="AGENT")
        def agent(question: str) -> str:
            mlflow.get_current_active_span().set_attribute("session.id", run["conversation"])
            return run_loop(client, run["model"], question, run["tools"],
                            lambda name, args: call_tool(name, args, run["results"]))

        agent(run["user"])

    # MLflow's batch span processor exports what is left when the process exits.


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]))
