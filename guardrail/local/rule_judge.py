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
    server.p_unsafe["toxicity"] = 0.7       # logprobs: P(UNSAFE) at the verdict (see
    server.logprobs = False                 # rule_logprobs); or a provider without them
    # subprocess: first stdout line is the base URL; serves until SIGTERM/SIGINT
    python -m guardrail.local.rule_judge --port 0 --latency-ms 50 --trigger pii=ssn
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import random
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import orjson
from aiohttp import web

# The answers (reply types, prompt reading, word rules) live in rule_answers;
# they are re-exported here, where tests and benchmarks have always found them.
from .rule_answers import (DEFAULT_TRIGGERS, ContentReply, DelayReply, ErrorReply, Reply,
                           answer_shape, hang, make_verdict, message_text, parse_prompt,
                           requested_metrics, rule_answer, rule_verdict)
from .rule_logprobs import choice_logprobs, steer_answer

__all__ = ["JudgeServer", "ThreadServing", "ContentReply", "ErrorReply", "DelayReply", "Reply",
           "Responder", "hang", "make_verdict", "rule_verdict", "rule_answer", "requested_metrics",
           "parse_prompt", "answer_shape", "DEFAULT_TRIGGERS", "main", "rule_completion"]

log = logging.getLogger(__name__)

Responder = Callable[[dict, dict[str, str], str, str], Awaitable[Reply]]


def _prompt_text(body: Mapping) -> str:
    return "".join(message_text(m) for m in body.get("messages") or ())


def _completion(request_body: Mapping, content: str, cached_tokens: int | None,
                logprobs: dict | None = None) -> dict:
    prompt_tokens = max(1, len(_prompt_text(request_body)) // 4)
    completion_tokens = max(1, len(content) // 4)
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens,
                             "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": min(cached_tokens, prompt_tokens)}
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
            "created": int(time.time()), "model": request_body.get("model", "test-judge"),
            "choices": [choice], "usage": usage}


def rule_completion(body: Mapping, content: str, *, p_unsafe: Mapping[str, float],
                    logprobs: bool = True, cached_tokens: int | None = None) -> dict:
    """The chat-completions response body this stand-in answers ``content`` with
    (log-probabilities when asked for and ``logprobs``); the stand-in batch
    server of the tests writes the same into its output files::

        body = rule_completion(request, json.dumps(answer), p_unsafe={})
    """
    tokens = (choice_logprobs(body, content, dict(p_unsafe))
              if logprobs and body.get("logprobs") else None)
    return _completion(body, content, cached_tokens, tokens)


def _dumps(data: Any) -> str:
    return orjson.dumps(data).decode()


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] matches, a[:high] does not
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if a[:mid] == b[:mid] else (low, mid)
    return low


class ThreadServing:
    """The lifecycle of an aiohttp stand-in whose ``start()`` sets ``_runner``:
    ``await aclose()`` / ``async with`` on the running loop, or
    ``start_in_thread()`` / ``stop()`` / ``with`` from a daemon thread with its
    own loop, so sync code and worker subprocesses can call it."""

    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    async def aclose(self) -> None:
        """Stop serving; in-flight calls get a short grace period, then are cancelled."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Any:
        return await self.start()  # type: ignore[attr-defined]

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Any:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_in_thread(self, timeout: float = 10.0) -> Any:
        """Serve from a daemon thread with its own loop, for sync code."""
        ready, failure = threading.Event(), []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.start())  # type: ignore[attr-defined]
            except BaseException as exc:  # hand bind errors to the caller
                failure.append(exc)
            ready.set()
            if not failure:
                loop.run_forever()
                loop.run_until_complete(self.aclose())  # type: ignore[attr-defined]
            loop.close()

        name = type(self).__name__
        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"{name} thread did not start in time")
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


class JudgeServer(ThreadServing):
    """The stand-in judge. Knobs are plain attributes read per request, so they can
    change at runtime, also from another thread. ``triggers`` is merged over
    ``DEFAULT_TRIGGERS`` (``{"pii": ["ssn"]}`` adds a metric, ``{"toxicity": []}``
    disables one); ``latency`` (seconds) delays every call, by a uniformly random
    time up to ``latency_max`` when that is larger. Replies come from the
    script queue first, then ``responder``, then the rule judge.

    A several-metric call (``requested_metrics``) gets one entry per metric: a
    scripted reply is the whole answer; ``responder`` is asked once per metric,
    a dict or None being that metric's entry and anything else (an error, a
    delay, raw content) the reply to the whole call. With ``prefix_cache`` the
    usage reports ``prompt_tokens_details.cached_tokens``: the longest prefix
    this prompt shares with an earlier one, in the same 4-characters-a-token
    units as ``prompt_tokens`` (as a provider's prompt cache would). A request
    asking for ``logprobs`` gets them (unless ``logprobs`` is False), with
    P(UNSAFE) per metric from ``p_unsafe`` or a ``p_unsafe=`` marker in the
    output, which the default rule's verdict then follows
    (:mod:`~guardrail.local.rule_logprobs`)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 latency_max: float = 0.0,
                 triggers: Mapping[str, Iterable[str]] | None = None,
                 responder: Responder | None = None, outage_status: int = 503,
                 max_recorded: int = 10_000, prefix_cache: bool = False) -> None:
        self.host, self.port, self.latency, self.responder = host, port, latency, responder
        self.latency_max = latency_max
        self.prefix_cache = prefix_cache
        #: Answer ``logprobs`` when asked (False: a provider that has none).
        self.logprobs = True
        #: P(UNSAFE) by metric name (``"*"``: any metric) at the verdict token.
        self.p_unsafe: dict[str, float] = {}
        self._prompts: collections.deque[str] = collections.deque(maxlen=64)
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
        """Forget recorded calls, counters and pending script; end any outage and
        any set probabilities."""
        self._script.clear()
        self.p_unsafe.clear()
        self.logprobs = True
        self.requests.clear()
        self._prompts.clear()
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
        # The latency counts from the request's arrival: reading its body is
        # part of the judge's time, as it is for a remote server.
        latency = (random.uniform(self.latency, self.latency_max)
                   if self.latency_max > self.latency else self.latency)
        due = asyncio.get_running_loop().time() + latency
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._error(ErrorReply(400, message="body must be a JSON object"))
        self.requests.append(body)
        # The default answer is built while the latency runs: a provider's
        # latency includes its work, so a call takes `latency`, not `latency`
        # plus this stand-in's CPU time (16 answers due together took ~1 ms each,
        # one after another, which benchmarks read as the worker's delay).
        early = None
        if latency > 0:
            early = self._answer_early(body)
            await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
        if self.outage:  # checked after the delay: a flaky upstream is slow too
            return self._error(ErrorReply(self.outage_status, message="judge outage"))
        if early is not None:
            return early
        if body.get("stream"):
            return self._error(ErrorReply(400, message="streaming is not supported"))
        metric, fields = parse_prompt(body)
        try:
            reply = await self._choose(body, fields, metric)
        except Exception:  # a broken test responder should surface as a 500
            log.exception("judge_server responder failed")
            return self._error(ErrorReply(500, message="responder failed"))
        while isinstance(reply, DelayReply):
            await asyncio.sleep(reply.seconds)
            reply = reply.then
        return self._render(body, self._rule_reply(body) if reply is None else reply)

    def _rule_reply(self, body: dict) -> Reply:
        return steer_answer(rule_answer(body, triggers=self.triggers), body, self.p_unsafe)

    def _answer_early(self, body: dict) -> web.Response | None:
        """The word-list answer, when nothing scripted or custom will answer."""
        if self._script or self.responder is not None or body.get("stream"):
            return None
        return self._render(body, self._rule_reply(body))

    async def _choose(self, body: dict, fields: dict[str, str], metric: str) -> Reply:
        try:  # popleft, not a length check: another thread may script concurrently
            return self._script.popleft()
        except IndexError:
            pass
        if self.responder is None:
            return None
        mode, reasoning = answer_shape(body)
        metrics = requested_metrics(body)
        if metrics is None:
            return await self.responder(body, fields, metric, mode)
        entries = {}
        for name in metrics:
            entry = await self.responder(body, fields, name, mode)
            if entry is not None and not isinstance(entry, dict):
                return entry  # an error, a delay or raw content answers the whole call
            entries[name] = entry if entry is not None else rule_verdict(
                name, fields, mode, reasoning=reasoning, triggers=self.triggers)
        return entries

    def _cached_tokens(self, body: dict) -> int | None:
        if not self.prefix_cache:
            return None
        text = _prompt_text(body)
        shared = max((_common_prefix(text, seen) for seen in self._prompts), default=0)
        self._prompts.append(text)
        return shared // 4

    def _render(self, body: dict, reply: Reply) -> web.Response:
        if isinstance(reply, ErrorReply):
            return self._error(reply)
        if isinstance(reply, ContentReply):
            reply = reply.content
        if isinstance(reply, dict):
            reply = json.dumps(reply)
        if not isinstance(reply, str):
            return self._error(ErrorReply(500, message=f"bad reply {type(reply).__name__}"))
        # orjson: an answer with log-probabilities is ~10 KB of JSON, which the
        # stdlib encoder took ~0.2 ms to write; this judge stands in for a remote
        # server, so its own CPU should not show in the worker's figures.
        return web.json_response(rule_completion(
            body, reply, p_unsafe=self.p_unsafe, logprobs=self.logprobs,
            cached_tokens=self._cached_tokens(body)), dumps=_dumps)

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
                           latency=args.latency_ms / 1000.0,
                           latency_max=args.latency_max_ms / 1000.0) as server:
        print(server.api_base, flush=True)  # first line: parents read the URL
        await done.wait()


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description="Scriptable stand-in LLM judge.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--latency-max-ms", type=float, default=0.0,
                        help="each call's latency drawn uniformly from --latency-ms to this")
    parser.add_argument("--trigger", action="append", default=[], metavar="METRIC=WORD",
                        help="add a trigger word for a metric (repeatable)")
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
