"""How guard requests reach the server: the project's transports, plus two additions.

1. ``chat_template_kwargs``: Granite Guardian and ShieldGemma on vLLM / SGLang
   take the risk definition as template arguments in the request body. The
   transports send messages only, so :func:`make_guard_transport` returns
   the same two transports (litellm, direct HTTP) with a request body that
   takes extra fields, set for one call with :func:`extra_body`::

       transport = make_guard_transport(settings)       # like make_transport
       with extra_body({"chat_template_kwargs": {...}}):
           await judge._complete(...)                    # this call's body has them

   The fields are held in a context variable, so concurrent calls never see
   each other's. (When ``Transport.complete`` takes ``extra_body`` itself,
   this module's subclasses can go: see the integration notes.)
2. :class:`ModerationTransport`: ``POST {api_base}/moderations`` through the
   direct client's connection pool, shaped as a :class:`Transport` so the
   judge's retries, timeouts, error classes and timing apply unchanged. Its
   answer text is the response body; it reports the tokens the endpoint
   reports (usually none).

   Calls made at the same time share a request of up to ``judge_batch_size``
   inputs (:class:`~guardrail.judges.micro_batch.MicroBatcher`): each call
   still answers for its own message — its own ``results[i]`` as the body,
   its share of the reported tokens, its own error — so a retry sends only
   the messages that failed, in whatever request they join next. A call
   alone in its request sends ``"input": text`` as before; with
   ``judge_batch_size: 1`` every call does, without queueing.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from .settings import JudgeSettings
from .micro_batch import MicroBatcher
from .protocols.base import GuardAnswerError
from .protocols.moderation import share_tokens, split_results
from .transports import (Completion, HTTPTransport, LiteLLMTransport, OpenAICompatibleClient,
                          Transport, uses_direct_http)

__all__ = ["extra_body", "make_guard_transport", "GuardHTTPTransport", "GuardLiteLLMTransport",
           "ModerationTransport", "DEFAULT_MODERATION_BASES", "BATCH_LINGER"]

_EXTRA: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "guard_extra_body", default=None)

#: Where a moderation model without ``judge_api_base`` is sent, by provider prefix.
DEFAULT_MODERATION_BASES = {"openai/": "https://api.openai.com/v1",
                            "mistral/": "https://api.mistral.ai/v1"}
#: Seconds a moderation request waits for more messages after its first: the
#: worker starts a batch's messages within a few loop turns of each other, and
#: an endpoint's round trip (~100 ms) dwarfs this wait.
BATCH_LINGER = 0.005


@contextlib.contextmanager
def extra_body(fields: Mapping[str, Any] | None) -> Iterator[None]:
    """Merge ``fields`` into the request body of the calls made inside (this task only)."""
    token = _EXTRA.set(fields)
    try:
        yield
    finally:
        _EXTRA.reset(token)


class GuardHTTPTransport(HTTPTransport):
    """:class:`~guardrail.judges.transports.HTTPTransport` with :func:`extra_body` fields."""

    async def _send(self, body: dict[str, Any]) -> Completion:
        fields = _EXTRA.get()
        return await super()._send({**body, **fields} if fields else body)


class GuardLiteLLMTransport(LiteLLMTransport):
    """:class:`~guardrail.judges.transports.LiteLLMTransport` with :func:`extra_body` fields
    (litellm passes ``extra_body`` on to OpenAI-compatible servers)."""

    async def _send(self, kwargs: dict[str, Any]) -> Any:
        fields = _EXTRA.get()
        return await super()._send({**kwargs, "extra_body": dict(fields)} if fields else kwargs)


def make_guard_transport(settings: JudgeSettings) -> Transport:
    """The transport :func:`~guardrail.judges.transports.make_transport` would pick, able
    to send :func:`extra_body` fields."""
    if uses_direct_http(settings.transport, settings.model, settings.api_base):
        return GuardHTTPTransport(settings)
    return GuardLiteLLMTransport(settings)


class ModerationTransport(HTTPTransport):
    """A moderation endpoint as a :class:`~guardrail.judges.transports.Transport`: the
    last message's text is the ``input``; the answer is the response body. Errors,
    their classification and closing are the direct HTTP transport's."""

    def __init__(self, settings: JudgeSettings) -> None:
        self._settings = settings
        self._logprobs = False  # a moderation endpoint has none to give
        prefix, _, self._model = settings.model.partition("/")
        if not self._model:  # no provider prefix: the name is the server's
            prefix, self._model = "", settings.model
        base = settings.api_base or DEFAULT_MODERATION_BASES.get(prefix + "/")
        if not base:
            raise ValueError(f"moderation model {settings.model!r} needs judge_api_base "
                             "(no default endpoint for its provider)")
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        self._client = OpenAICompatibleClient(base, api_key=key)
        # The client posts to its url; a moderation endpoint sits beside chat.
        self._client.url = base.rstrip("/") + "/moderations"
        # judge_concurrency counts requests here: the judge lets that many
        # batches' worth of calls in (GuardJudge), this lets that many requests out.
        self._batches = MicroBatcher(self._post, size=settings.batch_size,
                                     linger=BATCH_LINGER, slots=settings.concurrency)

    @property
    def url(self) -> str:
        return self._client.url

    async def complete(self, messages: list[dict[str, str]], response_format: Any = None,
                       max_tokens: int | None = None) -> Completion:
        text = messages[-1]["content"] if messages else ""
        if self._settings.batch_size > 1:
            return await self._batches.submit(text)
        (outcome,) = await self._post([text])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _post(self, texts: list[str]) -> list[Completion | GuardAnswerError]:
        """One request for ``texts``; each text's answer, or its error, in order."""
        alone = len(texts) == 1  # the request a single message always made
        data = await self._client.complete(
            {"model": self._model, "input": texts[0] if alone else texts},
            timeout=self._settings.timeout)
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
        prompt = prompt if isinstance(prompt, int) and prompt >= 0 else 0
        if alone:  # the whole body, as parsed before requests were shared
            return [Completion(orjson.dumps(data).decode(), prompt, 0)]
        bodies = split_results(data, len(texts))
        tokens = share_tokens(prompt, [len(text) for text in texts])
        return [GuardAnswerError(f"guard judge {self._settings.model}: {body}")
                if isinstance(body, GuardAnswerError)
                else Completion(orjson.dumps(body).decode(), share, 0)
                for body, share in zip(bodies, tokens)]

    async def aclose(self) -> None:
        await self._batches.aclose()
        await super().aclose()
