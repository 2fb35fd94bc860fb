"""The LLM judge: one rubric, one case, one validated answer.

A judge is any async callable matching :class:`Judge`; :class:`LiteLLMJudge`
reaches every provider litellm knows (``openai/...``, ``anthropic/...``,
``ollama/...``, ``hosted_vllm/...``)::

    judge = LiteLLMJudge(load_settings(judge_model="openai/gpt-4o-mini"))
    reply = await judge(prompt, scoring_mode="binary_yes_no", include_reasoning=False)
    reply.answer.verdict   # "SAFE" | "UNSAFE"

Calls share one concurrency limit, have a timeout, and retry 429/5xx/timeouts
with backoff. A self-hosted OpenAI-compatible judge (``openai/`` or
``hosted_vllm/`` with ``judge_api_base``) is called over plain HTTP instead of
through litellm (``judge_transport``; see :mod:`guardrail.judge_http`). A
garbled answer gets one repair retry; anything still invalid raises
:class:`JudgeAnswerError` — the caller records it as the metric's error, never
as SAFE.
"""

from __future__ import annotations

import asyncio
import copy
import random
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from ._litellm import litellm, price_tokens
from .errors import JudgeAnswerError, JudgeError, JudgeUnavailable
from .models import ScoringMode
from .parsing import BinaryAnswer, parse_answer, response_schema
from .prompts import JudgePrompt
from .settings import Settings
from .transports import OpenAICompatibleClient, uses_direct_http

__all__ = ["Judge", "JudgeReply", "Usage", "LiteLLMJudge"]

_REPAIR = (
    "Your previous answer was not valid: {error}. Reply again with only the JSON "
    "object, exactly the keys asked for, no other text."
)
_TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
#: A wrong key, model or endpoint fails every call alike: an outage of the
#: judge, not a property of the message.
_OUTAGE_STATUS = {401, 403, 404}


@dataclass
class Usage:
    """Tokens and price spent on one metric (across a repair retry)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0

    def add(self, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost = None if cost is None or self.cost is None else self.cost + cost


@dataclass(frozen=True)
class JudgeReply:
    answer: BinaryAnswer
    usage: Usage = field(default_factory=Usage)


class Judge(Protocol):
    """Judge one rendered prompt. Raise :class:`JudgeError` (with ``.usage``)."""

    model: str

    async def __call__(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                       include_reasoning: bool) -> JudgeReply: ...


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


class LiteLLMJudge:
    """A :class:`Judge` that calls ``litellm.acompletion`` (or, for a self-hosted
    OpenAI-compatible server, posts the same request itself)."""

    def __init__(self, settings: Settings) -> None:
        self.model = settings.judge_model
        self._settings = settings
        self._limit = asyncio.Semaphore(settings.judge_concurrency)
        self._secret = settings.judge_api_key.get_secret_value() if settings.judge_api_key else None
        self._http: OpenAICompatibleClient | None = None
        if uses_direct_http(settings.judge_transport, settings.judge_model,
                            settings.judge_api_base):
            self._http = OpenAICompatibleClient(str(settings.judge_api_base),
                                                api_key=self._secret)

    @property
    def transport(self) -> str:
        """``"http"`` (direct) or ``"litellm"``."""
        return "http" if self._http is not None else "litellm"

    async def aclose(self) -> None:
        """Release the HTTP connection pool, if any (idempotent)."""
        if self._http is not None:
            await self._http.aclose()

    async def __call__(self, prompt: JudgePrompt, *, scoring_mode: ScoringMode,
                       include_reasoning: bool) -> JudgeReply:
        usage = Usage()
        fmt = response_schema(scoring_mode, include_reasoning)
        messages = list(prompt.messages)
        text = await self._complete(messages, fmt, usage)
        try:
            answer = parse_answer(text, scoring_mode=scoring_mode,
                                  include_reasoning=include_reasoning, judged=prompt.judged)
        except JudgeAnswerError as first:
            messages += [{"role": "assistant", "content": text[:4000]},
                         {"role": "user", "content": _REPAIR.format(error=first)}]
            text = await self._complete(messages, fmt, usage)
            try:
                answer = parse_answer(text, scoring_mode=scoring_mode,
                                      include_reasoning=include_reasoning, judged=prompt.judged)
            except JudgeAnswerError as second:
                raise _with_usage(JudgeAnswerError(f"{second} (after one repair retry)"),
                                  usage) from None
        return JudgeReply(answer=answer, usage=usage)

    def _request(self, messages: list[dict[str, str]], fmt: dict[str, Any]) -> dict[str, Any]:
        s = self._settings
        kwargs: dict[str, Any] = {
            "model": s.judge_model, "messages": messages, "temperature": s.judge_temperature,
            "max_tokens": s.judge_max_tokens, "timeout": s.judge_timeout,
            # Retries are ours (with backoff and outage detection), not the SDK's.
            "num_retries": 0, "max_retries": 0, "drop_params": True,
        }
        if s.judge_structured_output:
            kwargs["response_format"] = copy.deepcopy(fmt)  # litellm may annotate it
        if s.judge_api_base:
            kwargs["api_base"] = s.judge_api_base
        if self._secret:
            kwargs["api_key"] = self._secret
        return kwargs

    async def _complete(self, messages: list[dict[str, str]], fmt: dict[str, Any],
                        usage: Usage) -> str:
        attempts = self._settings.judge_max_retries + 1
        last: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(8.0, 0.25 * 2 ** attempt) * (0.5 + random.random()))
            try:
                return await self._call_once(messages, fmt, usage)
            except JudgeError:
                raise
            except Exception as exc:  # classified below; litellm raises many types
                last = exc
                if not self._is_transient(exc):
                    raise _with_usage(self._classify(exc), usage) from None
        raise _with_usage(JudgeUnavailable(
            f"judge unavailable after {attempts} attempts: {self._describe(last)}"), usage)

    async def _call_once(self, messages: list[dict[str, str]], fmt: dict[str, Any],
                         usage: Usage) -> str:
        timeout = self._settings.judge_timeout + 1.0
        async with self._limit:
            if self._http is not None:
                data = await asyncio.wait_for(self._http.complete(
                    self._http_body(messages, fmt), timeout=self._settings.judge_timeout),
                    timeout=timeout)
                prompt_tokens, completion_tokens, content = _openai_fields(data)
            else:
                response = await asyncio.wait_for(
                    litellm().acompletion(**self._request(messages, fmt)), timeout=timeout)
                prompt_tokens, completion_tokens, content = _litellm_fields(response)
        s = self._settings
        usage.add(prompt_tokens, completion_tokens, price_tokens(
            s.judge_model, prompt_tokens, completion_tokens,
            input_cost_per_token=s.judge_input_cost_per_token,
            output_cost_per_token=s.judge_output_cost_per_token))
        if not isinstance(content, str) or not content.strip():
            raise _with_usage(JudgeAnswerError("judge returned an empty answer"), usage)
        return content

    def _http_body(self, messages: list[dict[str, str]], fmt: dict[str, Any]) -> dict[str, Any]:
        s = self._settings
        body: dict[str, Any] = {
            # The provider prefix is litellm's routing, not the server's model name.
            "model": s.judge_model.split("/", 1)[1], "messages": messages,
            "temperature": s.judge_temperature, "max_tokens": s.judge_max_tokens,
        }
        if s.judge_structured_output:
            body["response_format"] = fmt
        return body

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, (asyncio.TimeoutError, aiohttp.ClientConnectionError,
                            aiohttp.ClientPayloadError)):
            return True
        if self._http is None:
            lm = litellm()
            if isinstance(exc, (lm.Timeout, lm.RateLimitError, lm.APIConnectionError,
                                lm.ServiceUnavailableError, lm.InternalServerError,
                                lm.BadGatewayError)):
                return True
        return _status_of(exc) in _TRANSIENT_STATUS

    def _classify(self, exc: BaseException) -> JudgeError:
        outage = _status_of(exc) in _OUTAGE_STATUS
        if self._http is None:
            lm = litellm()
            outage = outage or isinstance(exc, (lm.AuthenticationError, lm.PermissionDeniedError,
                                                lm.NotFoundError))
        if outage:
            return JudgeUnavailable(f"judge rejected the request: {self._describe(exc)}")
        return JudgeError(f"judge call failed: {self._describe(exc)}")

    def _describe(self, exc: BaseException | None) -> str:
        if exc is None:
            return "unknown error"
        if isinstance(exc, asyncio.TimeoutError):
            return f"timed out after {self._settings.judge_timeout:g}s"
        status = _status_of(exc)
        message = " ".join(str(exc).split())[:300]
        if self._secret:
            message = message.replace(self._secret, "***")
        prefix = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")
        return f"{prefix}: {message}" if message else prefix


def _with_usage(exc: JudgeError, usage: Usage) -> JudgeError:
    exc.usage = usage  # type: ignore[attr-defined]
    return exc


def _litellm_fields(response: Any) -> tuple[int, int, Any]:
    """(prompt tokens, completion tokens, content) of a litellm ModelResponse."""
    tokens = getattr(response, "usage", None)
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError):
        content = None
    return (int(getattr(tokens, "prompt_tokens", 0) or 0),
            int(getattr(tokens, "completion_tokens", 0) or 0), content)


def _openai_fields(data: dict[str, Any]) -> tuple[int, int, Any]:
    """(prompt tokens, completion tokens, content) of an OpenAI JSON response."""
    tokens = data.get("usage")
    tokens = tokens if isinstance(tokens, dict) else {}
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    return (_as_int(tokens.get("prompt_tokens")), _as_int(tokens.get("completion_tokens")),
            content)


def _as_int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
