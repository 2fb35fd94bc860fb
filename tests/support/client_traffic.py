"""Traffic written by the tracing clients teams already use, each in its own process:
Langfuse (Python SDK, its OpenAI drop-in), MLflow Tracing (``mlflow.openai.autolog``),
the Vercel AI SDK (Node, under the OpenTelemetry Node SDK) and Google ADK (its model
through LiteLLM; an isolated environment, ADK pins an older OpenTelemetry). Each
client's own OTLP/HTTP exporter posts to a local :class:`OtlpSink`; every request it
sent is one Kafka record, as a Collector fanning them out to Kafka would forward them::

    with ScriptedModel() as model:
        traffic = client_traffic("langfuse", model, {"chat-1": SMALL_TALK},
                                 runs={"run-1": SCENARIOS["benign"]})
    traffic.records          # list[bytes]: ExportTraceServiceRequest, as the client sent them
    traffic.turns            # [("chat-1", "What's a good name for a cat?", "Miso …"), …]

The apps are in ``client_apps/``; :func:`missing` says why a client cannot run here
(``.ci/run`` installs the Node packages and the ADK environment; without them the
tests that need them skip and say so). Nothing reaches a real provider: the apps'
model is the :class:`~support.agent_traffic.ScriptedModel` on loopback.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from .agent_traffic import LoopbackServer, Scenario, ScriptedModel

__all__ = ["CLIENTS", "OtlpSink", "ClientTraffic", "client_traffic", "missing", "APPS",
           "ADK_PYTHON"]

CLIENTS = ("langfuse", "mlflow", "vercel_ai", "google_adk")
APPS = Path(__file__).parent / "client_apps"
ROOT = Path(__file__).resolve().parents[2]
#: The isolated environment ``.ci/run`` makes for Google ADK (GUARDRAIL_ADK_PYTHON overrides).
ADK_PYTHON = Path(os.environ.get("GUARDRAIL_ADK_PYTHON", ROOT / ".venv-adk" / "bin" / "python"))
_TIMEOUT = 180


class OtlpSink(LoopbackServer):
    """An OTLP/HTTP receiver on loopback keeping each export request's body
    (protobuf; gzip and chunked bodies as the Node exporter sends them)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self._body()
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                sink.bodies.append(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def _body(self) -> bytes:
                if self.headers.get("transfer-encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("content-length", 0)))
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)


@dataclass
class ClientTraffic:
    client: str
    records: list[bytes]
    #: ``(conversation id, user message, answer)`` of each chat turn, in the order made.
    turns: list[tuple[str, str, str]] = field(default_factory=list)
    #: ``(conversation id, scenario)`` of each agent run.
    runs: list[tuple[str, Scenario]] = field(default_factory=list)


def missing(client: str) -> str | None:
    """Why ``client``'s app cannot run here; None when it can."""
    if client == "vercel_ai":
        if shutil.which("node") is None:
            return "node is not installed (the Vercel AI SDK app runs on Node)"
        if not (APPS / "node_modules" / "ai").is_dir():
            return (f"the Vercel AI SDK app's packages are not installed: "
                    f"npm ci --prefix {APPS} (as .ci/run does)")
    if client == "google_adk" and not ADK_PYTHON.exists():
        return (f"no Google ADK environment at {ADK_PYTHON}: .ci/run makes it "
                "(google-adk pins an older OpenTelemetry than the dev environment)")
    if client in ("langfuse", "mlflow"):
        module = {"langfuse": "langfuse", "mlflow": "mlflow"}[client]
        import importlib.util

        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (the dev extra installs it)"
    return None


def client_traffic(client: str, model: ScriptedModel,
                   scripts: Mapping[str, Sequence[tuple[str, str]]], *,
                   runs: Mapping[str, Scenario] | None = None, service: str = "chat-app",
                   version: str = "v1") -> ClientTraffic:
    """Play every conversation of ``scripts`` (interleaved, a turn per trace, only the
    new user message sent) and then each agent run of ``runs`` (conversation id →
    scenario) with ``client``'s app against ``model``; the client's export requests."""
    reason = missing(client)
    if reason is not None:
        raise RuntimeError(f"{client}: {reason}")
    traffic = ClientTraffic(client, [])
    plan: dict[str, Any] = {"service": service, "version": version, "turns": [], "runs": []}
    for index in range(max(map(len, scripts.values()), default=0)):
        for conversation, script in scripts.items():
            if index < len(script):
                user, answer = script[index]
                name = model.register(Scenario(f"{conversation}-{index}", user, (), answer))
                plan["turns"].append({"conversation": conversation, "user": user, "model": name})
                traffic.turns.append((conversation, user, answer))
    for conversation, scenario in (runs or {}).items():
        plan["runs"].append({
            "conversation": conversation, "user": scenario.request,
            "model": model.register(scenario),
            "tools": {s.tool: {k: str(v) for k, v in s.arguments.items()} for s in scenario.steps},
            "results": {s.tool: s.result for s in scenario.steps}})
        traffic.runs.append((conversation, scenario))
    with OtlpSink() as sink:
        _run_app(client, sink, model.url, plan, service, version)
    traffic.records = list(sink.bodies)
    return traffic


def _run_app(client: str, sink: OtlpSink, model_url: str, plan: dict[str, Any], service: str,
             version: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LANGFUSE_"))}
    env["PYTHONPATH"] = str(APPS)
    traces = f"{sink.url}/v1/traces"
    plan_json = json.dumps(plan)
    if client == "langfuse":
        env.update(LANGFUSE_PUBLIC_KEY="pk-lf-test", LANGFUSE_SECRET_KEY="sk-lf-test",
                   LANGFUSE_BASE_URL=sink.url, LANGFUSE_RELEASE=version,
                   LANGFUSE_TRACING_ENVIRONMENT="test", OTEL_SERVICE_NAME=service)
        command = [sys.executable, str(APPS / "langfuse_app.py"), model_url, plan_json]
    elif client == "mlflow":
        env.update(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=traces, OTEL_SERVICE_NAME=service,
                   OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
                   OTEL_RESOURCE_ATTRIBUTES=f"service.version={version}")
        command = [sys.executable, str(APPS / "mlflow_app.py"), model_url, plan_json]
    elif client == "vercel_ai":
        command = ["node", str(APPS / "vercel_app.mjs"), traces, model_url, plan_json]
    elif client == "google_adk":
        # Schema 1: the legacy call_llm spans every ADK 1.x writes (content on by default).
        env.update(ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
        command = [str(ADK_PYTHON), str(APPS / "adk_app.py"), traces, model_url, plan_json]
    else:
        raise ValueError(f"unknown client {client!r} (known: {CLIENTS})")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=_TIMEOUT,
                          cwd=APPS)
    if done.returncode != 0:
        raise RuntimeError(f"{client} app failed ({done.returncode}): {done.stderr[-3000:]}")
