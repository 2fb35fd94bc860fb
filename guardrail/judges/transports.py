"""How a judge request reaches the model: through litellm, or posted directly.

A :class:`Transport` sends one chat request and says how its failures count;
the judge (:class:`guardrail.judges.llm.LLMJudge`) adds retries, the repair retry,
pricing and the concurrency limit on top. :func:`make_transport` picks one,
once, from :class:`~guardrail.config.settings.JudgeSettings`::

    transport = make_transport(settings.judge)      # "litellm" or "http"
    completion = await transport.complete(messages, response_format)
    completion.content, completion.prompt_tokens
    completion.logprobs      # the answer's tokens with their top alternatives, or None
    await transport.aclose()

Why two: profiled in ``bench/``, litellm's per-call path (thread hops, logging
and cost hooks) took ~60 % of a worker's CPU and capped a 2-core worker near
130 judge calls/s. When the judge is a self-hosted OpenAI-compatible server
(vLLM, llama.cpp, Ollama's ``/v1``, a proxy), the request is plain JSON, so
:class:`HTTPTransport` posts it itself over pooled keep-alive connections
(:mod:`guardrail.judges.http1`, leaner per call than aiohttp). Every
other provider goes through :class:`LiteLLMTransport`.

Log-probabilities (``judge_logprobs``, on by default) are asked for with
``logprobs: true, top_logprobs: 5``: always on the direct path, through
litellm only for providers it says take both (Anthropic, Bedrock, Ollama and
OpenAI's reasoning models do not, and keep working without). A server that
refuses them with a 400 naming ``logprobs`` is asked again without, and not
asked for them again.
"""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any, Protocol

import aiohttp
import orjson

from ..providers.litellm import litellm
from ..errors import ConfigError
from .answers import (Completion, HTTPStatusError, _count, answer_object, completion_from_json,
                      decode_completion)
from .http1 import HTTP1Client, HTTPConnectionError
from ..judging.probability import TOP_LOGPROBS, read_logprobs
from .settings import JudgeSettings

__all__ = ["Completion", "Transport", "LiteLLMTransport", "HTTPTransport", "HTTPStatusError",
           "OpenAICompatibleClient", "make_transport", "uses_direct_http", "status_of",
           "CONFIG_SETTINGS", "chat_body", "completion_from_json", "completion_from_response",
           "answer_object"]

#: litellm provider prefixes whose api_base speaks the OpenAI chat API as is.
_OPENAI_COMPATIBLE = ("openai/", "hosted_vllm/")
_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
#: Refused credentials: a wrong or missing key fails every call alike. Not an
#: outage to wait out, a setting to fix.
_AUTH_STATUS = {401, 403}
#: How providers say a key is missing before any request is sent (litellm
#: wraps OpenAI's as a 500 and Gemini's as a connection error: both would
#: otherwise be retried and read as an outage).
_MISSING_KEY = re.compile(r"missing (?:[\w-]+ )?(?:credentials|api[ _-]?key)"
                          r"|api[ _-]?key (?:client option )?must be set"
                          r"|no (?:api )?key is set", re.IGNORECASE)
#: litellm's answer to a model string it cannot route.
_NO_PROVIDER = re.compile(r"LLM Provider NOT provided", re.IGNORECASE)

Messages = list[dict[str, str]]


class Transport(Protocol):
    """Send one chat request; classify what went wrong.

    ``complete`` raises whatever its client raises (``max_tokens`` None: the
    setting's; a call for several metrics asks for more); ``is_transient`` says
    whether a retry may help (429, 5xx, timeouts, dropped connections) and
    ``config_setting`` whether the judge is misconfigured (credentials refused
    or missing, unknown model or endpoint), naming the setting to fix (one of
    :data:`CONFIG_SETTINGS`), as opposed to this one request failing.
    """

    name: str
    #: Whether requests ask for log-probabilities (``judge_logprobs`` and the provider).
    asks_logprobs: bool

    async def complete(self, messages: Messages, response_format: dict[str, Any] | None,
                       max_tokens: int | None = None) -> Completion: ...

    def is_transient(self, exc: BaseException) -> bool: ...

    def config_setting(self, exc: BaseException) -> str | None: ...

    async def aclose(self) -> None: ...


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, if any."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _refuses_logprobs(exc: BaseException) -> bool:
    """A 400 that names the log-probability parameters: this server has none."""
    return status_of(exc) == 400 and "logprob" in str(exc).lower()


#: The settings a configuration error can name.
CONFIG_SETTINGS = ("judge_api_key", "judge_model", "judge_api_base")


def _config_setting(exc: BaseException, api_base: str | None) -> str | None:
    """The setting a refused request points at, from its status and wording.

    A 404 that mentions a model is an unknown model (OpenAI, vLLM and Ollama
    all say so); any other 404 from a configured endpoint means the endpoint
    has no chat completions route (a wrong ``api_base`` path).
    """
    status = status_of(exc)
    if status in _AUTH_STATUS or _MISSING_KEY.search(str(exc)):
        return "judge_api_key"
    if status == 404:
        return "judge_api_base" if api_base and "model" not in str(exc).lower() else "judge_model"
    return None


def _transient(exc: BaseException) -> bool:
    # aiohttp's own errors can come through litellm, which may post with aiohttp.
    return (isinstance(exc, (asyncio.TimeoutError, HTTPConnectionError,
                             aiohttp.ClientConnectionError, aiohttp.ClientPayloadError))
            or status_of(exc) in _TRANSIENT_STATUS)


class LiteLLMTransport:
    """Any provider litellm knows (``openai/``, ``anthropic/``, ``ollama/`` …)."""

    name = "litellm"

    def __init__(self, settings: JudgeSettings) -> None:
        self._settings = settings
        #: None until the first call looks it up (importing litellm takes seconds).
        self._logprobs: bool | None = None if settings.logprobs else False

    @property
    def asks_logprobs(self) -> bool:
        """Whether requests ask for log-probabilities: on, and litellm says the
        provider takes both parameters (``drop_params`` would drop them
        silently otherwise; this way the judge knows not to expect them)."""
        if self._logprobs is None:
            self._logprobs = _litellm_takes_logprobs(self._settings.model)
        return self._logprobs

    async def complete(self, messages: Messages, response_format: dict[str, Any] | None,
                       max_tokens: int | None = None) -> Completion:
        s = self._settings
        kwargs: dict[str, Any] = {
            "model": s.model, "messages": messages, "temperature": s.temperature,
            "max_tokens": max_tokens or s.max_tokens, "timeout": s.timeout,
            # Retries are the judge's (with backoff and outage detection), not the SDK's.
            "num_retries": 0, "max_retries": 0, "drop_params": True,
        }
        if response_format is not None:
            kwargs["response_format"] = copy.deepcopy(response_format)  # litellm may annotate it
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.api_key is not None:
            kwargs["api_key"] = s.api_key.get_secret_value()
        if self.asks_logprobs:
            kwargs.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return completion_from_response(await self._send(kwargs))

    async def _send(self, kwargs: dict[str, Any]) -> Any:
        try:
            return await litellm().acompletion(**kwargs)
        except Exception as exc:  # only a refusal of logprobs is handled here
            if "logprobs" not in kwargs or not _refuses_logprobs(exc):
                raise
        self._logprobs = False  # refused once: never asked for again
        return await litellm().acompletion(**_without_logprobs(kwargs))

    def is_transient(self, exc: BaseException) -> bool:
        lm = litellm()
        return _transient(exc) or isinstance(exc, (
            lm.Timeout, lm.RateLimitError, lm.APIConnectionError, lm.ServiceUnavailableError,
            lm.InternalServerError, lm.BadGatewayError))

    def config_setting(self, exc: BaseException) -> str | None:
        lm = litellm()
        if isinstance(exc, (lm.AuthenticationError, lm.PermissionDeniedError)):
            return "judge_api_key"
        if _NO_PROVIDER.search(str(exc)):
            return "judge_model"
        return _config_setting(exc, self._settings.api_base)

    async def aclose(self) -> None:
        """Nothing to release: litellm keeps its own clients."""


class HTTPTransport:
    """A self-hosted OpenAI-compatible server, posted to directly."""

    name = "http"

    def __init__(self, settings: JudgeSettings) -> None:
        self._settings = settings
        key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        self._client = OpenAICompatibleClient(str(settings.api_base), api_key=key)
        self._logprobs = settings.logprobs

    @property
    def asks_logprobs(self) -> bool:
        """Whether requests ask for log-probabilities (until a server refuses them)."""
        return self._logprobs

    async def complete(self, messages: Messages, response_format: dict[str, Any] | None,
                       max_tokens: int | None = None) -> Completion:
        body = chat_body(self._settings, messages, response_format, max_tokens,
                         logprobs=self._logprobs)
        return await self._send(body)

    async def _send(self, body: dict[str, Any]) -> Completion:
        timeout = self._settings.timeout
        try:
            return decode_completion(*await self._client.post(body, timeout=timeout))
        except HTTPStatusError as exc:
            if "logprobs" not in body or not _refuses_logprobs(exc):
                raise
        self._logprobs = False  # refused once: never asked for again
        return decode_completion(*await self._client.post(_without_logprobs(body),
                                                         timeout=timeout))

    def is_transient(self, exc: BaseException) -> bool:
        return _transient(exc)

    def config_setting(self, exc: BaseException) -> str | None:
        return _config_setting(exc, self._settings.api_base)

    async def aclose(self) -> None:
        await self._client.aclose()


def completion_from_response(response: Any) -> Completion:
    """A litellm ``ModelResponse`` as a :class:`Completion` (missing parts None or 0);
    the batch path reads litellm's translation of an Anthropic answer with it too."""
    tokens = getattr(response, "usage", None)
    try:
        choice = response.choices[0]
        content = choice.message.content
    except (AttributeError, IndexError):
        choice = content = None
    details = getattr(tokens, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None)
              or getattr(tokens, "cache_read_input_tokens", None))
    return Completion(content, _count(getattr(tokens, "prompt_tokens", 0)),
                      _count(getattr(tokens, "completion_tokens", 0)), _count(cached),
                      read_logprobs(getattr(choice, "logprobs", None)))


def chat_body(settings: JudgeSettings, messages: Messages, response_format: dict[str, Any] | None,
              max_tokens: int | None = None, *, logprobs: bool) -> dict[str, Any]:
    """One judge call's chat body: HTTPTransport posts it, a batch line carries it."""
    body: dict[str, Any] = {
        # The provider prefix is litellm's routing, not the server's model name.
        "model": settings.model.split("/", 1)[-1], "messages": messages,
        "temperature": settings.temperature, "max_tokens": max_tokens or settings.max_tokens,
    }
    if response_format is not None:
        body["response_format"] = response_format
    if logprobs:
        body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
    return body


def _litellm_takes_logprobs(model: str) -> bool:
    try:
        params = litellm().get_supported_openai_params(model=model)
    except Exception:  # a model litellm cannot route: the call itself will say so
        return False
    return bool(params) and {"logprobs", "top_logprobs"} <= set(params)


def _without_logprobs(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k not in ("logprobs", "top_logprobs")}


def uses_direct_http(transport: str, model: str, api_base: str | None) -> bool:
    """Whether a judge with these settings posts directly (see module doc).

    ``auto`` picks the direct path only for an explicit ``api_base`` with an
    OpenAI-compatible provider prefix: hosted APIs keep litellm's handling.
    """
    if transport == "litellm":
        return False
    compatible = model.startswith(_OPENAI_COMPATIBLE) and bool(api_base)
    if transport == "http" and not compatible:
        raise ConfigError("judge_transport=http needs judge_api_base and an 'openai/' or "
                          f"'hosted_vllm/' judge_model (got {model!r})")
    return compatible


def make_transport(settings: JudgeSettings) -> Transport:
    """The transport ``settings.transport`` asks for (``auto``: see :func:`uses_direct_http`)."""
    if uses_direct_http(settings.transport, settings.model, settings.api_base):
        return HTTPTransport(settings)
    return LiteLLMTransport(settings)


class OpenAICompatibleClient:
    """POST ``{api_base}/chat/completions``; one connection pool per event loop::

        client = OpenAICompatibleClient("http://127.0.0.1:8000/v1", api_key=None)
        data = await client.complete({"model": "qwen", "messages": [...]}, timeout=30)
        await client.aclose()

    Requests go through :class:`~guardrail.judges.http1.HTTP1Client`, a lean
    keep-alive client (a call per judged message: its CPU is the worker's).
    Errors: :class:`HTTPStatusError` carries ``status_code``; connection
    failures are :class:`~guardrail.judges.http1.HTTPConnectionError`; a slow
    server is ``TimeoutError``.
    """

    def __init__(self, api_base: str, *, api_key: str | None) -> None:
        headers = {"Content-Type": "application/json", "User-Agent": "guardrail"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = HTTP1Client(api_base.rstrip("/") + "/chat/completions", headers=headers)

    @property
    def url(self) -> str:
        """Where requests go (a moderation client points it at ``/moderations``)."""
        return self._http.url

    @url.setter
    def url(self, url: str) -> None:
        self._http.url = url

    async def post(self, body: dict[str, Any], *, timeout: float) -> tuple[int, bytes]:
        """The status and undecoded body of one request's answer (an error
        status raises :class:`HTTPStatusError`)."""
        status, raw = await self._http.post(orjson.dumps(body), timeout=timeout)
        if status >= 400:
            raise HTTPStatusError(status, raw.decode("utf-8", "replace"))
        return status, raw

    async def complete(self, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The decoded JSON response of one chat completion request."""
        return answer_object(*await self.post(body, timeout=timeout))

    async def aclose(self) -> None:
        """Close the pool (idempotent)."""
        await self._http.aclose()
