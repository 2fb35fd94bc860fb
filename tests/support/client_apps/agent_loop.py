"""The agent loop the Python client apps share: the OpenAI client asks the model,
runs each tool call it asks for (through ``tool``, a function the tracing client
wraps) and sends the results back, until the model answers in text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_STEPS = 6


def tool_schema(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool whose parameters are the example's keys, as strings."""
    properties = {key: {"type": "string"} for key in arguments}
    return {"type": "function", "function": {"name": name, "description": name,
            "parameters": {"type": "object", "properties": properties,
                           "required": list(properties)}}}


def run_loop(client: Any, model: str, user: str, tools: dict[str, dict[str, Any]],
             call_tool: Callable[[str, dict[str, Any]], str]) -> str:
    """Ask ``user`` of ``model`` with ``tools`` (name → example arguments)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    schemas = [tool_schema(name, example) for name, example in tools.items()]
    for _ in range(MAX_STEPS):
        message = client.chat.completions.create(model=model, messages=messages,
                                                 tools=schemas).choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]})
        for call in message.tool_calls:
            result = call_tool(call.function.name, json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError(f"{model}: no answer after {MAX_STEPS} steps")
