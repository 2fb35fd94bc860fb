"""A stand-in OpenAI-compatible batch server: files, batches, status changes, failures.

Real HTTP on a free loopback port (aiohttp; on the test's loop or from a
thread). Each status check of a batch moves it one step along
``validating → in_progress → finalizing → completed``; its answers are the
rule judge's (:func:`guardrail.local.rule_judge.rule_completion`), so a batch
run can be compared field for field with a synchronous run against
:class:`~guardrail.local.rule_judge.JudgeServer`::

    async with BatchServer(max_requests=50) as server:
        server.fail_lines[...] = "error"        # custom_id predicate → error-file line
        server.http_status_for = lambda cid, body: 500 if ... else None
        server.expire_next = 1                  # the next batch ends expired, half done
        server.fail_next = 1                    # the next batch fails validation
        server.fail_polls = 2                   # the next two status checks answer 503
        server.hold = True                      # batches stay in_progress until False,
        server.release_first = 1                # but for the first one created
        ...                                     # point judge_api_base at server.api_base
        server.creates, server.uploads, server.polls, server.downloads

:class:`StandInBatches` is what it shares with the Anthropic stand-in
(tests/support/anthropic_batch_server.py): ids, counters, held batches,
outages, the rule judge's answers and serving.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from guardrail.local.rule_judge import DEFAULT_TRIGGERS, ThreadServing, rule_answer, rule_completion
from guardrail.local.rule_logprobs import steer_answer

STEPS = ("validating", "in_progress", "finalizing", "completed")


class StandInBatches(ThreadServing):
    """The parts both stand-in batch servers share (see module doc)."""

    def __init__(self) -> None:
        self.host, self.port = "127.0.0.1", 0
        self.batches: dict[str, dict[str, Any]] = {}
        self._polls_of: dict[str, int] = {}
        self._ids = itertools.count(1)
        self.creates = self.polls = self.downloads = 0
        #: custom_id → an error line (its error message) instead of an answer.
        self.error_for: Callable[[str, dict], str | None] = lambda cid, body: None
        #: custom_id → raw answer content (garbage) instead of the rule judge's.
        self.content_for: Callable[[str, dict], str | None] = lambda cid, body: None
        self.expire_next = 0
        #: While on, batches stay in_progress (a run can be stopped mid-poll),
        #: except the first ``release_first`` created.
        self.hold = False
        self.release_first = 0
        #: The next status checks answer 503 (a provider's blip).
        self.fail_polls = 0
        self.created_sizes: list[int] = []
        self._created: list[str] = []

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def _take(self, name: str) -> bool:
        left = getattr(self, name)
        if left:
            setattr(self, name, left - 1)
        return bool(left)

    def _register(self, batch: dict[str, Any], size: int) -> None:
        self.creates += 1
        self.created_sizes.append(size)
        self.batches[batch["id"]] = batch
        self._created.append(batch["id"])
        self._polls_of[batch["id"]] = 0

    def _check(self, batch_id: str) -> tuple[dict[str, Any] | None, web.Response | None]:
        """A status check of a batch: (the batch, its poll counted) or an error answer."""
        batch = self.batches.get(batch_id)
        if batch is None:
            return None, _error(404, "no such batch")
        self.polls += 1
        if self.fail_polls:
            self.fail_polls -= 1
            return None, _error(503, "stand-in outage")
        self._polls_of[batch_id] += 1
        return batch, None

    def _held(self, batch_id: str) -> bool:
        return self.hold and batch_id not in self._created[:self.release_first]

    def _rule_content(self, cid: str, body: dict[str, Any]) -> str:
        """The answer text to a chat body: ``content_for``'s, else the rule judge's."""
        content = self.content_for(cid, body)
        if content is None:
            content = json.dumps(steer_answer(rule_answer(body, triggers=DEFAULT_TRIGGERS),
                                              body, {}))
        return content

    async def _serve(self, routes: list[web.RouteDef], middlewares: tuple = ()) -> Any:
        app = web.Application(client_max_size=300 * 1024 * 1024, middlewares=middlewares)
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self


class BatchServer(StandInBatches):
    def __init__(self, *, max_requests: int = 50_000, max_bytes: int = 200_000_000,
                 steps_per_status: int = 1) -> None:
        super().__init__()
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.steps_per_status = steps_per_status
        self.files: dict[str, bytes] = {}
        self.uploads = 0
        #: custom_id → an HTTP status other than 200 for its response line.
        self.http_status_for: Callable[[str, dict], int | None] = lambda cid, body: None
        self.fail_next = 0

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        if form.get("purpose") != "batch" or not hasattr(upload, "file"):
            return _error(400, "purpose 'batch' and a file are required")
        content = upload.file.read()  # type: ignore[union-attr]
        file_id = self._new_id("file")
        self.files[file_id] = content
        self.uploads += 1
        return web.json_response({"id": file_id, "object": "file", "bytes": len(content),
                                  "purpose": "batch", "filename": upload.filename})

    async def _content(self, request: web.Request) -> web.Response:
        content = self.files.get(request.match_info["file_id"])
        if content is None:
            return _error(404, "no such file")
        self.downloads += 1
        return web.Response(body=content, content_type="application/jsonl")

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        content = self.files.get(body.get("input_file_id"))
        if content is None:
            return _error(400, "input_file_id not found")
        lines = [orjson.loads(line) for line in content.splitlines() if line.strip()]
        if len(lines) > self.max_requests or len(content) > self.max_bytes:
            return _error(400, f"batch too large: {len(lines)} requests, {len(content)} bytes")
        if body.get("endpoint") != "/v1/chat/completions" or not body.get("completion_window"):
            return _error(400, "endpoint /v1/chat/completions and completion_window required")
        batch = {"id": self._new_id("batch"), "object": "batch", "status": "validating",
                 "input_file_id": body["input_file_id"], "endpoint": body["endpoint"],
                 "completion_window": body["completion_window"], "created_at": int(time.time()),
                 "output_file_id": None, "error_file_id": None, "metadata": body.get("metadata"),
                 "request_counts": {"total": len(lines), "completed": 0, "failed": 0}}
        batch["_end"] = ("failed" if self._take("fail_next")
                         else "expired" if self._take("expire_next") else "completed")
        self._register(batch, len(lines))
        return web.json_response(_public(batch))

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch, refused = self._check(request.match_info["batch_id"])
        if batch is None:
            return refused  # type: ignore[return-value]
        self._advance(batch, self._polls_of[batch["id"]] // self.steps_per_status)
        return web.json_response(_public(batch))

    async def _list(self, request: web.Request) -> web.Response:
        newest = sorted(self.batches.values(), key=lambda b: int(b["id"].split("-")[1]),
                        reverse=True)
        return web.json_response({"object": "list", "data": [_public(b) for b in newest],
                                  "has_more": False})

    def _advance(self, batch: dict[str, Any], step: int) -> None:
        if batch["status"] in ("completed", "failed", "expired", "cancelled"):
            return
        if batch["_end"] == "failed":
            batch["status"] = "failed"
            batch["errors"] = {"data": [{"code": "invalid_request", "message": "stand-in failure"}]}
            return
        status = STEPS[min(step, 1 if self._held(batch["id"]) else len(STEPS) - 1)]
        if status == "completed":
            self._finish(batch)
        else:
            batch["status"] = status

    def _finish(self, batch: dict[str, Any]) -> None:
        lines = [orjson.loads(line) for line in self.files[batch["input_file_id"]].splitlines()
                 if line.strip()]
        expired = batch["_end"] == "expired"
        done = lines[: len(lines) // 2] if expired else lines
        outputs, errors = [], []
        for line in done:
            (errors if "error" in (entry := self._answer(line)) and entry["error"]
             else outputs).append(entry)
        for line in lines[len(done):]:
            errors.append({"id": self._new_id("req"), "custom_id": line["custom_id"],
                           "response": None, "error": {"code": "batch_expired",
                                                       "message": "batch expired"}})
        batch["status"] = batch["_end"]
        batch["output_file_id"] = self._store(outputs)
        batch["error_file_id"] = self._store(errors)
        batch["request_counts"] = {"total": len(lines), "completed": len(outputs),
                                   "failed": len(errors)}

    def _answer(self, line: dict[str, Any]) -> dict[str, Any]:
        cid, body = line["custom_id"], line["body"]
        entry: dict[str, Any] = {"id": self._new_id("req"), "custom_id": cid, "error": None}
        message = self.error_for(cid, body)
        if message:
            entry.update(response=None, error={"code": "server_error", "message": message})
            return entry
        status = self.http_status_for(cid, body)
        if status:
            entry["response"] = {"status_code": status, "request_id": "x", "body": {
                "error": {"message": "stand-in error", "type": "server_error"}}}
            return entry
        content = self._rule_content(cid, body)
        entry["response"] = {"status_code": 200, "request_id": "x",
                             "body": rule_completion(body, content, p_unsafe={})}
        return entry

    def _store(self, lines: list[dict[str, Any]]) -> str | None:
        if not lines:
            return None
        file_id = self._new_id("file")
        self.files[file_id] = b"".join(orjson.dumps(x) + b"\n" for x in reversed(lines))
        return file_id

    async def start(self) -> BatchServer:
        return await self._serve([
            web.post("/v1/files", self._upload),
            web.get("/v1/files/{file_id}/content", self._content),
            web.post("/v1/batches", self._create),
            web.get("/v1/batches", self._list),
            web.get("/v1/batches/{batch_id}", self._retrieve)])


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}},
                             status=status)
