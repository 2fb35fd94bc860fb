"""A stand-in Anthropic Messages API: Message Batches, and ``/v1/messages`` itself.

Real HTTP on a free loopback port (aiohttp; on the test's loop or from a
thread), sharing :class:`~tests.support.batch_server.StandInBatches` with the
OpenAI stand-in. A batch is ``in_progress`` at its first status check and
``ended`` at the next (unless held); its results file lists one line per
request in shuffled order. Answers are the rule judge's, as a text block, or
as a ``json_tool_call`` tool call when the request forces that tool, so a
batch run can be compared with a synchronous run (litellm) against
``/v1/messages`` here. Every request is checked as Anthropic would
(headers, ``custom_id``, a Messages body): what fails is kept in ``invalid``::

    async with AnthropicBatchServer(key="sk-ant-test") as server:
        server.result_for = lambda cid, params: "expired" if ... else None
        server.stall_create = "after"     # the next create: registered, its answer held
        server.hold = True                # batches stay in_progress (release_first: but those)
        server.fail_polls = 2             # the next two status checks answer 503
        ...                               # judge_api_base=server.api_base
        server.creates, server.polls, server.downloads, server.received, server.invalid
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from guardrail.local.rule_answers import message_text
from tests.support.batch_server import StandInBatches, _public

#: Anthropic's rule for a request's custom_id.
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
VERSION = "2023-06-01"
MAX_REQUESTS = 100_000
#: Top-level fields of a Messages request (any other is refused).
PARAMS = {"model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
          "stop_sequences", "metadata", "tools", "tool_choice", "output_format",
          "output_config", "thinking", "service_tier"}
#: Result types :attr:`result_for` may ask for instead of an answer.
OUTCOMES = {"errored", "canceled", "expired", "missing", "garbled"}


class AnthropicBatchServer(StandInBatches):
    def __init__(self, *, key: str | None = None, seed: int = 7) -> None:
        super().__init__()
        self.key = key
        self._shuffle = random.Random(seed).shuffle
        #: (custom_id, params) of every request of every batch created.
        self.received: list[tuple[str, dict[str, Any]]] = []
        #: Bodies posted to /v1/messages (the synchronous path).
        self.sync_bodies: list[dict[str, Any]] = []
        #: The anthropic-beta header of each create request ("" when absent).
        self.betas: list[str] = []
        #: What Anthropic would refuse, with why.
        self.invalid: list[str] = []
        #: custom_id, params → one of OUTCOMES instead of a succeeded answer.
        self.result_for = lambda cid, params: None
        #: "before": the next create waits, then fails unregistered; "after": it
        #: registers the batch, then waits (set ``release_create`` to answer).
        self.stall_create: str | None = None
        self.release_create = asyncio.Event()
        #: Where results_url points (None: this server).
        self.results_host: str | None = None
        #: The next status checks answer a JSON object that is not a batch.
        self.garble_polls = 0

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}"

    @web.middleware
    async def _headers(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every endpoint wants the key and the API version, as Anthropic's do."""
        if self.key is not None and request.headers.get("x-api-key") != self.key:
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        if request.headers.get("anthropic-version") != VERSION:
            return _anthropic_error(400, "invalid_request_error", "anthropic-version required")
        return await handler(request)

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        requests = body.get("requests") if isinstance(body, dict) else None
        problem = _batch_problem(requests)
        if problem:
            return _anthropic_error(400, "invalid_request_error", problem)
        beta = request.headers.get("anthropic-beta", "")
        stall, self.stall_create = self.stall_create, None
        if stall == "before":
            await self.release_create.wait()
            return _anthropic_error(503, "api_error", "stalled, never created")
        batch = self._new_batch(requests, beta)
        if stall == "after":
            await self.release_create.wait()
        return web.json_response(_public(batch))

    def _new_batch(self, requests: list[dict[str, Any]], beta: str) -> dict[str, Any]:
        self.betas.append(beta)
        for entry in requests:
            self.received.append((entry["custom_id"], entry["params"]))
            self.invalid += [f"{entry['custom_id']}: {p}"
                             for p in _params_problems(entry["params"], beta)]
        batch = {"id": f"msgbatch_{next(self._ids):04d}", "type": "message_batch",
                 "processing_status": "in_progress", "created_at": _now(),
                 "expires_at": _now(24 * 3600), "ended_at": None, "results_url": None,
                 "cancel_initiated_at": None, "archived_at": None,
                 "request_counts": {"processing": len(requests), "succeeded": 0,
                                    "errored": 0, "canceled": 0, "expired": 0},
                 "_requests": requests, "_expire": self._take("expire_next")}
        self._register(batch, len(requests))
        return batch

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch, refused = self._check(request.match_info["batch_id"])
        if batch is None:
            return refused  # type: ignore[return-value]
        if self._take("garble_polls"):
            return web.json_response({"type": "error", "note": "not a batch"})
        if (batch["processing_status"] == "in_progress" and self._polls_of[batch["id"]] >= 2
                and not self._held(batch["id"])):
            self._end(batch)
        return web.json_response(_public(batch))

    def _end(self, batch: dict[str, Any]) -> None:
        requests = batch["_requests"]
        # An expiring batch ran only its first half.
        ran = len(requests) // 2 if batch["_expire"] else len(requests)
        lines = [self._result(e["custom_id"], e["params"]) if i < ran else
                 {"custom_id": e["custom_id"], "result": {"type": "expired"}}
                 for i, e in enumerate(requests)]
        counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
        for line in lines:
            counts[line["result"]["type"] if line["result"] else "succeeded"] += 1
        lines = [x for x in lines if x["result"] is not None]  # "missing": no line at all
        self._shuffle(lines)
        batch["_results"] = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        batch["_results"] += b"{not json\n" if lines else b""  # a garbage line the client skips
        host = self.results_host or self.api_base
        batch.update(processing_status="ended", ended_at=_now(), request_counts=counts,
                     results_url=f"{host}/v1/messages/batches/{batch['id']}/results")

    def _result(self, cid: str, params: dict[str, Any]) -> dict[str, Any]:
        outcome = self.result_for(cid, params)
        if outcome == "errored" or (outcome is None and _params_problems(params, None)):
            error = {"type": "invalid_request_error", "message": "stand-in error"}
            return {"custom_id": cid, "result": {"type": "errored",
                                                  "error": {"type": "error", "error": error}}}
        if outcome in ("canceled", "expired"):
            return {"custom_id": cid, "result": {"type": outcome}}
        if outcome == "garbled":
            return {"custom_id": cid, "result": {"type": "succeeded", "message": {"id": "m"}}}
        if outcome == "missing":
            return {"custom_id": cid, "result": None}
        return {"custom_id": cid, "result": {"type": "succeeded",
                                              "message": self.message(cid, params)}}

    def message(self, cid: str, params: dict[str, Any]) -> dict[str, Any]:
        """The Messages answer to ``params``: the rule judge's verdict, as a
        forced ``json_tool_call`` when the request forces it, else as text."""
        chat = chat_body(params)
        content = self._rule_content(cid, chat)
        forced = (params.get("tool_choice") or {}).get("name") == "json_tool_call"
        try:
            tool_input = json.loads(content) if forced else None
        except ValueError:
            tool_input = None  # garbage is sent as text either way
        blocks = ([{"type": "tool_use", "id": f"toolu_{cid[-8:]}", "name": "json_tool_call",
                    "input": tool_input}] if isinstance(tool_input, dict)
                  else [{"type": "text", "text": content}])
        prompt = "".join(message_text(m) for m in chat["messages"])
        return {"id": f"msg_{cid[-12:]}", "type": "message", "role": "assistant",
                "model": params.get("model"), "content": blocks,
                "stop_reason": "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": max(1, len(prompt) // 4),
                          "output_tokens": max(1, len(content) // 4)}}

    async def _results(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["batch_id"])
        if batch is None or "_results" not in batch:
            return _anthropic_error(404, "not_found_error", "no results yet")
        self.downloads += 1
        return web.Response(body=batch["_results"], content_type="application/binary")

    async def _list(self, request: web.Request) -> web.Response:
        newest = [self.batches[i] for i in reversed(self._created)]
        after = request.query.get("after_id")
        if after:
            ids = [b["id"] for b in newest]
            newest = newest[ids.index(after) + 1:] if after in ids else []
        page = newest[:int(request.query.get("limit", "20"))]
        return web.json_response({
            "data": [_public(b) for b in page], "has_more": len(newest) > len(page),
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None})

    async def _messages(self, request: web.Request) -> web.Response:
        """The synchronous Messages API (what litellm's acompletion posts)."""
        params = await request.json()
        self.sync_bodies.append(params)
        problems = _params_problems(params, request.headers.get("anthropic-beta", ""))
        if problems:
            self.invalid += [f"sync: {p}" for p in problems]
            return _anthropic_error(400, "invalid_request_error", "; ".join(problems))
        return web.json_response(self.message(f"sync{len(self.sync_bodies):08d}", params))

    async def start(self) -> AnthropicBatchServer:
        return await self._serve(middlewares=[self._headers], routes=[
            web.post("/v1/messages", self._messages),
            web.post("/v1/messages/batches", self._create),
            web.get("/v1/messages/batches", self._list),
            web.get("/v1/messages/batches/{batch_id}", self._retrieve),
            web.get("/v1/messages/batches/{batch_id}/results", self._results)])


def chat_body(params: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the OpenAI chat body the rule judge reads: the
    system prompt as the first message, the answer schema as response_format."""
    system = params.get("system")
    text = system if isinstance(system, str) else "".join(
        b.get("text", "") for b in system or () if isinstance(b, dict))
    messages = [{"role": "system", "content": text}] if text else []
    messages += [{"role": m.get("role"), "content": message_text(m)}
                 for m in params.get("messages") or () if isinstance(m, dict)]
    schema = (params.get("output_format") or {}).get("schema") or next(
        (t.get("input_schema") for t in params.get("tools") or ()
         if t.get("name") == "json_tool_call"), None)
    chat: dict[str, Any] = {"model": params.get("model"), "messages": messages}
    if schema:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"schema": schema}}
    return chat


def _batch_problem(requests: Any) -> str | None:
    """What Anthropic refuses a whole create request for."""
    if not isinstance(requests, list) or not requests:
        return "requests: a non-empty list is required"
    if len(requests) > MAX_REQUESTS:
        return f"requests: at most {MAX_REQUESTS}"
    ids = [r.get("custom_id") if isinstance(r, dict) else None for r in requests]
    bad = [i for i in ids if not isinstance(i, str) or not CUSTOM_ID.match(i)]
    if bad:
        return f"custom_id must match {CUSTOM_ID.pattern}: {bad[:3]}"
    if len(set(ids)) != len(ids):
        return "custom_id values must be unique within a batch"
    if any(set(r) != {"custom_id", "params"} or not isinstance(r["params"], dict)
           for r in requests):
        return "each request is {custom_id, params}"
    return None


def _params_problems(params: dict[str, Any], beta: str | None) -> list[str]:
    """Why Anthropic would refuse a Messages request (``beta``: the create's
    anthropic-beta header; None: not checked)."""
    problems = [f"unknown field {k}" for k in sorted(set(params) - PARAMS)]
    if not isinstance(params.get("model"), str):
        problems.append("model is required")
    if not isinstance(params.get("max_tokens"), int) or params["max_tokens"] < 1:
        problems.append("max_tokens is required")
    messages = params.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and m.get("role") in ("user", "assistant") for m in messages):
        problems.append("messages: user and assistant turns only (system is top-level)")
    elif messages[0].get("role") != "user":
        problems.append("messages: the first turn is the user's")
    system = params.get("system")
    if system is not None and not isinstance(system, str) and not (
            isinstance(system, list) and all(b.get("type") == "text" for b in system)):
        problems.append("system: a string or text blocks")
    if beta is not None and "output_format" in params and "structured-outputs" not in beta:
        problems.append("output_format needs the structured-outputs beta")
    return problems


def _now(later: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() + later, UTC).isoformat().replace(
        "+00:00", "Z")


def _anthropic_error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": kind, "message": message}},
                             status=status)
