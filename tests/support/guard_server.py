"""A stand-in guard model: an OpenAI-compatible server answering as guard models do
(Llama Guard, Granite Guardian, Qwen3Guard, moderation endpoints), and the answer
builders that shape its replies as the model cards show.

In async tests, on the test's loop::

    server = await GuardServer().start()
    server.answer = lambda body: llama(0.83)     # or server.script.append(Answer(...))
    ...                                          # judge against server.api_base
    server.requests                              # the bodies it got, in order
    await server.aclose()

For worker subprocesses (sync code), served from a thread with its own loop::

    with GuardServer(answer=lambda body: llama(0.1)) as guard:
        env = StreamEnv(bootstrap, guard.api_base, tmp_path, judge_protocol="llama_guard")

Replies come from ``script`` first, then ``answer(body)``. A moderation request
may carry a list of inputs: with ``moderate`` set, the reply holds
``moderate(text)`` as the result of each input in turn (return anything to
answer one input with garbage; script a short body or a status to fail a whole
request)::

    server.moderate = lambda text: moderation_result({"hate": 0.9 if "vermin" in text else 0.1})
    server.script.append(Answer(status=500))    # the next request fails as a whole
    server.inputs()                              # every input sent, request by request

Every reply reports
``usage(body, answer)`` tokens (``PROMPT`` and ``COMPLETION`` unless replaced);
``latency`` seconds delay each call. The request log is kept under a lock, so the
test thread can read it while the server's thread appends.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from guardrail.local.rule_judge import ThreadServing

__all__ = ["Answer", "GuardServer", "llama", "yes_no", "qwen",
           "moderation_body", "moderation_result", "PROMPT", "COMPLETION"]

PROMPT, COMPLETION = 120, 3  # tokens every answer reports unless ``usage`` says otherwise


@dataclass
class Answer:
    """One reply: chat content split into ``pieces`` (tokens), alternatives ``top``
    at token ``at``; or a status; or a moderation body."""

    content: str | None = None
    pieces: tuple = ()
    at: int | None = None
    top: tuple = ()
    reasoning: str | None = None
    status: int = 200
    body: object = None


def _logprobs(answer: Answer) -> dict[str, Any]:
    pieces = answer.pieces or (answer.content,)
    entries = []
    for i, piece in enumerate(pieces):
        top = [{"token": t, "logprob": math.log(max(p, 1e-9)), "bytes": list(t.encode())}
               for t, p in answer.top] if i == answer.at else []
        chosen = top[0]["logprob"] if top else 0.0
        entries.append({"token": piece, "logprob": chosen, "bytes": list(piece.encode()),
                        "top_logprobs": top})
    return {"content": entries}


def _fixed_usage(body: dict, answer: Answer) -> tuple[int, int]:
    return PROMPT, COMPLETION


class GuardServer(ThreadServing):
    """The stand-in: on the running loop (``async with``, or ``await start()`` and
    ``await aclose()``), or from a thread of its own for sync code and worker
    subprocesses (``with``)."""

    def __init__(self, answer: Callable[[dict], Answer] | None = None) -> None:
        self.script: deque[Answer] = deque()
        self.answer = answer
        self.moderate: Callable[[str], Any] | None = None
        self.usage: Callable[[dict, Answer], tuple[int, int]] = _fixed_usage
        self.latency = 0.0
        self.api_base = ""
        self._requests: list[dict] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None

    @property
    def requests(self) -> list[dict]:
        """The request bodies so far, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    def inputs(self) -> list[list[str]]:
        """The inputs of each moderation request so far, a lone input as a list of one."""
        return [body["input"] if isinstance(body["input"], list) else [body["input"]]
                for body in self.requests if "input" in body]

    async def start(self) -> GuardServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/moderations", self._moderations)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.api_base = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def _next(self, body: dict,
                    answer: Callable[[dict], Answer] | None = None) -> Answer:
        with self._lock:
            self._requests.append(body)
        if self.latency:
            await asyncio.sleep(self.latency)
        try:  # popleft, not a length check: the test thread may script concurrently
            return self.script.popleft()
        except IndexError:
            answer = answer or self.answer
            assert answer is not None, "GuardServer: nothing scripted and no answer"
            return answer(body)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        answer = await self._next(body)
        if answer.status != 200:
            return web.json_response({"error": {"message": "no"}}, status=answer.status)
        message = {"role": "assistant", "content": answer.content}
        if answer.reasoning is not None:
            message["reasoning_content"] = answer.reasoning
        choice = {"index": 0, "finish_reason": "stop", "message": message}
        if body.get("logprobs") and answer.content:
            choice["logprobs"] = _logprobs(answer)
        prompt, completion = self.usage(body, answer)
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1,
            "model": body["model"], "choices": [choice],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}})

    async def _moderations(self, request: web.Request) -> web.Response:
        moderate = self._moderate_each if self.moderate is not None else None
        answer = await self._next(await request.json(), moderate)
        if isinstance(answer.body, str):
            return web.Response(text=answer.body, status=answer.status)
        return web.json_response(answer.body, status=answer.status)

    def _moderate_each(self, body: dict) -> Answer:
        assert self.moderate is not None
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return Answer(body={"id": "modr-1", "model": body["model"],
                            "results": [self.moderate(text) for text in texts]})


# --- answers as the model cards show them -----------------------------------------

def llama(p: float, codes: str = "S10") -> Answer:
    """Llama Guard 3: a blank line, ``safe`` or ``unsafe`` (with P(unsafe) ``p`` among
    its top alternatives), then the codes line when unsafe."""
    word = "unsafe" if p >= 0.5 else "safe"
    tail = ("\n", codes) if word == "unsafe" else ()
    return Answer("\n\n" + word + "".join(tail), ("\n\n", word, *tail), 1,
                  tuple(sorted([("unsafe", p), ("safe", 1 - p)], key=lambda a: -a[1])))


def yes_no(p: float, tail: str = "") -> Answer:
    """Granite Guardian / ShieldGemma: ``Yes`` (violated) or ``No``, P(Yes) ``p``."""
    word = "Yes" if p >= 0.5 else "No"
    return Answer(word + tail, (word, tail) if tail else (word,), 0,
                  tuple(sorted([("Yes", p), ("No", 1 - p)], key=lambda a: -a[1])))


def qwen(label: str, categories: str, unsafe: float, unsure: float, safe: float) -> Answer:
    """Qwen3Guard-Gen: ``Safety: <label>`` and ``Categories: …``, the label's mass
    split over Unsafe, Controversial and Safe."""
    return Answer(f"Safety: {label}\nCategories: {categories}",
                  ("Safety", ":", f" {label}", f"\nCategories: {categories}"), 2,
                  ((" Unsafe", unsafe), (" Controversial", unsure), (" Safe", safe)))


def moderation_body(scores: dict[str, float]) -> dict[str, Any]:
    """An OpenAI moderation body for one input."""
    return {"id": "modr-1", "model": "omni-moderation-latest",
            "results": [moderation_result(scores)]}


def moderation_result(scores: dict[str, float]) -> dict[str, Any]:
    """One input's entry of ``results``: a category is flagged from 0.5 in this stand-in."""
    return {"flagged": any(s >= 0.5 for s in scores.values()),
            "categories": {k: s >= 0.5 for k, s in scores.items()}, "category_scores": scores}
