"""A lean client for OpenAI-compatible chat endpoints (vLLM, llama.cpp, Ollama's
``/v1``, a proxy): one pooled aiohttp session, one POST per call.

Why not litellm here: profiled in ``bench/``, litellm's per-call path (thread
hops, logging and cost hooks) took ~60 % of a worker's CPU and capped a
2-core worker near 130 judge calls/s. When the judge is a self-hosted
OpenAI-compatible server, the request is plain JSON, so the worker posts it
itself. Every other provider keeps going through litellm::

    client = OpenAICompatibleClient("http://127.0.0.1:8000/v1", api_key=None)
    data = await client.complete({"model": "qwen", "messages": [...]}, timeout=30)
    data["choices"][0]["message"]["content"]
    await client.aclose()

Errors keep the shape :class:`guardrail.judge.LiteLLMJudge` classifies:
:class:`HTTPStatusError` carries ``status_code``; connection failures are
``aiohttp.ClientError``; a slow server is ``asyncio.TimeoutError``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson

from .errors import ConfigError

__all__ = ["HTTPStatusError", "OpenAICompatibleClient", "uses_direct_http"]

#: litellm provider prefixes whose api_base speaks the OpenAI chat API as is.
_OPENAI_COMPATIBLE = ("openai/", "hosted_vllm/")


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


class HTTPStatusError(Exception):
    """The server answered with an HTTP error status."""

    def __init__(self, status_code: int, body: str) -> None:
        super().__init__(" ".join(body.split())[:300])
        self.status_code = status_code


class OpenAICompatibleClient:
    """POST ``{api_base}/chat/completions``; one connection pool per event loop."""

    def __init__(self, api_base: str, *, api_key: str | None) -> None:
        self.url = api_base.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session_for_this_loop(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            # No per-host cap: the judge's semaphore is the only limit on calls.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  headers=self._headers)
            self._loop = loop
        return self._session

    async def complete(self, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The decoded JSON response of one chat completion request."""
        session = self._session_for_this_loop()
        async with session.post(self.url, data=orjson.dumps(body),
                                timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            raw = await response.read()
            if response.status >= 400:
                raise HTTPStatusError(response.status, raw.decode("utf-8", "replace"))
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise HTTPStatusError(response.status, "response body is not a JSON object: "
                                  + raw[:200].decode("utf-8", "replace"))
        return data

    async def aclose(self) -> None:
        """Close the pool (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None
