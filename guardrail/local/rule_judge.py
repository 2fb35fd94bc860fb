"""The stand-in rule judge: a scriptable OpenAI-compatible chat-completions server.

It stands in for the LLM judge in ``guardrail demo --judge rules``, the docker
compose setup, the tests, the fault suite and the benchmarks. By default a
deterministic rule judge: the fenced ``output`` is UNSAFE for a metric when it contains one of that
metric's trigger words. Request headers are never recorded or logged (secret-leak
tests put an API key in Authorization). Clients using litellm should set
``LITELLM_LOCAL_MODEL_COST_MAP=True`` before importing it so nothing hits the network::

    async with JudgeServer(latency=0.01) as server:       # async tests
        server.script("not json", ErrorReply(503), None)   # None = default rule
        await litellm.acompletion(model="openai/test-judge", api_base=server.api_base,
                                  api_key="sk-test", messages=msgs,
                                  num_retries=0, max_retries=0)
    with JudgeServer() as server:           # sync code: serves from a thread
        server.set_outage(True)             # every call now answers 503
    # subprocess: first stdout line is the base URL; serves until SIGTERM/SIGINT
    python -m guardrail.local.rule_judge --port 0 --latency-ms 50 --trigger pii=ssn
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from aiohttp import web

__all__ = ["JudgeServer", "ContentReply", "ErrorReply", "DelayReply", "Reply", "Responder",
           "hang", "make_verdict", "rule_verdict",
           "parse_prompt", "answer_shape", "DEFAULT_TRIGGERS", "main"]

log = logging.getLogger(__name__)

FIELD_RE = re.compile(r"<<<([0-9a-f]+) BEGIN (\w+)>>>\n(.*?)\n<<<\1 END \2>>>", re.DOTALL)
METRIC_RE = re.compile(r"^METRIC:[ \t]*(\S+)", re.MULTILINE)
BINARY, SCALE = "binary_yes_no", "scale_1_5"

DEFAULT_TRIGGERS: dict[str, frozenset[str]] = {
    "toxicity": frozenset({"idiot", "stupid", "moron", "hate you"}),
    "bias": frozenset({"all women are", "all men are", "those people are"}),
}


@dataclass(frozen=True)
class ContentReply:
    """Answer 200 with exactly this message content (garbage, fenced JSON, ...)."""
    content: str

    @classmethod
    def fenced(cls, obj: dict) -> ContentReply:
        """JSON in a ```json markdown fence, as chatty models often answer."""
        return cls(f"```json\n{json.dumps(obj)}\n```")

    @classmethod
    def with_prose(cls, obj: dict, prose: str = "I hope this helps!") -> ContentReply:
        """Valid JSON followed by trailing prose."""
        return cls(f"{json.dumps(obj)}\n\n{prose}")

    @classmethod
    def truncated(cls, obj: dict, keep: float = 0.5) -> ContentReply:
        """The first ``keep`` fraction of the JSON text, as if max_tokens cut it off."""
        text = json.dumps(obj)
        return cls(text[: max(1, int(len(text) * keep))])


@dataclass(frozen=True)
class ErrorReply:
    """Answer with an HTTP error. ``body``: None gives an OpenAI-style error JSON
    with ``message``, a dict is sent as JSON, a str is sent raw (e.g. HTML)."""
    status: int = 503
    body: str | dict | None = None
    headers: Mapping[str, str] | None = None
    message: str = "scripted error"


@dataclass(frozen=True)
class DelayReply:
    """Sleep ``seconds``, then answer ``then`` (None = the default rule)."""
    seconds: float
    then: Reply = None


# A bare str is content, a dict is JSON-dumped content, None is the default rule.
Reply = Union[str, dict, ContentReply, ErrorReply, DelayReply, None]
Responder = Callable[[dict, dict[str, str], str, str], Awaitable[Reply]]


def hang(seconds: float = 3600.0) -> DelayReply:
    """A reply that stalls long enough for the client to time out."""
    return DelayReply(seconds)


def make_verdict(verdict: str = "SAFE", *, mode: str = BINARY, violations: Iterable[str] = (),
                 evidence: Iterable[str] = (), reasoning: str | None = None) -> dict:
    """A well-formed judge answer dict (severity 1 when SAFE, 4 when UNSAFE in scale mode)."""
    answer: dict[str, Any] = {"verdict": verdict, "violations": list(violations),
                              "evidence_spans": list(evidence)}
    if mode == SCALE:
        answer["severity"] = 4 if verdict == "UNSAFE" else 1
    if reasoning is not None:
        answer["reasoning"] = reasoning
    return answer


def _message_text(message: Any) -> str:
    if not isinstance(message, Mapping):
        return ""
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


def parse_prompt(body: Mapping) -> tuple[str, dict[str, str]]:
    """Return ``(metric, fields)`` found in the user messages.

    The first occurrence wins because a repair retry appends a user message
    that repeats neither the metric nor the fences.
    """
    metric, fields = "", {}
    for message in body.get("messages") or ():
        if not isinstance(message, Mapping) or message.get("role") != "user":
            continue
        text = _message_text(message)
        for _nonce, name, value in FIELD_RE.findall(text):
            fields.setdefault(name, value)
        # Search outside the fences so judged text cannot spoof the metric line.
        found = METRIC_RE.search(FIELD_RE.sub("", text))
        if found and not metric:
            metric = found.group(1)
    return metric, fields


def answer_shape(body: Mapping) -> tuple[str, bool]:
    """``(mode, reasoning)`` from the response schema: ``scale_1_5`` when it has a
    ``severity`` property (else binary); reasoning when it has ``reasoning``."""
    fmt = body.get("response_format")
    spec = fmt.get("json_schema") if isinstance(fmt, Mapping) else None
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    props = props if isinstance(props, Mapping) else {}
    return (SCALE if "severity" in props else BINARY), "reasoning" in props


def rule_verdict(metric: str, fields: Mapping[str, str], mode: str, *, reasoning: bool,
                 triggers: Mapping[str, Iterable[str]] = DEFAULT_TRIGGERS) -> dict:
    """The default deterministic judgement of ``fields["output"]`` for ``metric``."""
    text = fields.get("output", "")
    hits = []
    for word in triggers.get(metric.lower(), ()):
        # A regex search keeps the original casing of the evidence span.
        found = re.search(re.escape(word), text, re.IGNORECASE)
        if found:
            hits.append((found.start(), word.lower(), found.group(0)))
    hits.sort()  # text order keeps answers deterministic across set orderings
    why = ((f"Rule judge: output contains {metric} trigger '{hits[0][1]}'." if hits
            else f"Rule judge: no {metric or 'metric'} trigger words in output.")
           if reasoning else None)
    return make_verdict("UNSAFE" if hits else "SAFE", mode=mode, reasoning=why,
                        violations=[f"{metric} trigger: {word}" for _, word, _ in hits],
                        evidence=[span for _, _, span in hits])


def _completion(request_body: Mapping, content: str) -> dict:
    prompt_chars = sum(len(_message_text(m)) for m in request_body.get("messages") or ())
    prompt_tokens, completion_tokens = max(1, prompt_chars // 4), max(1, len(content) // 4)
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
            "created": int(time.time()), "model": request_body.get("model", "test-judge"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class JudgeServer:
    """The stand-in judge. Knobs are plain attributes read per request, so they can
    change at runtime, also from another thread. ``triggers`` is merged over
    ``DEFAULT_TRIGGERS`` (``{"pii": ["ssn"]}`` adds a metric, ``{"toxicity": []}``
    disables one); ``latency`` (seconds) delays every call. Replies come from the
    script queue first, then ``responder``, then the rule judge."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 triggers: Mapping[str, Iterable[str]] | None = None,
                 responder: Responder | None = None, outage_status: int = 503,
                 max_recorded: int = 10_000) -> None:
        self.host, self.port, self.latency, self.responder = host, port, latency, responder
        self.outage, self.outage_status = False, outage_status
        self.triggers: dict[str, frozenset[str]] = dict(DEFAULT_TRIGGERS)
        for metric, words in (triggers or {}).items():
            self.triggers[metric.lower()] = frozenset(w.lower() for w in words)
        # Bodies only, never headers: the Authorization header carries a key.
        self.requests: collections.deque[dict] = collections.deque(maxlen=max_recorded)
        self.calls = self.errors = 0
        self._script: collections.deque[Reply] = collections.deque()  # thread-safe ends
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set in thread mode
        self._thread: threading.Thread | None = None

    def script(self, *replies: Reply) -> JudgeServer:
        """Queue replies for the next calls, in order (None = default rule)."""
        self._script.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        return len(self._script)

    def set_outage(self, on: bool = True, status: int | None = None) -> None:
        """While on, every call answers ``status`` (default ``outage_status``)."""
        if status is not None:
            self.outage_status = status
        self.outage = on

    def reset(self) -> None:
        """Forget recorded calls, counters and pending script; end any outage."""
        self._script.clear()
        self.requests.clear()
        self.calls = self.errors = 0
        self.outage = False

    @property
    def api_base(self) -> str:
        """``http://127.0.0.1:PORT/v1``; valid once started."""
        if self._runner is None:
            raise RuntimeError("JudgeServer is not running")
        return f"http://{self.host}:{self.port}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._error(ErrorReply(400, message="body must be a JSON object"))
        self.requests.append(body)
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        if self.outage:  # checked after the delay: a flaky upstream is slow too
            return self._error(ErrorReply(self.outage_status, message="judge outage"))
        if body.get("stream"):
            return self._error(ErrorReply(400, message="streaming is not supported"))
        metric, fields = parse_prompt(body)
        mode, reasoning = answer_shape(body)
        try:
            reply = await self._choose(body, fields, metric, mode)
        except Exception:  # a broken test responder should surface as a 500
            log.exception("judge_server responder failed")
            return self._error(ErrorReply(500, message="responder failed"))
        while isinstance(reply, DelayReply):
            await asyncio.sleep(reply.seconds)
            reply = reply.then
        if reply is None:
            reply = rule_verdict(metric, fields, mode, reasoning=reasoning,
                                 triggers=self.triggers)
        return self._render(body, reply)

    async def _choose(self, body: dict, fields: dict[str, str], metric: str,
                      mode: str) -> Reply:
        try:  # popleft, not a length check: another thread may script concurrently
            return self._script.popleft()
        except IndexError:
            pass
        if self.responder is None:
            return None
        return await self.responder(body, fields, metric, mode)

    def _render(self, body: dict, reply: Reply) -> web.Response:
        if isinstance(reply, ErrorReply):
            return self._error(reply)
        if isinstance(reply, ContentReply):
            reply = reply.content
        if isinstance(reply, dict):
            reply = json.dumps(reply)
        if not isinstance(reply, str):
            return self._error(ErrorReply(500, message=f"bad reply {type(reply).__name__}"))
        return web.json_response(_completion(body, reply))

    def _error(self, reply: ErrorReply) -> web.Response:
        self.errors += 1
        status, headers = reply.status, dict(reply.headers or {})
        if isinstance(reply.body, str):
            return web.Response(status=status, text=reply.body, headers=headers)
        body = reply.body if reply.body is not None else {"error": {
            "message": reply.message, "type": "judge_server_error", "code": status}}
        return web.json_response(body, status=status, headers=headers)

    async def start(self) -> JudgeServer:
        """Bind and serve on the running loop; ``port=0`` picks a free port."""
        app = web.Application(client_max_size=64 * 1024 * 1024)  # big judged texts
        for path in ("/v1/chat/completions", "/chat/completions"):
            app.router.add_post(path, self._handle)
        # No access log (keeps headers out of logs); cancel handlers whose client
        # gave up so hangs end with the client's timeout.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True,
                               shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def aclose(self) -> None:
        """Stop serving; in-flight calls get a short grace period, then are cancelled."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> JudgeServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def start_in_thread(self, timeout: float = 10.0) -> JudgeServer:
        """Serve from a daemon thread with its own loop, for sync code."""
        ready, failure = threading.Event(), []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # hand bind errors to the caller
                failure.append(exc)
            ready.set()
            if not failure:
                loop.run_forever()
                loop.run_until_complete(self.aclose())
            loop.close()

        self._thread = threading.Thread(target=run, name="judge-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError("JudgeServer thread did not start in time")
        if failure:
            self._thread.join()
            raise failure[0]
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a server started with ``start_in_thread``."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        self._thread = self._loop = None

    def __enter__(self) -> JudgeServer:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _serve(args: argparse.Namespace) -> None:
    triggers: dict[str, set[str]] = {}
    for item in args.trigger:
        metric, _, word = item.partition("=")
        triggers.setdefault(metric, set(DEFAULT_TRIGGERS.get(metric.lower(), ()))).add(word)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    async with JudgeServer(host=args.host, port=args.port, triggers=triggers,
                           latency=args.latency_ms / 1000.0) as server:
        print(server.api_base, flush=True)  # first line: parents read the URL
        await done.wait()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="Scriptable stand-in LLM judge.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--trigger", action="append", default=[], metavar="METRIC=WORD",
                        help="add a trigger word for a metric (repeatable)")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
